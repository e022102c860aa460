"""The write of what a running attempt reported (jobs.reports): its progress and log lines.

One transaction, fenced by the attempt's lease: it first finds the job running under that
lease and holds it (PostgreSQL: the progress UPDATE's row lock, or FOR SHARE; SQLite: the write
lock, taken at BEGIN IMMEDIATE), so a lease taken over meanwhile changes nothing.
"""

import json
from contextlib import contextmanager

from django.db import connection, transaction

from ..states import JobState
from . import _ENGINES
from .engine import JOB, sql_state

LOG = "jobs_logline"


_COLUMNS = f"INSERT INTO {LOG} (job_id, attempt, seq, logged_at, level, message) "
# Times travel as seconds since the epoch; SQLite's text is Django's (naive UTC), to the ms.
_INSERT_LINES = {
    "postgresql": _COLUMNS
    + "SELECT %s, %s, (r->>0)::integer, to_timestamp((r->>1)::float8), r->>2, r->>3 "
    "FROM json_array_elements(%s::json) AS r",
    "sqlite": _COLUMNS + "SELECT %s, %s, json_extract(r.value, '$[0]'), "
    "strftime('%%Y-%%m-%%d %%H:%%M:%%f', json_extract(r.value, '$[1]'), 'unixepoch'), "
    "json_extract(r.value, '$[2]'), json_extract(r.value, '$[3]') FROM json_each(%s) AS r",
}


def _apply(cursor, vendor: str, report) -> bool:
    """Write `report` (a jobs.reports.Written); False when the lease no longer holds."""
    engine = _ENGINES[vendor]
    job, lease = engine.uuid_value(report.job_id), engine.uuid_value(report.lease_id)
    fence = f"id = %s AND lease_id = %s AND state = {sql_state(JobState.RUNNING)}"
    if report.progress is not None:
        value = "CAST(%s AS jsonb)" if vendor == "postgresql" else "%s"
        cursor.execute(
            f"UPDATE {JOB} SET progress = {value} WHERE {fence}",
            [json.dumps(report.progress), job, lease],
        )
        if cursor.rowcount != 1:
            return False
    else:
        lock = " FOR SHARE" if engine.locks_rows else ""
        cursor.execute(f"SELECT 1 FROM {JOB} WHERE {fence}{lock}", [job, lease])
        if cursor.fetchone() is None:
            return False
    lines = report.batch.lines
    if lines:
        # One statement, one JSON document: a statement per line (an executemany) gives the
        # interpreter lock up and waits to get it back once per line, and the task's thread
        # pays for each switch.
        document = json.dumps(
            [[x.seq, x.created, x.level, x.message] for x in lines], ensure_ascii=False
        )
        cursor.execute(_INSERT_LINES[vendor], [job, report.attempt, document])
    if report.batch.delete_below is not None:
        cursor.execute(
            f"DELETE FROM {LOG} WHERE job_id = %s AND attempt = %s AND seq > %s AND seq < %s",
            [job, report.attempt, report.batch.head_end, report.batch.delete_below],
        )
    return True


@contextmanager
def _own_transaction(conn):
    """A transaction on a connection nobody else uses, in autocommit mode between writes."""
    with conn.cursor() as cursor:
        cursor.execute("BEGIN IMMEDIATE" if conn.vendor == "sqlite" else "BEGIN")
        try:
            yield cursor
        except BaseException:
            try:
                cursor.execute("ROLLBACK")
            except Exception:
                conn.close()  # a connection that cannot roll back is not reused
            raise
        cursor.execute("COMMIT")


def write_on(conn, report) -> bool:
    """Write `report` over `conn`, a connection of the writer's own; False: lease gone."""
    with _own_transaction(conn) as cursor:
        return _apply(cursor, conn.vendor, report)


def write_here(report) -> bool:
    """Write `report` over this thread's default connection, inside its transaction if any."""
    with transaction.atomic(), connection.cursor() as cursor:
        return _apply(cursor, connection.vendor, report)
