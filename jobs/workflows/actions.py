"""What an operator does to a workflow: cancel it, retry its failed nodes, re-arm a node."""

import uuid
from collections import Counter

from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from .. import db
from ..db.sql import BATCH_CALLBACKS, UPSTREAM_FAILED
from ..models import AuditEntry, Dependency, Job
from ..reconnect import again_after_deadlock
from ..states import TERMINAL, WAITING, JobState
from .enqueue import ON_FINISH, ON_SUCCESS

# What re-arming a job reads of it.
_REARM_FIELDS = ("id", "runs_on_upstream_failure", "node_name", "workflow_id")
# The jobs after a retried one that a round of re-arming changes: a waiting run-anyway job
# counts it unsettled again, a released one not started yet waits again, and one its failure
# cancelled waits again.
_COUNTING = Q(state=JobState.SCHEDULED, runs_on_upstream_failure=True)
_RELEASED = Q(state=JobState.PENDING, started_at__isnull=True)
_CANCELLED_BY_FAILURE = Q(state=JobState.CANCELLED, error_type=UPSTREAM_FAILED)
# The ends of an upstream job that cancel the jobs after it (unless they run anyway).
_FAILED = TERMINAL - {JobState.SUCCEEDED}


def _unsettled(job: Job, upstreams) -> int:
    """How many of `upstreams` (their states) have yet to settle `job`."""
    if job.runs_on_upstream_failure:
        return sum(1 for s in upstreams if s not in TERMINAL)
    return sum(1 for s in upstreams if s != JobState.SUCCEEDED)


def _cannot_run(job: Job, upstreams) -> bool:
    """Has one of `upstreams` (their states) ended unsuccessfully, so that `job`, which runs
    only after they all succeed, is cancelled by it?"""
    return not job.runs_on_upstream_failure and any(s in _FAILED for s in upstreams)


def failed_upstream(job_ids) -> dict[uuid.UUID, tuple[uuid.UUID, str]]:
    """Those of `job_ids` that run only after their upstream jobs succeed while one of them
    ended otherwise, each with that job's id and state. Such a job cannot run until that one is
    retried: put back in line, it would be cancelled again for the same failure."""
    pairs = list(
        Dependency.objects.filter(
            downstream_id__in=list(job_ids), downstream__runs_on_upstream_failure=False
        ).values_list("downstream_id", "upstream_id")
    )
    failed = dict(
        Job.objects.filter(id__in={u for _, u in pairs}, state__in=_FAILED).values_list(
            "id", "state"
        )
    )
    found: dict[uuid.UUID, tuple[uuid.UUID, str]] = {}
    for downstream, upstream in sorted(pairs):
        if upstream in failed and downstream not in found:
            found[downstream] = (upstream, failed[upstream])
    return found


def _upstream_states(job_ids) -> dict[uuid.UUID, list[str]]:
    """The states of the upstream jobs of each of `job_ids`."""
    # Locked in id order: a finish settling one of these jobs either committed before (its
    # state is read here) or waits, and then finds the job waiting again.
    pairs = list(
        Dependency.objects.filter(downstream_id__in=list(job_ids)).values_list(
            "downstream_id", "upstream_id"
        )
    )
    rows = Job.objects.filter(id__in={upstream for _, upstream in pairs}).order_by("id")
    if db.engine().locks_rows:
        rows = rows.select_for_update()
    state = dict(rows.values_list("id", "state"))
    states: dict[uuid.UUID, list[str]] = {}
    for downstream, upstream in pairs:
        if upstream in state:
            states.setdefault(downstream, []).append(state[upstream])
    return states


def rearm(job_ids) -> list[uuid.UUID]:
    """`job_ids` were put back in line (a retry): the graph after them waits for them again.

    Each job itself waits for the upstream jobs that have not settled it. Every job after them
    that has not started yet waits for them again: a scheduled one counts them unsettled once
    more, a released one (pending, never started) goes back to waiting, one their failure
    cancelled waits again, and so on downstream. A job that has started or ended otherwise is
    left alone, so a batch's `on_finish` that already ran never runs twice. Called in the
    retry's transaction. Returns the ids of the jobs after them made to wait again.

    None of `job_ids` may come after another (`after_others`): retry such nodes one call at a
    time, each re-arming the graph as it is then (`jobs.actions.put_back_many`).
    """
    ids = set(job_ids)
    if not ids:
        return []
    edges_around = Dependency.objects.filter(Q(downstream_id__in=ids) | Q(upstream_id__in=ids))
    waiting, leading = set(), set()
    for downstream, upstream in edges_around.values_list("downstream_id", "upstream_id"):
        if downstream in ids:
            waiting.add(downstream)
        if upstream in ids:
            leading.add(upstream)
    _wait_again_all(
        Job.objects.filter(id__in=waiting).only(*_REARM_FIELDS), Q(state=JobState.PENDING)
    )
    rearmed: list[uuid.UUID] = []
    frontier = sorted(leading)
    while frontier:
        edges = Counter(
            Dependency.objects.filter(upstream_id__in=frontier).values_list(
                "downstream_id", flat=True
            )
        )
        _hold_upstream_of(list(edges))
        # In this order: a released job's recount must see the cancelled ones still ended,
        # since their re-arming (the next round) counts them unsettled again.
        _count_again(edges)
        rearmed += _hold_released(edges)
        frontier = _rearm_cancelled(edges)
        rearmed += frontier
    return rearmed


def _hold_upstream_of(job_ids: list) -> None:
    """Lock, in id order, every job that those of `job_ids` a round may re-arm wait for,
    before any of `job_ids` changes.

    A finish holds its job's row, then locks the jobs it releases: re-arming a job after it
    and then reading its upstream states the other way round deadlocked with a member of a
    batch finishing meanwhile. Held first, the upstream rows make such a finish commit before.
    A waiting job that runs only once its upstream jobs succeed is left out: the failure being
    retried cancelled it, so it waits again only within this transaction, where no finish can
    release it; and a fan-in job is where the rows are many.
    """
    if not db.engine().locks_rows:
        return
    may_change = Job.objects.filter(_RELEASED | _CANCELLED_BY_FAILURE | _COUNTING, id__in=job_ids)
    upstream = Dependency.objects.filter(downstream_id__in=may_change.values("id"))
    rows = Job.objects.filter(id__in=upstream.values("upstream_id")).order_by("id")
    list(rows.select_for_update().values_list("id", flat=True))


def edges_below(job_ids) -> dict[uuid.UUID, list[uuid.UUID]]:
    """Every edge from `job_ids` down their graphs, at any depth: each job's id -> the ids of
    the jobs right after it (one read per level)."""
    below: dict[uuid.UUID, list[uuid.UUID]] = {}
    seen = set(job_ids)
    frontier = seen
    while frontier:
        edges = Dependency.objects.filter(upstream_id__in=list(frontier))
        frontier = set()
        for upstream, downstream in edges.values_list("upstream_id", "downstream_id"):
            below.setdefault(upstream, []).append(downstream)
            if downstream not in seen:
                frontier.add(downstream)
        seen |= frontier
    return below


def after_others(job_ids, below: dict[uuid.UUID, list[uuid.UUID]]) -> set[uuid.UUID]:
    """Those of `job_ids` that come after another of them in their graph, at any depth, by the
    edges `below` (from `edges_below` of these ids or more)."""
    ids = set(job_ids)
    reached: set[uuid.UUID] = set()
    frontier = ids
    while frontier:
        frontier = {after for job_id in frontier for after in below.get(job_id, ())} - reached
        reached |= frontier
    return ids & reached


def _count_again(edges: Counter) -> None:
    """Scheduled jobs that counted the frontier settled (it had ended) count it again."""
    by_count: dict[int, list] = {}
    for downstream, n in edges.items():
        by_count.setdefault(n, []).append(downstream)
    for n, ids in by_count.items():
        Job.objects.filter(_COUNTING, id__in=ids).update(waiting_for=F("waiting_for") + n)


def _hold_released(edges: Counter) -> list[uuid.UUID]:
    """Jobs the frontier's ending released, not started yet, wait for it again."""
    released = Job.objects.filter(_RELEASED, id__in=list(edges)).only(*_REARM_FIELDS)
    # 0: it stays due (nothing else unsettled); left out: a worker took it meanwhile.
    waits = _wait_again_all(released, _RELEASED)
    return sorted(job_id for job_id, waiting in waits.items() if waiting)


def _rearm_cancelled(edges: Counter) -> list[uuid.UUID]:
    """Jobs the frontier's failure cancelled wait again (or are due, if nothing is left)."""
    candidates = Job.objects.filter(_CANCELLED_BY_FAILURE, id__in=list(edges)).only(*_REARM_FIELDS)
    again = {
        "finished_at": None,
        "run_after": timezone.now(),
        "error_type": "",
        "error_message": "",
        "cancel_requested_at": None,
    }
    # One whose other upstream job has failed too stays cancelled by that one, until it is
    # retried as well.
    return sorted(_wait_again_all(candidates, _CANCELLED_BY_FAILURE, unless_failed=True, **again))


def _wait_again_all(jobs, only: Q, *, unless_failed=False, **changes) -> dict[uuid.UUID, int]:
    """Set each of `jobs` that still matches `only` (`unless_failed`: and that no upstream
    job's failure cancels) waiting for the upstream jobs that have not settled it, or due now
    when none is left: a batch callback is then given its batch's counts of now. Their
    upstream states are read in one statement, and one update sets all that wait for as many.
    The number each job it changed waits for."""
    jobs = list(jobs)
    if not jobs:
        return {}
    # Upstream rows first, then these jobs, each in id order, as a finish locks them.
    states = _upstream_states(j.id for j in jobs)
    still = Job.objects.filter(only, id__in=[j.id for j in jobs]).order_by("id")
    if db.engine().locks_rows:
        still = still.select_for_update()
    held = set(still.values_list("id", flat=True))  # none changes before the update below
    waits: dict[uuid.UUID, int] = {}
    by_count: dict[int, list[uuid.UUID]] = {}
    for job in jobs:
        upstreams = states.get(job.id, [])
        if job.id not in held or (unless_failed and _cannot_run(job, upstreams)):
            continue  # a worker took it meanwhile, or another failure still cancels it
        waits[job.id] = _unsettled(job, upstreams)
        by_count.setdefault(waits[job.id], []).append(job.id)
    for waiting, ids in by_count.items():
        Job.objects.filter(only, id__in=ids).update(
            state=JobState.SCHEDULED if waiting else JobState.PENDING,
            waiting_for=waiting,
            **changes,
        )
    due_callbacks = [j for j in jobs if waits.get(j.id) == 0 and j.node_name in BATCH_CALLBACKS]
    if due_callbacks:
        with connection.cursor() as cursor:
            for job in due_callbacks:
                db.engine().give_batch_counts(cursor, job.id, job.workflow_id)
    return waits


@again_after_deadlock
def cancel(workflow_id, *, user=None, source="python") -> int:
    """Cancel every unfinished node of a workflow (running ones are asked to stop); the number
    of nodes cancelled or asked to stop. The audit records it under the workflow's id.

    A batch's `on_finish` is not cancelled: it runs once every job has ended, with the counts,
    as it does however the jobs end. Its `on_success`, still waiting for the jobs, is cancelled
    as their failure would cancel it, so retrying the jobs re-arms it.
    """
    workflow_id = _workflow_id(workflow_id)
    if workflow_id is None:
        return 0
    now = timezone.now()
    with transaction.atomic():
        nodes = Job.objects.filter(workflow_id=workflow_id).exclude(node_name=ON_FINISH)
        # Running nodes first: a finish holds its job's row, then locks the jobs it releases.
        stopping = nodes.filter(state=JobState.RUNNING, cancel_requested_at__isnull=True).update(
            cancel_requested_at=now
        )
        waiting = nodes.filter(state__in=WAITING)
        if db.engine().locks_rows:
            # In id order, as finishes lock the jobs they release (jobs.db).
            list(waiting.order_by("id").select_for_update().values("id"))
        awaiting_jobs = Q(node_name=ON_SUCCESS, state=JobState.SCHEDULED)
        ids = list(waiting.values_list("id", flat=True))
        cancelled = _cancel(waiting.exclude(awaiting_jobs), now, "Cancelled", "with its workflow")
        cancelled += _cancel(waiting.filter(awaiting_jobs), now, UPSTREAM_FAILED, "with its batch")
        if cancelled:
            db.add_counters({"jobs_cancelled": cancelled})
            cancelled += db.cancel_continuations(ids)
        AuditEntry.record(
            user=user,
            action="cancel workflow",
            source=source,
            outcome=f"{cancelled} cancelled, {stopping} asked to stop",
            subject=str(workflow_id),
            detail={"cancelled": cancelled, "stopping": stopping},
        )
    return cancelled + stopping


def _cancel(nodes, now, error_type: str, why: str) -> int:
    return nodes.update(
        state=JobState.CANCELLED,
        finished_at=now,
        error_type=error_type,
        error_message=f"cancelled {why}",
        cancel_requested_at=now,
    )


def retry_failed(workflow_id, *, user=None, source="python") -> int:
    """Retry every node that failed or was cancelled on its own (nodes cancelled because an
    upstream node failed wait again through their upstream node's retry), as a bulk retry of
    them does; the number put back in line. Each node put back gets its audit entry."""
    from ..actions import put_back_many

    workflow_id = _workflow_id(workflow_id)
    if workflow_id is None:
        return 0
    failed = (
        Job.objects.filter(
            workflow_id=workflow_id, state__in=[JobState.DEAD_LETTER, JobState.CANCELLED]
        )
        .exclude(error_type=UPSTREAM_FAILED)
        .values_list("id", flat=True)
    )
    back = put_back_many(list(failed))
    AuditEntry.record_each(
        [{"job_id": job_id} for job_id in back],
        user=user,
        action="retry",
        source=source,
        outcome="job put back in line with its workflow's failed nodes",
    )
    return len(back)


def _workflow_id(value):
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError:
        return None
