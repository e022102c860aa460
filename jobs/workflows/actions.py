"""What an operator does to a workflow: cancel it, retry its failed nodes, re-arm a node."""

import uuid

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from .. import db
from ..db.sql import UPSTREAM_FAILED
from ..models import AuditEntry, Dependency, Job
from ..states import TERMINAL, WAITING, JobState


def _unsettled(job: Job, upstreams) -> int:
    """How many of `upstreams` (their states) have yet to settle `job`."""
    if job.runs_on_upstream_failure:
        return sum(1 for s in upstreams if s not in TERMINAL)
    return sum(1 for s in upstreams if s != JobState.SUCCEEDED)


def _upstream_states(job_id) -> list[str]:
    # Locked in id order: a finish settling this job either committed before (its state is
    # read here) or waits, and then finds the job waiting again.
    ids = Dependency.objects.filter(downstream_id=job_id).values_list("upstream_id", flat=True)
    rows = Job.objects.filter(id__in=list(ids)).order_by("id")
    if db.engine().locks_rows:
        rows = rows.select_for_update()
    return [r.state for r in rows.only("id", "state")]


def rearm(job_id) -> list[uuid.UUID]:
    """`job_id` was put back in line (a retry): the graph around it waits again.

    The job itself waits if its upstream jobs have not all settled it; jobs that had counted it
    settled count it again; jobs its failure cancelled wait again, and so on downstream.
    Called in the retry's transaction. Returns the ids of the jobs made to wait again.
    """
    job = Job.objects.filter(id=job_id).only("id", "runs_on_upstream_failure").first()
    if (
        job is None
        or not Dependency.objects.filter(Q(downstream_id=job_id) | Q(upstream_id=job_id)).exists()
    ):
        return []
    waiting = _unsettled(job, _upstream_states(job_id))
    if waiting:
        Job.objects.filter(id=job_id, state=JobState.PENDING).update(
            state=JobState.SCHEDULED, waiting_for=waiting
        )
    after = Dependency.objects.filter(upstream_id=job_id).values_list("downstream_id", flat=True)
    Job.objects.filter(
        id__in=list(after), state=JobState.SCHEDULED, runs_on_upstream_failure=True
    ).update(waiting_for=F("waiting_for") + 1)
    rearmed = []
    frontier = [job_id]
    while frontier:
        downstream = Dependency.objects.filter(upstream_id__in=frontier).values_list(
            "downstream_id", flat=True
        )
        candidates = Job.objects.filter(
            id__in=list(downstream), state=JobState.CANCELLED, error_type=UPSTREAM_FAILED
        ).only("id", "runs_on_upstream_failure")
        frontier = []
        for candidate in candidates.order_by("id"):
            waiting = _unsettled(candidate, _upstream_states(candidate.id))
            changed = Job.objects.filter(
                id=candidate.id, state=JobState.CANCELLED, error_type=UPSTREAM_FAILED
            ).update(
                state=JobState.SCHEDULED if waiting else JobState.PENDING,
                waiting_for=waiting,
                finished_at=None,
                run_after=timezone.now(),
                error_type="",
                error_message="",
            )
            if changed:
                frontier.append(candidate.id)
        rearmed += frontier
    return rearmed


def cancel(workflow_id, *, user=None, source="python") -> int:
    """Cancel every unfinished node of a workflow (running ones are asked to stop); the number
    of nodes cancelled or asked to stop. The audit records it under the workflow's id."""
    workflow_id = _workflow_id(workflow_id)
    if workflow_id is None:
        return 0
    now = timezone.now()
    with transaction.atomic():
        nodes = Job.objects.filter(workflow_id=workflow_id)
        if db.engine().locks_rows:
            # In id order, as finishes lock the jobs they release (jobs.db).
            list(nodes.filter(state__in=WAITING).order_by("id").select_for_update().values("id"))
        waiting = list(nodes.filter(state__in=WAITING).values_list("id", flat=True))
        cancelled = Job.objects.filter(id__in=waiting, state__in=WAITING).update(
            state=JobState.CANCELLED,
            finished_at=now,
            error_type="Cancelled",
            error_message="cancelled with its workflow",
            cancel_requested_at=now,
        )
        stopping = nodes.filter(state=JobState.RUNNING, cancel_requested_at__isnull=True).update(
            cancel_requested_at=now
        )
        if cancelled:
            db.add_counters({"jobs_cancelled": cancelled})
            db.cancel_continuations(waiting)
        AuditEntry.objects.create(
            user=user if getattr(user, "pk", None) else None,
            username=user.get_username() if getattr(user, "pk", None) else "",
            action="cancel workflow",
            source=source,
            outcome=f"{cancelled} cancelled, {stopping} asked to stop",
            subject=str(workflow_id),
            detail={"cancelled": cancelled, "stopping": stopping},
        )
    return cancelled + stopping


def retry_failed(workflow_id, *, user=None, source="python") -> int:
    """Retry every node that failed or was cancelled on its own (nodes cancelled because an
    upstream node failed wait again through their upstream node's retry)."""
    from ..actions import retry_job

    workflow_id = _workflow_id(workflow_id)
    if workflow_id is None:
        return 0
    failed = (
        Job.objects.filter(
            workflow_id=workflow_id, state__in=[JobState.DEAD_LETTER, JobState.CANCELLED]
        )
        .exclude(error_type=UPSTREAM_FAILED)
        .order_by("enqueued_at", "id")
        .values_list("id", flat=True)
    )
    return sum(1 for job_id in list(failed) if retry_job(job_id, user=user, source=source).changed)


def _workflow_id(value):
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError:
        return None
