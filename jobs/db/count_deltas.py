"""The job counts per (queue, state) that PostgreSQL's triggers keep (migration 0008).

Statement-level triggers on the job table append one row per (queue, state) a statement
changed to `jobs_jobcountdelta`, with the difference it made. Reading sums those rows; folding
replaces them by one row per (queue, state). SQLite keeps no counts (jobs.state_counts counts
its table instead).
"""

from django.db import connection, transaction

DELTAS = "jobs_jobcountdelta"

SUM_SQL = f"SELECT queue_name, state, sum(n), count(*) FROM {DELTAS} GROUP BY queue_name, state"

FOLD_SQL = f"""
WITH folded AS (
    DELETE FROM {DELTAS} RETURNING queue_name, state, n
)
INSERT INTO {DELTAS} (queue_name, state, n)
SELECT queue_name, state, sum(n) FROM folded GROUP BY queue_name, state HAVING sum(n) <> 0
"""


def kept() -> bool:
    """Does this database keep the counts (its triggers exist)?"""
    return connection.vendor == "postgresql"


def summed() -> list[tuple[str, str, int, int]]:
    """(queue_name, state, jobs, rows summed) for every pair with increments."""
    with connection.cursor() as cursor:
        cursor.execute(SUM_SQL)
        return [(queue, state, int(n), pieces) for queue, state, n, pieces in cursor.fetchall()]


def fold() -> None:
    """Replace the increments by one row per (queue, state); concurrent writers are unaffected."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(FOLD_SQL)
