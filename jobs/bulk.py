"""One action over every job a filter matches: retry, cancel or discard, in batches.

Each job goes through the same guarded action as a single press (`jobs.actions`), so a job not
allowed in its state is matched but not changed. The whole run writes one audit entry with its
counts instead of one per job.
"""

from collections.abc import Callable
from dataclasses import dataclass

from . import actions
from .models import AuditEntry

ACTIONS = {
    "retry": actions.retry_job,
    "cancel": actions.cancel_job,
    "discard": actions.discard_job,
}
BATCH = 500


@dataclass(frozen=True, kw_only=True, slots=True)
class BulkResult:
    matched: int
    applied: int


def apply(
    action: str,
    jobs,
    *,
    dry_run: bool = False,
    user=None,
    source: str = "python",
    description: str = "",
    progress: Callable[[int, int], None] | None = None,
    batch: int = BATCH,
) -> BulkResult:
    """Apply `action` to every job of the queryset `jobs`; `progress(matched, applied)` per batch.

    With `dry_run`, only count. Batches walk the ids in order, so jobs that an action moves out
    of the filter are neither missed nor seen twice.
    """
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    if dry_run:
        return BulkResult(matched=jobs.count(), applied=0)
    act = ACTIONS[action]
    ids = jobs.order_by("id").values_list("id", flat=True)
    matched = applied = 0
    last = None
    while True:
        chunk = list((ids.filter(id__gt=last) if last else ids)[:batch])
        if not chunk:
            break
        last = chunk[-1]
        matched += len(chunk)
        applied += sum(
            act(job_id, user=user, source=source, record=False).changed for job_id in chunk
        )
        if progress:
            progress(matched, applied)
    AuditEntry.objects.create(
        user=user if getattr(user, "pk", None) else None,
        username=user.get_username() if getattr(user, "pk", None) else "",
        action=f"bulk {action}",
        source=source,
        outcome=f"{applied:,} of {matched:,} matching jobs changed",
        subject=description[:255],
        detail={"matched": matched, "applied": applied, "filter": description},
    )
    return BulkResult(matched=matched, applied=applied)
