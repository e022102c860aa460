"""How many jobs are in each state, per queue, without counting the job table.

On PostgreSQL, statement-level triggers on the job table (created by migration 0008) append
one row per (queue, state) a statement changed to `jobs_jobcountdelta`, with the difference it
made: an insert, a state change, a prune or a discard each keep the counts true, whatever code
path ran it. Reading sums those rows, and folds them into one row per (queue, state) once they
pile up. A statement adds a handful of rows however many jobs it touched, and writers only
insert, so no hot row is contended.

SQLite, the embedded database for small tables, counts the table instead.
"""

from django.db import connection, transaction
from django.db.models import Count

from .models import Job, JobCountDelta

# Fold the increments into one row per (queue, state) once there are more than this many.
FOLD_AT = 1_000
DELTAS = JobCountDelta._meta.db_table

SUM_SQL = f"SELECT queue_name, state, sum(n), count(*) FROM {DELTAS} GROUP BY queue_name, state"

FOLD_SQL = f"""
WITH folded AS (
    DELETE FROM {DELTAS} RETURNING queue_name, state, n
)
INSERT INTO {DELTAS} (queue_name, state, n)
SELECT queue_name, state, sum(n) FROM folded GROUP BY queue_name, state HAVING sum(n) <> 0
"""


def kept() -> bool:
    """Does the database keep the counts (rather than `job_counts` counting the table)?"""
    return connection.vendor == "postgresql"


def job_counts() -> dict[tuple[str, str], int]:
    """{(queue_name, state): number of jobs now}, for every pair with at least one job."""
    if not kept():
        rows = Job.objects.order_by().values("queue_name", "state").annotate(n=Count("id"))
        return {(row["queue_name"], row["state"]): row["n"] for row in rows}
    with connection.cursor() as cursor:
        cursor.execute(SUM_SQL)
        rows = cursor.fetchall()
    if sum(pieces for *_, pieces in rows) > FOLD_AT:
        fold()
    return {(queue, state): int(n) for queue, state, n, _ in rows if n}


def fold() -> None:
    """Replace the increments by one row per (queue, state); concurrent writers are unaffected."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(FOLD_SQL)
