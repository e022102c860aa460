"""Maintenance of the job table: recovering expired leases, expiring jobs past `not_after`,
settling orphaned continuations (what every worker runs on its heartbeat), and pruning old
finished jobs (`manage.py prune`)."""

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from . import db, limits, moments, workflows
from .errors import WorkerLost
from .errortext import for_log
from .models import Job, WorkerNode
from .states import TERMINAL, AttemptOutcome, JobState

logger = logging.getLogger(__name__)

# --- on every heartbeat ----------------------------------------------------------------------

# Every this many heartbeats, the slower chores: compacting counters, forgetting lost nodes.
SLOW_CHORES_EVERY = 30
# Every this many heartbeats, rate-limit starts past every window are forgotten.
PRUNE_STARTS_EVERY = 6


def run_due(worker_id: str, *, round: int, backend=None, recover: bool = True) -> None:
    """The maintenance a worker does on heartbeat number `round` (1, 2, ...); the outcomes of
    recovered jobs reach `backend`'s integrations (tracing, Sentry) as the worker's own do.
    `recover`: recover expired leases (a worker back from an outage waits a moment)."""
    if recover:
        recover_expired_leases(worker_id, backend=backend)
    db.expire_not_after()
    db.settle_orphaned_continuations()
    if round == 1:
        # Rows written before times were checked at enqueue; none can be written since.
        moments.repair_stored()
    if round % PRUNE_STARTS_EVERY == 1:
        limits.prune_starts()
    if round % SLOW_CHORES_EVERY == 1:
        db.compact_counters()
        forget_lost_nodes()


def recover_expired_leases(worker_id: str, limit: int = 200, backend=None) -> int:
    """Rescue running jobs whose worker stopped renewing its lease, through the retry flow."""
    from . import observers
    from . import outcome as oc

    with transaction.atomic():
        expired = db.expired_leases(limit, lock=True)
        if not expired:
            return 0
        claims = {e.id: e.as_claimed() for e in expired}
        finishes = []
        for e in expired:
            ran = oc.failure_from_outside(
                claims[e.id],
                WorkerLost(f"worker {e.worker_id} stopped renewing its lease"),
                kind=AttemptOutcome.LOST,
                worker_id=e.worker_id,
                started_at=e.started_at,
            )
            finish = oc.decide(claims[e.id], ran, worker_id=e.worker_id)
            finish.only_if_expired = True
            finishes.append(finish)
        applied = db.finish(finishes)
    for f in applied:
        oc.announce(f, claims[f.job_id])
        logger.warning(
            "recovered job %s from worker %s (lease expired): %s",
            f.job_id,
            for_log(f.worker_id),
            f"retrying in {f.delay:.1f}s"
            if f.state == JobState.RETRYING
            else f"{f.state} ({f.reason})",
        )
    if backend is not None:
        observers.attempts_settled([(f, claims[f.job_id]) for f in applied], backend)
    return len(applied)


def forget_lost_nodes(days: int = 1) -> int:
    cutoff = timezone.now() - timedelta(days=days)
    deleted, _ = WorkerNode.objects.filter(last_heartbeat_at__lt=cutoff).delete()
    return deleted


# --- pruning -------------------------------------------------------------------------------------

# Dead letters wait for an operator: they are pruned only when named explicitly.
DEFAULT_PRUNE_STATES = (JobState.SUCCEEDED, JobState.CANCELLED)
PRUNE_BATCH_SIZE = 1000
# SQLite: after each batch, prune_jobs leaves the database's one write lock free at least this
# long (and as long as the batch held it, up to PRUNE_PAUSE_MAX). A writer waiting on the lock
# retries every 100 ms once it has waited a while (SQLite's busy handler), so without a pause
# the next batch took the lock back before it and a web enqueue waited out the whole prune.
PRUNE_PAUSE_MIN = 0.1
PRUNE_PAUSE_MAX = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PruneResult:
    states: tuple[str, ...]
    # Jobs finished before this moment were eligible.
    cutoff: datetime
    # Eligible when pruning began.
    matched: int
    deleted: int
    dry_run: bool


def prunable_states(states: Iterable[str]) -> tuple[str, ...]:
    """The states as a sorted tuple; ValueError for unknown or unfinished states."""
    states = tuple(sorted({str(s) for s in states}))
    if not states:
        raise ValueError("name at least one state to prune")
    unknown = [s for s in states if s not in JobState.values]
    if unknown:
        raise ValueError(f"unknown state {', '.join(unknown)}")
    unfinished = [s for s in states if s not in TERMINAL]
    if unfinished:
        raise ValueError(
            f"refusing to prune {', '.join(unfinished)} jobs: only finished jobs "
            f"({', '.join(sorted(TERMINAL))}) can be pruned"
        )
    return states


def prune_jobs(
    older_than: timedelta,
    states: Iterable[str] = DEFAULT_PRUNE_STATES,
    dry_run: bool = False,
    batch_size: int = PRUNE_BATCH_SIZE,
    progress: Callable[[int, int], None] | None = None,
) -> PruneResult:
    """Delete jobs in `states` that finished more than `older_than` ago, batch by batch.

    Their attempts and audit entries go with them (cascade); jobs pointing at them through
    `rerun_of` or `parent` keep existing with that link cleared. A job that a workflow node or
    continuation after it still needs (not succeeded yet) is kept until that one succeeded, and
    a workflow's or batch's nodes are kept until every one of them may go.
    The lifetime counters are not touched. `progress(deleted_so_far, matched)` is called after
    each batch; `matched` grows when deleting a chain's continuations frees parents the count
    had kept (a dry run counts what may go before any of it went).
    """
    states = prunable_states(states)
    if older_than < timedelta(0):
        raise ValueError("older_than must not be negative")
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    cutoff = timezone.now() - older_than
    prunable = Q(state__in=states, finished_at__lt=cutoff)
    # A workflow or batch goes whole: while one of its nodes stays, a retry re-arms the nodes
    # after it and a callback counts them all, so none of them goes before.
    unfinished_graphs = (
        Job.objects.filter(workflow_id__isnull=False).exclude(prunable).values("workflow_id")
    )
    eligible = (
        Job.objects.filter(prunable)
        .exclude(workflows.needed_after(outside_its_workflow=True))
        .exclude(workflow_id__in=unfinished_graphs)
    )
    matched = eligible.count()
    deleted = 0
    # Without row locks, one batch at a time holds the whole database (see PRUNE_PAUSE_MIN).
    share_the_lock = not db.engine().locks_rows
    while not dry_run:
        began = time.monotonic()
        # One short transaction per batch, so workers and the console are never held up long.
        with transaction.atomic():
            ids = list(
                eligible.order_by("finished_at")
                .select_for_update(skip_locked=True)
                .values_list("id", flat=True)[:batch_size]
            )
            if not ids:
                break
            _, per_model = Job.objects.filter(id__in=ids).delete()
        deleted += per_model.get(Job._meta.label, 0)
        if deleted > matched:
            # A continuation gone frees the parent it kept (needed_after): more may go than
            # were counted at first. The total grows with them rather than be passed.
            matched = deleted + eligible.count()
        if progress:
            progress(deleted, matched)
        if share_the_lock:
            time.sleep(min(max(time.monotonic() - began, PRUNE_PAUSE_MIN), PRUNE_PAUSE_MAX))
    return PruneResult(
        states=states, cutoff=cutoff, matched=matched, deleted=deleted, dry_run=dry_run
    )
