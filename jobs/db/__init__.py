"""The engine's database layer: one engine per database behind one interface.

    engine.py        the interface, and every statement and rule both databases share
    run_after.py     its statements for jobs that wait for others (continuations, workflows)
    sql.py           the statements' shared vocabulary: tables, states as SQL, values in and out
    postgres.py      PostgreSQL's whole story: COPY, SKIP LOCKED, the one-statement finish
                     (its text in postgres_finish.py), prepared statements, NOTIFY and LISTEN
                     (postgres_notify.py)
    sqlite.py        SQLite's whole story: its clock functions and its statements
    columns.py       the columns written by hand, derived from the models
    records.py       the values crossing the interface (Claimed, Finish, Expired, Listener)
    clock.py         the clock every machine agrees on (the database's where it has one)
    search_sql.py    what a search of the jobs asks of each database
    count_deltas.py  the job counts PostgreSQL's triggers keep
    unpooled.py      a connection of its own, outside Django's connection pool

The rest of the engine calls the functions below; each goes to the engine of the default
connection's database, chosen from its vendor.
"""

from django.db import connection

from .clock import database_now
from .engine import Engine
from .postgres import NOTIFY_CHANNEL, PostgresEngine
from .records import Claimed, Expired, Finish, Listener
from .sqlite import SQLiteEngine

__all__ = [
    "NOTIFY_CHANNEL",
    "Claimed",
    "Expired",
    "Finish",
    "Listener",
    "add_counters",
    "audit_cancelled",
    "cancel_continuations",
    "claim",
    "claim_one",
    "compact_counters",
    "configure_worker_session",
    "database_now",
    "engine",
    "expire_not_after",
    "expired_leases",
    "finish",
    "finish_and_claim",
    "insert_job",
    "insert_job_batch",
    "insert_jobs",
    "link",
    "listener",
    "notify_workers",
    "release_continuations",
    "renew_leases",
    "settle_orphaned_continuations",
]

_ENGINES = {e.vendor: e for e in (PostgresEngine(), SQLiteEngine())}


def engine() -> Engine:
    """The engine of the default connection's database."""
    return _ENGINES[connection.vendor]


def configure_worker_session(conn, *, lease_seconds: float, heartbeat_seconds: float) -> None:
    """Settings of a worker's own connection `conn`, made as it connects."""
    _ENGINES[conn.vendor].configure_worker_session(
        conn, lease_seconds=lease_seconds, heartbeat_seconds=heartbeat_seconds
    )


def listener(options: dict) -> Listener | None:
    """What wakes an idle worker when a job becomes due, or None where workers poll."""
    return engine().listener(options)


def insert_job(row: dict) -> None:
    """Insert one new job, count it, and wake idle workers: one statement on PostgreSQL."""
    engine().insert_job(row)


def insert_job_batch(template: dict, calls) -> None:
    """Insert many new jobs that differ only in id, args and kwargs; all or none.

    `template` holds every other column of a pending row (as `insert_job` takes it); `calls`
    is an iterable of (id, args JSON text, kwargs JSON text) as `payload.checked_arguments`
    gives them, read once, chunk by chunk: if it raises, nothing is stored. One transaction,
    one count, one wake-up.
    """
    engine().insert_job_batch(template, calls)


def insert_jobs(rows: list[dict]) -> None:
    """Insert new jobs of any shape (each row as `insert_job` takes it); all or none, one count,
    one wake-up."""
    engine().insert_jobs(rows)


def notify_workers() -> None:
    """Wake idle workers (delivered at commit); nothing to do where workers poll."""
    engine().notify_workers()


def claim(**claim_args) -> list[Claimed]:
    """Claim due jobs; with `limits` (a jobs.limits.LimitsCache), under flow control."""
    return engine().claim_within(**claim_args)


def claim_one(job_id, **claim_args) -> Claimed | None:
    return engine().claim_one(job_id, **claim_args)


def finish(results: list[Finish]) -> list[Finish]:
    return engine().finish(results)


def finish_and_claim(results: list[Finish], **claim_args):
    return engine().finish_and_claim(results, **claim_args)


def release_continuations(parent_ids, *, cursor=None):
    return engine().release_continuations(parent_ids, cursor=cursor)


def cancel_continuations(parent_ids, *, cursor=None):
    return engine().cancel_continuations(parent_ids, cursor=cursor)


def audit_cancelled(job_ids) -> None:
    """Audit the jobs of `job_ids` as cancelled because a job they waited for did not succeed."""
    from django.db import connection

    with connection.cursor() as cursor:
        engine().audit_cancelled(cursor, job_ids)


def link(edges, *, cursor=None) -> None:
    """Store that each (downstream, upstream) job id pair runs after its upstream job."""
    engine().link(edges, cursor=cursor)


def add_counters(counts: dict[str, int], *, cursor=None) -> None:
    engine().add_counters(counts, cursor=cursor)


def compact_counters() -> None:
    engine().compact_counters()


def renew_leases(leases, lease_seconds: float) -> set:
    return engine().renew_leases(leases, lease_seconds)


def expired_leases(limit: int = 200, *, lock: bool = False) -> list[Expired]:
    return engine().expired_leases(limit, lock=lock)


def expire_not_after(limit: int = 1000):
    return engine().expire_not_after(limit)


def settle_orphaned_continuations(limit: int = 1000) -> int:
    return engine().settle_orphaned_continuations(limit)
