"""One action over every job a filter matches: retry, cancel or discard, in batches.

Each batch goes through the same guarded action as a single press (`jobs.actions`, for many
jobs at once), so a job not allowed in its state is matched but not changed. The whole run
writes one audit entry with its counts instead of one per job.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from . import actions
from .models import AuditEntry, Dependency

# Each takes a batch of job ids and returns how many it changed.
ACTIONS = {
    "retry": actions.retry_many,
    "cancel": actions.cancel_many,
    "discard": actions.discard_many,
}
BATCH = 500
# Ids per lookup of the edges between jobs (SQLite takes at most 32,766 parameters).
LOOKUP = 5000


@dataclass(frozen=True, kw_only=True, slots=True)
class BulkResult:
    matched: int
    applied: int


def apply(
    action: str,
    jobs,
    *,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
    **audit,
) -> BulkResult:
    """Apply `action` to every job of the queryset `jobs`; `progress(matched, applied)` per batch.

    With `dry_run`, only count. `audit` takes `user`, `source`, `description` and `batch` as
    `run` does.
    """
    if dry_run:
        _check(action)
        return BulkResult(matched=jobs.count(), applied=0)
    result = BulkResult(matched=0, applied=0)
    for result in run(action, jobs, **audit):
        if progress:
            progress(result.matched, result.applied)
    return result


def run(
    action: str,
    jobs,
    *,
    user=None,
    source: str = "python",
    description: str = "",
    batch: int = BATCH,
) -> Iterator[BulkResult]:
    """Apply `action` batch by batch, yielding the running totals after each batch.

    Batches walk the ids in order, so jobs that the action moves out of the filter are neither
    missed nor seen twice. A batch takes with it the jobs the filter matches that run after one
    of its jobs or before it, at any depth (a workflow's nodes, a chain of continuations): a
    chain is retried from its start and discarded from its end, which batches of ids in their
    order would cut anywhere. Such a group larger than a batch goes in batches in that order,
    each committed, so an interrupted run keeps what it did and a second run goes on from
    there. The audit entry is written at the end, or with the totals of the
    batches done and "stopped before the end" when the caller stops early (a closed progress
    page) or a batch fails.
    """
    act = ACTIONS[_check(action)]
    ids = jobs.order_by("id").values_list("id", flat=True)
    matched = applied = 0
    last = None
    complete = False
    # Ids further on that an earlier batch took with it.
    taken: set = set()
    try:
        while True:
            further = ids.filter(id__gt=last) if last else ids
            chunk = list(further[:batch])
            if not chunk:
                break
            last = chunk[-1]
            chunk = [job_id for job_id in chunk if job_id not in taken]
            if not chunk:
                continue
            # Jobs before this batch were matched by an earlier one, or did not match.
            group = _with_linked(chunk, further, taken)
            taken.update(job_id for job_id in group if job_id > last)
            for part in _parts(group, action, batch):
                applied += act(part)
                matched += len(part)
                yield BulkResult(matched=matched, applied=applied)
        complete = True
    finally:
        outcome = f"{applied:,} of {matched:,} matching jobs changed"
        AuditEntry.record(
            user=user,
            action=f"bulk {action}",
            source=source,
            outcome=outcome if complete else f"stopped before the end: {outcome}",
            subject=description[:255],
            detail={
                "matched": matched,
                "applied": applied,
                "filter": description,
                "complete": complete,
            },
        )


def _with_linked(chunk: list, jobs, taken: set) -> list:
    """`chunk` with every job of `jobs` linked to one of its jobs by a chain of "runs after"
    edges through jobs of `jobs` (either way), in id order; none of `taken` (already acted on)."""
    group = set(chunk)
    frontier = list(chunk)
    while frontier:
        linked: set = set()
        for start in range(0, len(frontier), LOOKUP):
            part = frontier[start : start + LOOKUP]
            linked.update(
                Dependency.objects.filter(upstream_id__in=part).values_list(
                    "downstream_id", flat=True
                )
            )
            linked.update(
                Dependency.objects.filter(downstream_id__in=part).values_list(
                    "upstream_id", flat=True
                )
            )
        unseen = sorted(linked - group - taken)
        frontier = []
        for start in range(0, len(unseen), LOOKUP):
            part = unseen[start : start + LOOKUP]
            frontier += jobs.filter(id__in=part).values_list("id", flat=True)
        group.update(frontier)
    return sorted(group)


def _parts(group: list, action: str, batch: int) -> list[list]:
    """`group` in batches of at most `batch`, each after the batches holding the jobs its jobs
    run after (retry, cancel), or before them (discard)."""
    if len(group) <= batch:
        return [group]
    ordered = _upstream_first(group)
    if action == "discard":
        ordered.reverse()
    return [ordered[start : start + batch] for start in range(0, len(ordered), batch)]


def _upstream_first(group: list) -> list:
    """The ids of `group`, each after every one of the group it runs after (layer by layer, in
    id order within a layer)."""
    members = set(group)
    after: dict = {}
    waits = dict.fromkeys(group, 0)
    for start in range(0, len(group), LOOKUP):
        edges = Dependency.objects.filter(upstream_id__in=group[start : start + LOOKUP])
        for upstream, downstream in edges.values_list("upstream_id", "downstream_id"):
            if downstream in members:
                after.setdefault(upstream, []).append(downstream)
                waits[downstream] += 1
    ordered: list = []
    layer = sorted(job_id for job_id, n in waits.items() if n == 0)
    while layer:
        ordered += layer
        below = []
        for job_id in layer:
            for downstream in after.get(job_id, ()):
                waits[downstream] -= 1
                if waits[downstream] == 0:
                    below.append(downstream)
        layer = sorted(below)
    return ordered + sorted(members - set(ordered))  # none: graphs have no cycles


def _check(action: str) -> str:
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    return action
