"""Maintenance of the job table: pruning old finished jobs."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from .models import Job
from .states import TERMINAL, JobState

# --- pruning -------------------------------------------------------------------------------------

# Dead letters wait for an operator: they are pruned only when named explicitly.
DEFAULT_PRUNE_STATES = (JobState.SUCCEEDED, JobState.CANCELLED)
PRUNE_BATCH_SIZE = 1000


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
    `rerun_of` or `parent` keep existing with that link cleared. The lifetime counters are
    not touched. `progress(deleted_so_far, matched)` is called after each batch.
    """
    states = prunable_states(states)
    if older_than < timedelta(0):
        raise ValueError("older_than must not be negative")
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    cutoff = timezone.now() - older_than
    eligible = Job.objects.filter(state__in=states, finished_at__lt=cutoff)
    matched = eligible.count()
    deleted = 0
    while not dry_run:
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
        if progress:
            progress(deleted, matched)
    return PruneResult(
        states=states, cutoff=cutoff, matched=matched, deleted=deleted, dry_run=dry_run
    )
