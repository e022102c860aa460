"""How many jobs are in each state, per queue, without counting the job table.

On PostgreSQL, statement-level triggers on the job table (created by migration 0008) append
one row per (queue, state) a statement changed, with the difference it made
(jobs.db.count_deltas): an insert, a state change, a prune or a discard each keep the counts
true, whatever code path ran it. Reading sums those rows, and folds them into one row per
(queue, state) once they pile up. A statement adds a handful of rows however many jobs it
touched, and writers only insert, so no hot row is contended.

SQLite, the embedded database for small tables, counts the table instead.
"""

from django.db.models import Count

from .db import count_deltas
from .models import Job

# Fold the increments into one row per (queue, state) once there are more than this many.
FOLD_AT = 1_000


def kept() -> bool:
    """Does the database keep the counts (rather than `job_counts` counting the table)?"""
    return count_deltas.kept()


def job_counts() -> dict[tuple[str, str], int]:
    """{(queue_name, state): number of jobs now}, for every pair with at least one job."""
    if not kept():
        counted = Job.objects.order_by().values("queue_name", "state").annotate(n=Count("id"))
        return {(row["queue_name"], row["state"]): row["n"] for row in counted}
    rows = count_deltas.summed()
    if sum(pieces for *_, pieces in rows) > FOLD_AT:
        count_deltas.fold()
    return {(queue, state): n for queue, state, n, _ in rows if n}
