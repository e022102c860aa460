"""The SQLite engine: its clock functions and its statements.

SQLite has no server clock: `jobsite_now()` and `jobsite_after(seconds)`, registered on every
connection, read the machine's (one machine, so one clock). Django stores SQLite datetimes as
str() of the naive UTC value (no fraction when the microseconds are 0); these write exactly that,
so text comparisons agree with Django's. Uuids are stored as 32 hex digits.

There is no row locking: write transactions take the database's write lock at BEGIN
(`BEGIN IMMEDIATE`), so a claim, a finish or a compaction never interleaves with another. A
finish is three steps in its transaction (the guarded update, the attempt rows, then the
continuations and counters); idle workers are woken through sockets beside the file
(sqlite_wake).
"""

import json
import sqlite3
import uuid
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import cached_property
from itertools import batched

from django.db import connection, transaction
from django.db.backends.signals import connection_created
from django.dispatch import receiver

from ..states import CLAIMABLE, JobState
from .columns import FINISHED_AT, attempt_row, job_inserted
from .engine import Engine
from .records import OUTCOME_COLUMNS, Finish
from .sql import (
    ATTEMPT,
    COUNTER,
    DEPENDENCY,
    JOB,
    applied_as,
    finish_counts,
    insert_value,
    parse_time,
    parse_uuid,
    sql_in,
    sql_state,
)
from .sqlite_wake import Wakeups, folder_for, waker_for

# The columns of a job row that differ between the calls of one enqueue_many.
VARYING = ("id", "args", "kwargs")

# The values of an attempt row as `_insert_attempts` builds them (attempt_row() puts them in
# the model's order; a column missing here fails loudly there).
ATTEMPT_VALUES = (
    "job_id",
    "number",
    "worker_id",
    "started_at",
    "finished_at",
    "outcome",
    "error_type",
    "error_message",
    "error_traceback",
)


def _padded(rows: int) -> int:
    """A batch of outcomes is padded with rows of NULLs (they match no job) up to a power of
    two: a handful of statement texts, each prepared once and kept in sqlite3's statement
    cache, instead of one text per batch size (preparing costs about as much as running)."""
    return 1 << (rows - 1).bit_length()


def _sqlite_now() -> str:
    return str(datetime.now(UTC).replace(tzinfo=None))


def _sqlite_after(seconds) -> str:
    return str(datetime.now(UTC).replace(tzinfo=None) + timedelta(seconds=float(seconds or 0)))


@receiver(connection_created)
def _register_sqlite_clock(sender, connection, **kwargs):
    if connection.vendor == "sqlite":
        # Deterministic: SQLite then reads the clock once per run of a statement, not once per
        # row (one value per statement, as PostgreSQL's now() is one per transaction), instead
        # of calling back into Python for every row a claim reads.
        connection.connection.create_function("jobsite_now", 0, _sqlite_now, deterministic=True)
        connection.connection.create_function("jobsite_after", 1, _sqlite_after, deterministic=True)
        _share_the_file(connection.connection)


# Milliseconds a statement waits for another process's write to end before "database is locked".
BUSY_TIMEOUT_MS = 30_000
# Bytes of write-ahead log kept on disk once it has been checkpointed and reset.
WAL_SIZE_LIMIT = 64 * 1024 * 1024


def _share_the_file(raw):
    """What a worker beside a web process and enqueuers needs on any SQLite file, whatever the
    project's settings: readers that never wait for the writer (WAL, kept in the file), and
    writers that wait their turn instead of failing at once. Immediate transactions, which keep
    two writers from deadlocking, are a Django setting: `manage.py check` asks for them."""
    (busy,) = raw.execute("PRAGMA busy_timeout").fetchone()
    if busy < BUSY_TIMEOUT_MS:
        raw.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    (limit,) = raw.execute("PRAGMA journal_size_limit").fetchone()
    if limit < 0:
        # A write-ahead log that grew under load (hundreds of MB through a long bulk action or
        # a prune) is cut back to this size at its next reset instead of keeping its peak.
        raw.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
    (mode,) = raw.execute("PRAGMA journal_mode").fetchone()
    if mode.lower() not in ("wal", "memory"):
        try:
            raw.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError:
            pass  # another connection holds the file; it switches on a later connection


@contextmanager
def raw_cursor():
    """sqlite3's own cursor on Django's connection, for the hot statements (claim, finish).

    Django's cursor rewrites `%s` to `?` with a regex over every statement it runs (a finish
    has thousands of placeholders) and goes through its wrappers; these statements are
    written with `?`. Kept: Django's transactions (atomic() begins and commits this same
    sqlite3 connection), its error translation (Django's database exceptions, and the
    connection marked as having had errors) and its refusal to run in a broken transaction.
    Not kept: `connection.execute_wrapper()` hooks and DEBUG's query log do not see them.
    """
    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        cursor = connection.connection.cursor()
        try:
            yield cursor
        finally:
            cursor.close()


_ADD_TO_NEWEST = (
    f"UPDATE {COUNTER} SET value = value + ? "
    f"WHERE id = (SELECT max(id) FROM {COUNTER} WHERE name = ?)"
)


def _add_counts(raw, counts: dict[str, int]) -> None:
    """Adds to each name's newest row in place, or inserts its first. SQLite's writers take
    turns, so no row is contended (PostgreSQL's writers only append). In place, an enqueue
    writes one page of the counters instead of three (the table's, its index's and the
    AUTOINCREMENT sequence's): a commit's cost follows the pages it writes (bench/README.md,
    "SQLite's single enqueue and the pages a commit writes")."""
    for name, n in counts.items():
        if n:
            raw.execute(_ADD_TO_NEWEST, [n, name])
            if raw.rowcount == 0:
                raw.execute(f"INSERT INTO {COUNTER} (name, value) VALUES (?, ?)", [name, n])


def _count_enqueued(raw, n: int) -> None:
    _add_counts(raw, {"jobs_enqueued": n})


class SQLiteEngine(Engine):
    vendor = "sqlite"
    now = "jobsite_now()"
    wakes_workers = True

    def __init__(self):
        self._finish_text: dict[int, str] = {}
        self._insert_text: dict[int, str] = {}

    def after(self, expr):
        return f"jobsite_after({expr})"

    def uuid_value(self, value):
        if value is None:
            return None
        return (value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))).hex

    def time_value(self, value):
        """Naive UTC text, as Django stores it."""
        if value is None:
            return value
        if value.tzinfo:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return str(value)

    # --- claim --------------------------------------------------------------------------------

    def claim_source(self, shape):
        # Without statistics the planner reads the claimable rows by `state` from a console
        # index and sorts all of them on every claim, a cost growing with the backlog
        # (bench/README.md, "SQLite claims"). The claim indexes (jobs.models) are already in claim
        # order: the claim reads LIMIT rows from one and stops.
        index = "job_claimable_queue" if shape else "job_claimable"
        return f"{JOB} INDEXED BY {index}"

    def key_source(self):
        return f"{JOB} INDEXED BY job_claimable_key"

    def claim(self, *, worker_id, queues, limit, lease_seconds):
        """Claim up to `limit` due jobs in priority order, one fresh lease_id.

        The walk over priority levels runs from Python (SQLite has no LATERAL; a statement
        costs a function call here, not a round trip). One queue or every queue: each level's
        due jobs are claimed by one update, until `limit`. Several queues: each one's first
        `limit` due jobs are read, the first `limit` across them claimed by one update.
        """
        lease_id = uuid.uuid4()
        sets = [self.uuid_value(lease_id), lease_seconds, worker_id]
        queues = list(dict.fromkeys(queues)) if queues else []
        with transaction.atomic(savepoint=False), raw_cursor() as cursor:
            if len(queues) > 1:
                rows = self._claim_merged(cursor, sets, queues, limit)
            else:
                rows = self._claim_by_level(cursor, sets, queues[0] if queues else None, limit)
        return self.claimed_batch(rows, lease_id)

    def _levels(self, cursor, queue):
        """The priorities of `queue`'s claimable jobs (None: any queue's), highest first."""
        top, below = self.walk[1 if queue else 0][:2]
        asked = [queue] if queue else []
        level = cursor.execute(top, asked).fetchone()
        while level is not None:
            yield level[0]
            level = cursor.execute(below, [*asked, level[0]]).fetchone()

    def _claim_by_level(self, cursor, sets, queue, limit) -> list:
        claim = self.walk[1 if queue else 0][3]
        asked = [queue] if queue else []
        rows: list = []
        for level in self._levels(cursor, queue):
            rows += cursor.execute(claim, [*sets, *asked, level, limit - len(rows)]).fetchall()
            if len(rows) >= limit:
                break
        return rows

    def _claim_merged(self, cursor, sets, queues, limit) -> list:
        due = []
        for queue in queues:
            found: list = []
            for level in self._levels(cursor, queue):
                params = [queue, level, limit - len(found)]
                found += cursor.execute(self.walk[1][2], params).fetchall()
                if len(found) >= limit:
                    break
            due += found
        due.sort(key=lambda row: (-row[1], row[2]))
        ids = json.dumps([row[0] for row in due[:limit]])
        return cursor.execute(self.claim_ids_sql, [*sets, ids]).fetchall() if due else []

    @cached_property
    def walk(self) -> dict[int, tuple[str, str, str, str]]:
        """A claim's statements, by shape (0: every queue, 1: one queue): the top priority
        level, the next level down, a level's due jobs, and the claim of a level's due jobs."""
        walks: dict = {}
        for shape, queue_test in ((0, ""), (1, "AND queue_name = %s")):
            at_level = f"{queue_test} AND priority = %s"
            statements = (
                self.top_level(queue_test, shape),
                self.top_level(queue_test, shape, "AND priority < %s"),
                self.due_jobs("id, priority, run_after", at_level, shape),
                f"""
                    UPDATE {JOB} SET {self.claim_sets()}
                    WHERE id IN ({self.due_jobs("id", at_level, shape)})
                    RETURNING {self.claimed_columns()}
                """,
            )
            walks[shape] = tuple(s.replace("%s", "?") for s in statements)
        return walks

    @cached_property
    def claim_ids_sql(self):
        """The claim of the jobs whose ids are given as one JSON array."""
        # `+state`: without statistics the planner would read every claimable row by state
        # from a console index; the unary plus keeps it on the primary key.
        return f"""
            UPDATE {JOB} SET {self.claim_sets()}
            WHERE id IN (SELECT value FROM json_each(%s)) AND +state IN ({sql_in(CLAIMABLE)})
            RETURNING {self.claimed_columns()}
        """.replace("%s", "?")

    # --- wake-ups ---------------------------------------------------------------------------

    def notify(self, cursor=None) -> None:
        """Wake idle workers once the transaction commits (jobs.db.sqlite_wake); once per
        transaction however many jobs it adds."""
        waker = waker_for(connection.settings_dict["NAME"])
        if waker is None:
            return
        if connection.in_atomic_block:
            if any(entry[1] is waker for entry in connection.run_on_commit):
                return
            transaction.on_commit(waker)
        else:
            waker.wake()

    def listener(self, options) -> Wakeups | None:
        """A socket beside the database file (jobs.db.sqlite_wake); None for a database in
        memory, which no worker process shares."""
        folder = folder_for(connection.settings_dict["NAME"])
        return Wakeups(folder) if folder is not None else None

    # --- enqueue ------------------------------------------------------------------------------

    def insert_job(self, row: dict) -> None:
        """The job and its count in one transaction: the caller's, or else one begun and
        committed here on sqlite3's own cursor. Django's atomic() around two statements cost
        as much as the insert itself (bench/README.md, "Enqueues on SQLite")."""
        params = self._params(row)
        with raw_cursor() as raw:
            if not connection.get_autocommit():  # in atomic(), or the caller commits
                self._insert_one(raw, params)
            else:
                raw.execute("BEGIN IMMEDIATE")
                try:
                    self._insert_one(raw, params)
                    raw.execute("COMMIT")
                finally:
                    if raw.connection.in_transaction:  # the insert or the commit failed
                        raw.execute("ROLLBACK")
        self.notify()

    def _insert_one(self, raw, params: list) -> None:
        raw.execute(self._insert_rows_sql(1), params)
        _count_enqueued(raw, 1)

    def insert_job_batch(self, template: dict, calls) -> None:
        """Multi-row INSERTs, each with as many rows as the connection's limit on parameters
        allows (32,766 in SQLite's own builds, more in some others). The parameters of the
        columns every row shares are built once; only the id and the arguments vary."""
        columns = job_inserted()
        shared = self._params(template)
        names = [c.name for c in columns]
        id_at, args_at, kwargs_at = (names.index(name) for name in VARYING)
        with transaction.atomic():
            with raw_cursor() as raw:
                limit = raw.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
                per_statement = max(1, min(1000, limit // len(columns)))
                count = 0
                for chunk in batched(calls, per_statement):
                    params: list = []
                    for job_id, args_json, kwargs_json in chunk:
                        row = shared.copy()
                        row[id_at] = self.uuid_value(job_id)
                        row[args_at], row[kwargs_at] = args_json, kwargs_json
                        params += row
                    raw.execute(self._insert_rows_sql(len(chunk)), params)
                    count += len(chunk)
                if not count:
                    return
                _count_enqueued(raw, count)
            self.notify()

    def _insert_rows_sql(self, rows: int) -> str:
        """An INSERT of `rows` new jobs (parameters: `_params` of each, in turn)."""
        try:
            return self._insert_text[rows]
        except KeyError:
            sql = self._insert_text[rows] = (
                f"INSERT INTO {JOB} ({', '.join(c.name for c in job_inserted())}) VALUES "
                + ", ".join([f"({self._placeholders()})"] * rows)
            ).replace("%s", "?")
            return sql

    def insert_jobs(self, rows: list[dict]) -> None:
        if not rows:
            return
        with transaction.atomic():
            with raw_cursor() as raw:
                raw.executemany(self._insert_rows_sql(1), [self._params(row) for row in rows])
                _count_enqueued(raw, len(rows))
            self.notify()

    def link(self, edges, *, cursor=None) -> None:
        if not edges:
            return
        values = [(self.uuid_value(d), self.uuid_value(u)) for d, u in edges]
        with raw_cursor() as raw:
            raw.executemany(
                f"INSERT INTO {DEPENDENCY} (downstream_id, upstream_id) VALUES (?, ?)", values
            )

    def _placeholders(self) -> str:
        """One row's placeholders for job_inserted(), in order (params: `_params`)."""
        return ", ".join(
            f"CASE WHEN %s THEN {self.now} ELSE NULL END"
            if column.name == FINISHED_AT
            else f"COALESCE(%s, {self.now})"
            if column.defaults_to_now
            else "%s"
            for column in job_inserted()
        )

    def _params(self, row: dict) -> list:
        params = []
        for column in job_inserted():
            value = insert_value(column, row)
            if column.name == FINISHED_AT:
                params.append(self.finished_at_value(column, row))
            elif column.is_uuid:
                params.append(self.uuid_value(value))
            elif column.is_time:
                params.append(self.time_value(value))
            else:
                params.append(value)
        return params

    # --- finish -------------------------------------------------------------------------------

    @cached_property
    def set_outcome(self) -> str:
        return self.set_outcome_sql(running=sql_state(JobState.RUNNING))

    def finish_chunk(self, cursor, chunk: list[Finish]) -> list[Finish]:
        params, keys = [], []
        for r in chunk:
            job_id, lease_id, *rest = r.values()
            key = self.uuid_value(job_id)
            keys.append(key)
            params += [key, self.uuid_value(lease_id), *rest]
        size = _padded(len(chunk))
        params += [None] * (len(OUTCOME_COLUMNS) * (size - len(chunk)))
        with raw_cursor() as raw:
            raw.execute(self.finish_text(size), params)
            # Rows come back keyed by the id as stored (32 hex digits, as sent): no uuid parsed.
            changed = {r[0]: r for r in raw.fetchall()}
            applied = []
            for key, r in zip(keys, chunk, strict=True):
                row = changed.get(key)
                if row is None:
                    continue
                _, attempt, started_at, state = row
                if r.started_at is None:
                    r.started_at = parse_time(started_at)
                applied.append((applied_as(r, state), attempt, key))
            self._insert_attempts(raw, applied)
        return [r for r, _, _ in applied]

    def finish_text(self, rows: int) -> str:
        """The finish statement for `rows` outcomes (built once per size)."""
        try:
            return self._finish_text[rows]
        except KeyError:
            values = ", ".join(["(" + ", ".join(["?"] * len(OUTCOME_COLUMNS)) + ")"] * rows)
            sql = self._finish_text[rows] = f"""
            WITH v ({", ".join(OUTCOME_COLUMNS)}) AS (VALUES {values})
            UPDATE {JOB} SET {self.set_outcome}
            RETURNING {JOB}.id, {JOB}.attempt + {JOB}.snoozes, {JOB}.started_at, {JOB}.state
        """
            return sql

    @cached_property
    def attempt_order(self) -> tuple[int, ...]:
        """Where each attempt column (model order) is in the tuple `_insert_attempts` builds."""
        return tuple(ATTEMPT_VALUES.index(name) for name in attempt_row())

    def _insert_attempts(self, cursor, applied):
        order = self.attempt_order
        placeholders = ", ".join(
            f"COALESCE(?, {self.now})" if ATTEMPT_VALUES[i] == "finished_at" else "?" for i in order
        )
        rows, params = 0, []
        time_value = self.time_value
        for r, number, key in applied:
            if r.outcome is None:
                continue  # released unstarted: no attempt ran
            # For a release the counter went back; every other outcome keeps the claimed number.
            values = (
                key,
                number,
                r.worker_id,
                time_value(r.started_at),
                time_value(r.finished_at),
                r.outcome,
                r.error_type[:255],
                r.error_message,
                r.error_traceback,
            )
            params += [values[i] for i in order]
            rows += 1
        if rows:
            names = ", ".join(attempt_row())
            cursor.execute(
                f"INSERT INTO {ATTEMPT} ({names}) VALUES "
                + ", ".join([f"({placeholders})"] * rows),
                params,
            )

    def after_finish(self, cursor, applied: list[Finish]) -> None:
        succeeded = [r.job_id for r in applied if r.state == JobState.SUCCEEDED]
        if succeeded:
            self.release_continuations(succeeded, cursor=cursor)
        super().after_finish(cursor, applied)
        self.add_counters(finish_counts(applied), cursor=cursor)

    # --- heartbeat, counters ------------------------------------------------------------------

    def add_counters(self, counts: dict[str, int], *, cursor=None) -> None:
        with raw_cursor() as raw:  # the same connection, so the caller's transaction if any
            _add_counts(raw, counts)

    def extend_leases(self, leases, lease_seconds: float) -> set:
        held: set = set()
        with connection.cursor() as cursor:
            for start in range(0, len(leases), 500):
                chunk = leases[start : start + 500]
                rows = ", ".join(["(%s, %s)"] * len(chunk))
                params = [self.uuid_value(x) for pair in chunk for x in pair]
                cursor.execute(
                    f"WITH v (job_id, lease_id) AS (VALUES {rows}) "
                    f"UPDATE {JOB} SET lease_expires_at = {self.after('%s')} FROM v "
                    f"WHERE {JOB}.id = v.job_id AND {JOB}.lease_id = v.lease_id "
                    f"AND {JOB}.state = {sql_state(JobState.RUNNING)} RETURNING {JOB}.id",
                    [*params, lease_seconds],
                )
                held.update(parse_uuid(r[0]) for r in cursor.fetchall())
        return held

    def fold_counters(self, cursor) -> None:
        # The write lock is taken at BEGIN: no other compaction or increment interleaves.
        cursor.execute(f"SELECT name, sum(value) FROM {COUNTER} GROUP BY name")
        totals = cursor.fetchall()
        cursor.execute(f"DELETE FROM {COUNTER}")
        cursor.executemany(f"INSERT INTO {COUNTER} (name, value) VALUES (%s, %s)", totals)
