"""Every hand-written statement of the engine, one dialect switch for PostgreSQL and SQLite.

All state changes are guarded updates: they name the states a row may be in (and, for a
worker's writes, the `lease_id` of its claim) and report which rows actually changed. A row that
did not change means the caller lost a race; it is never treated as success.

Times come from the database clock on PostgreSQL (`now()`), and from `jobsite_now()` on SQLite,
a function registered on every SQLite connection (one machine, so one clock).
"""

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.backends.signals import connection_created
from django.dispatch import receiver

from . import payload
from .states import CLAIMABLE, TERMINAL, AttemptOutcome, JobState

JOB = "jobs_job"
ATTEMPT = "jobs_attempt"
COUNTER = "jobs_counterdelta"
NOTIFY_CHANNEL = "jobsite_jobs"
# Queues nobody claims from (jobs.queues); a handful of rows at most.
PAUSED = "jobs_pausedqueue"


# Django stores SQLite datetimes as str() of the naive UTC value (no fraction when the
# microseconds are 0); these write exactly that, so text comparisons agree with Django's.
def _sqlite_now() -> str:
    return str(datetime.now(UTC).replace(tzinfo=None))


def _sqlite_after(seconds) -> str:
    return str(datetime.now(UTC).replace(tzinfo=None) + timedelta(seconds=float(seconds or 0)))


@receiver(connection_created)
def _register_sqlite_clock(sender, connection, **kwargs):
    if connection.vendor == "sqlite":
        connection.connection.create_function("jobsite_now", 0, _sqlite_now)
        connection.connection.create_function("jobsite_after", 1, _sqlite_after)


class _Dialect:
    def __init__(self, vendor):
        self.pg = vendor == "postgresql"
        self.now = "now()" if self.pg else "jobsite_now()"
        self.uuid = "%s::uuid" if self.pg else "%s"

    def after(self, expr):
        """now + `expr` seconds."""
        return f"now() + ({expr}) * interval '1 second'" if self.pg else f"jobsite_after({expr})"

    def uuid_value(self, value):
        if value is None:
            return None
        value = value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
        return value if self.pg else value.hex

    def in_list(self, values, cast=None):
        placeholder = cast or "%s"
        return "(" + ", ".join([placeholder] * len(values)) + ")"

    def parse_uuid(self, value):
        return value if isinstance(value, uuid.UUID) else uuid.UUID(value)

    def parse_time(self, value):
        if value is None:
            return None
        if not isinstance(value, datetime):
            value = datetime.fromisoformat(value)
        return value if value.tzinfo else value.replace(tzinfo=UTC)

    def time_value(self, value):
        """A datetime parameter as this database stores it (SQLite: naive UTC text)."""
        if value is None or self.pg:
            return value
        if value.tzinfo:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return str(value)


def dialect() -> _Dialect:
    return _Dialect(connection.vendor)


# A prepare threshold no statement reaches by repetition: only `prepare=True` prepares.
ONLY_WHEN_ASKED = 2**31 - 1


class _BoundCursor:
    """A psycopg cursor with server-side binding for the hot statements on PostgreSQL.

    Their text is constant whatever the batch size (arrays or one JSON document in), so
    psycopg prepares each once per connection and sends parameters in binary; Django's own
    cursors interpolate on the client.
    Errors come out as Django's database exceptions, like any other query.

    Django turns psycopg's prepared statements off (`prepare_threshold` None) for the sake of
    connection poolers, and psycopg then ignores `prepare=True`; planning the hot statements
    afresh costs more than running them. So, unless the project's DATABASES OPTIONS name
    `prepare_threshold` themselves, the threshold is raised to "never automatically": only
    these explicitly marked statements are prepared. Behind a transaction-mode pooler without
    prepared-statement support, set OPTIONS `"prepare_threshold": None` to keep them off.
    """

    def __enter__(self):
        import psycopg

        connection.ensure_connection()
        self._wrap = connection.wrap_database_errors
        self._wrap.__enter__()
        raw = connection.connection
        if (
            raw.prepare_threshold is None
            and "prepare_threshold" not in connection.settings_dict.get("OPTIONS", {})
        ):
            raw.prepare_threshold = ONLY_WHEN_ASKED
        self.cursor = psycopg.Cursor(raw)
        return self.cursor

    def __exit__(self, *exc):
        try:
            self.cursor.close()
        except Exception:  # closing on a dead connection fails too; the
            pass  # error that matters is the one in flight, which the wrapper re-raises
        return self._wrap.__exit__(*exc)


def _states(values):
    return ", ".join(f"'{v}'" for v in values)


CLAIMABLE_SQL = _states(CLAIMABLE)
TERMINAL_SQL = _states(sorted(TERMINAL))


# --- enqueue ---------------------------------------------------------------------------------

INSERT_COLUMNS = (
    "id",
    "task_path",
    "backend",
    "args",
    "kwargs",
    "queue_name",
    "priority",
    "state",
    "attempt",
    "max_attempts",
    "timeout",
    "run_after",
    "not_after",
    "dedup_key",
    "rerun_of_id",
    "parent_id",
    "enqueued_at",
    "error_type",
    "error_message",
    "error_traceback",
    "dead_letter_reason",
    "worker_id",
    "finished_at",
)


PG_TYPES = {
    "id": "uuid",
    "task_path": "text",
    "backend": "text",
    "args": "jsonb",
    "kwargs": "jsonb",
    "queue_name": "text",
    "priority": "int",
    "state": "text",
    "attempt": "int",
    "max_attempts": "int",
    "timeout": "float8",
    "run_after": "timestamptz",
    "not_after": "timestamptz",
    "dedup_key": "text",
    "rerun_of_id": "uuid",
    "parent_id": "uuid",
    "enqueued_at": "timestamptz",
    "error_type": "text",
    "error_message": "text",
    "error_traceback": "text",
    "dead_letter_reason": "text",
    "worker_id": "text",
    "finished_at": "timestamptz",
}
_INSERT_SELECT_PG = ", ".join(
    f"COALESCE(v.{c}, now())"
    if c in ("run_after", "enqueued_at")
    else f"CASE WHEN v.state IN ({TERMINAL_SQL}) THEN now() END"
    if c == "finished_at"
    else f"v.{c}"
    for c in INSERT_COLUMNS
)
# One job: one statement of constant text that inserts it, counts it, and wakes workers.
INSERT_ONE_PG = f"""
    WITH v({", ".join(INSERT_COLUMNS)}) AS (
        VALUES ({", ".join(f"%s::{PG_TYPES[c]}" for c in INSERT_COLUMNS)})
    ),
    ins AS (
        INSERT INTO {JOB} ({", ".join(INSERT_COLUMNS)}) SELECT {_INSERT_SELECT_PG} FROM v
        RETURNING 1
    ),
    cnt AS (INSERT INTO {COUNTER} (name, value) SELECT 'jobs_enqueued', count(*) FROM ins)
    SELECT pg_notify('{NOTIFY_CHANNEL}', '')
"""
COUNT_AND_NOTIFY_PG = f"""
    WITH cnt AS (INSERT INTO {COUNTER} (name, value) VALUES ('jobs_enqueued', %s))
    SELECT pg_notify('{NOTIFY_CHANNEL}', '')
"""
# Columns whose default is the database clock when a row leaves them empty.
_NOW_COLUMNS = ("run_after", "enqueued_at")


def _insert_value(column, row):
    value = row.get(column)
    if column in ("args", "kwargs"):
        return payload.dumps(value)
    if column in (
        "error_type",
        "error_message",
        "error_traceback",
        "dead_letter_reason",
        "worker_id",
    ):
        return value or ""
    return value


def insert_job(row: dict) -> None:
    """Insert one new job, count it, and wake idle workers: one statement on PostgreSQL.

    `row` carries already-validated values; `run_after` None means now.
    """
    d = dialect()
    if d.pg:
        with _BoundCursor() as cursor:
            values = [_insert_value(c, row) for c in INSERT_COLUMNS]
            cursor.execute(INSERT_ONE_PG, values, prepare=True)
        return
    with transaction.atomic(), connection.cursor() as cursor:
        _insert_sqlite(cursor, d, [row])
        add_counters({"jobs_enqueued": 1}, cursor=cursor)


def insert_job_batch(template: dict, calls: list[tuple[uuid.UUID, list, dict]]) -> None:
    """Insert many new jobs that differ only in id, args and kwargs; all or none.

    `template` holds every other column of a pending row (as `insert_job` takes it); `calls`
    are (id, args, kwargs), already checked. One transaction, one count, one NOTIFY. On
    PostgreSQL the rows stream in through COPY, formatted here: every column but the first
    five is the same text on every line.
    """
    if not calls:
        return
    d = dialect()
    with transaction.atomic():
        if not d.pg:
            with connection.cursor() as cursor:
                for start in range(0, len(calls), 1000):  # within SQLite's parameter limit
                    rows = [
                        {**template, "id": i, "args": a, "kwargs": k}
                        for i, a, k in calls[start : start + 1000]
                    ]
                    _insert_sqlite(cursor, d, rows)
                add_counters({"jobs_enqueued": len(calls)}, cursor=cursor)
            return
        with _BoundCursor() as cursor:
            # The transaction's now(), as the single-row statement would have used.
            now = cursor.execute("SELECT now()").fetchone()[0]
            shared = {**template}
            for column in _NOW_COLUMNS:
                if shared.get(column) is None:
                    shared[column] = now
            if shared["state"] in TERMINAL:
                shared["finished_at"] = now
            head = "\t".join(_copy_text(_insert_value(c, shared)) for c in INSERT_COLUMNS[1:3])
            tail = "\t".join(_copy_text(_insert_value(c, shared)) for c in INSERT_COLUMNS[5:])
            text = _copy_json
            with cursor.copy(f"COPY {JOB} ({', '.join(INSERT_COLUMNS)}) FROM STDIN") as copy:
                for start in range(0, len(calls), 2000):
                    copy.write(
                        "".join(
                            f"{i}\t{head}\t{text(a)}\t{text(k)}\t{tail}\n"
                            for i, a, k in calls[start : start + 2000]
                        )
                    )
            cursor.execute(COUNT_AND_NOTIFY_PG, [len(calls)], prepare=True)


def _copy_json(value) -> str:
    """A JSON value in COPY's text format: JSON has no raw tab or newline, so only \\ doubles."""
    return payload.dumps(value).replace("\\", "\\\\")


def _copy_text(value) -> str:
    """One value in COPY's text format."""
    if value is None:
        return "\\N"
    if isinstance(value, datetime):
        return value.isoformat()
    text = str(value)
    for raw, escaped in (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r")):
        text = text.replace(raw, escaped)
    return text


def _insert_sqlite(cursor, d: _Dialect, rows: list[dict]) -> None:
    values, params = [], []
    for row in rows:
        placeholders = []
        for column in INSERT_COLUMNS:
            value = _insert_value(column, row)
            if column in ("id", "rerun_of_id", "parent_id"):
                placeholders.append("%s")
                params.append(d.uuid_value(value))
            elif column in _NOW_COLUMNS:
                placeholders.append(f"COALESCE(%s, {d.now})")
                params.append(d.time_value(value))
            elif column == "not_after":
                placeholders.append("%s")
                params.append(d.time_value(value))
            elif column == "finished_at":
                placeholders.append(f"CASE WHEN %s THEN {d.now} ELSE NULL END")
                params.append(row["state"] in TERMINAL)
            else:
                placeholders.append("%s")
                params.append(value)
        values.append("(" + ", ".join(placeholders) + ")")
    cursor.execute(
        f"INSERT INTO {JOB} ({', '.join(INSERT_COLUMNS)}) VALUES {', '.join(values)}", params
    )


def notify_workers() -> None:
    """Wake idle workers on PostgreSQL (delivered at commit); nothing to do on SQLite."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT pg_notify('{NOTIFY_CHANNEL}', '')")


# --- claim -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Claimed:
    """A job a worker has claimed, with everything needed to run it."""

    id: uuid.UUID
    lease_id: uuid.UUID
    task_path: str
    args_json: str
    kwargs_json: str
    attempt: int
    max_attempts: int
    timeout: float | None
    queue_name: str
    priority: int
    backend: str
    started_at: datetime | None = None
    enqueued_at: datetime | None = None
    # Set by the worker: when the attempt actually began in an executor (monotonic clock).
    began: float | None = field(default=None, compare=False)
    # Set by the worker: until when (monotonic clock) the claim's lease is sure to hold.
    lease_until: float = field(default=0.0, compare=False)


CLAIMED_COLUMNS = (
    "id, task_path, {args}, attempt, max_attempts, timeout, queue_name, priority, backend, "
    "started_at, enqueued_at"
)


def _claimed_from_row(d: _Dialect, r, lease_id) -> Claimed:
    """A row of CLAIMED_COLUMNS as a Claimed."""
    return Claimed(
        id=d.parse_uuid(r[0]),
        lease_id=lease_id,
        task_path=r[1],
        args_json=r[2],
        kwargs_json=r[3],
        attempt=r[4],
        max_attempts=r[5],
        timeout=r[6],
        queue_name=r[7],
        priority=r[8],
        backend=r[9],
        started_at=d.parse_time(r[10]),
        enqueued_at=d.parse_time(r[11]),
    )


def claim(*, worker_id: str, queues: list[str] | None, limit: int, lease_seconds: float):
    """Claim up to `limit` due jobs in priority order; one statement, one fresh lease_id."""
    d = dialect()
    lease_id = uuid.uuid4()
    queue_filter, queue_params = "", []
    if queues:
        # PostgreSQL: one array parameter, so the text stays the same for any queue list.
        queue_filter = (
            "AND queue_name = ANY(%s::text[])"
            if d.pg
            else (f"AND queue_name IN {d.in_list(queues)}")
        )
        queue_params = [list(queues)] if d.pg else list(queues)
    lock = "FOR UPDATE SKIP LOCKED" if d.pg else ""
    args_col = "args::text, kwargs::text" if d.pg else "args, kwargs"
    sql = f"""
        UPDATE {JOB} SET state = 'running', attempt = attempt + 1, lease_id = {d.uuid},
            lease_expires_at = {d.after("%s")}, started_at = {d.now}, worker_id = %s
        WHERE id IN (
            SELECT id FROM {JOB}
            WHERE state IN ({CLAIMABLE_SQL}) AND run_after <= {d.now}
              AND attempt < max_attempts
              AND (not_after IS NULL OR not_after > {d.now}) {queue_filter}
              AND queue_name NOT IN (SELECT name FROM {PAUSED})
            ORDER BY priority DESC, run_after
            LIMIT %s {lock}
        )
        RETURNING {CLAIMED_COLUMNS.format(args=args_col)}
    """
    params = [d.uuid_value(lease_id), lease_seconds, worker_id, *queue_params, limit]
    if d.pg:
        with _BoundCursor() as cursor:
            cursor.execute(sql, params, prepare=True)
            rows = cursor.fetchall()
    else:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
    claimed = [_claimed_from_row(d, r, lease_id) for r in rows]
    claimed.sort(key=lambda c: -c.priority)
    return claimed


def claim_one(job_id, *, worker_id: str, lease_seconds: float) -> Claimed | None:
    """Claim one specific due job (the eager backend runs jobs this way)."""
    d = dialect()
    lease_id = uuid.uuid4()
    args_col = "args::text, kwargs::text" if d.pg else "args, kwargs"
    sql = f"""
        UPDATE {JOB} SET state = 'running', attempt = attempt + 1, lease_id = {d.uuid},
            lease_expires_at = {d.after("%s")}, started_at = {d.now}, worker_id = %s
        WHERE id = {d.uuid} AND state IN ({CLAIMABLE_SQL}) AND attempt < max_attempts
        RETURNING {CLAIMED_COLUMNS.format(args=args_col)}
    """
    with connection.cursor() as cursor:
        cursor.execute(
            sql, [d.uuid_value(lease_id), lease_seconds, worker_id, d.uuid_value(job_id)]
        )
        r = cursor.fetchone()
    return None if r is None else _claimed_from_row(d, r, lease_id)


# --- finish ----------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class Finish:
    """How one claimed attempt ended, as decided by the worker (or by recovery)."""

    job_id: uuid.UUID
    lease_id: uuid.UUID
    state: str  # succeeded, retrying, dead_letter, cancelled, or pending (released unstarted)
    outcome: str | None  # the Attempt outcome; None when released unstarted (no attempt ran)
    worker_id: str = ""
    return_json: str | None = None
    delay: float = 0.0  # seconds until the next attempt, for retrying
    reason: str = ""  # dead_letter_reason
    error_type: str = ""
    error_message: str = ""
    error_traceback: str = ""
    started_at: datetime | None = None  # wall clock of the attempt, as the executor saw it
    finished_at: datetime | None = None
    # Recovery only: change the row only if its lease has really expired.
    only_if_expired: bool = False
    # Set for an attempt handed back at shutdown when it was the last allowed one.
    raise_max_attempts: bool = False

    def values(self) -> tuple:
        """The outcome as both dialects' finish statements take it (their first 11 columns)."""
        return (
            self.job_id,
            self.lease_id,
            self.state,
            self.return_json,
            float(self.delay or 0),
            self.reason,
            self.error_type[:255],
            self.error_message,
            self.error_traceback,
            1 if self.only_if_expired else 0,
            1 if self.raise_max_attempts else 0,
        )


def finish(results: list[Finish]) -> list[Finish]:
    """Apply the outcomes whose lease still holds; return those that took effect.

    One transaction: the guarded job update, the attempt rows, the continuations of jobs that
    became terminal, and the counters.
    """
    if not results:
        return []
    d = dialect()
    applied: list[Finish] = []
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        for chunk_start in range(0, len(results), 1000):
            chunk = results[chunk_start : chunk_start + 1000]
            if d.pg:
                applied.extend(_finish_chunk_pg(chunk))
            else:
                applied.extend(_finish_chunk(cursor, d, chunk))
        if applied and not d.pg:
            _after_finish(cursor, d, applied)
        elif applied:
            ended_badly = [
                r.job_id for r in applied if r.state in (JobState.DEAD_LETTER, JobState.CANCELLED)
            ]
            if ended_badly:
                cancel_continuations(ended_badly, cursor=cursor)
    return applied


def finish_and_claim(results: list[Finish], **claim_args) -> tuple[list[Finish], list[Claimed]]:
    """Record outcomes and claim the next batch in one transaction (one commit to wait for)."""
    wants_claim = claim_args.get("limit", 0) > 0
    if not results:
        # One statement commits by itself: no BEGIN/COMMIT round trips on the wake-up path.
        return [], claim(**claim_args) if wants_claim else []
    with transaction.atomic(savepoint=False):
        applied = finish(results)
        claimed = claim(**claim_args) if wants_claim else []
    return applied, claimed


# A running job whose cancel was requested ends cancelled however its attempt ended (returned,
# failed but retryable, or handed back unstarted); dead letters stay dead letters. Only the row
# knows for sure whether a cancel came in, so the decision is made here, in the guarded update.
EFFECTIVE_STATE = (
    f"(CASE WHEN {JOB}.cancel_requested_at IS NOT NULL "
    f"AND v.new_state IN ('succeeded', 'retrying', 'pending') THEN 'cancelled' "
    f"ELSE v.new_state END)"
)


def _set_outcome_sql(d: _Dialect) -> str:
    """The SET clause applying row v of outcomes to the job (both dialects).

    Every expression reads the row as it was before the update, in both databases.
    """
    # PostgreSQL compares the state with a column of v, not a literal: given a literal, the
    # planner may scan every running job (all workers' prefetched ones, and their dead
    # versions) instead of looking up each outcome's row by its primary key.
    running = "v.running" if d.pg else "'running'"
    state = EFFECTIVE_STATE
    terminal = f"{state} IN ({TERMINAL_SQL})"
    has_error = "v.error_type <> ''"
    return f"""
            state = {state},
            finished_at = CASE WHEN {terminal} THEN {d.now} ELSE NULL END,
            return_value = CASE WHEN v.new_state = 'succeeded' THEN v.return_value
                                ELSE {JOB}.return_value END,
            run_after = CASE WHEN {state} = 'retrying' THEN {d.after("v.delay")}
                             ELSE {JOB}.run_after END,
            attempt = CASE WHEN v.new_state = 'pending' THEN {JOB}.attempt - 1
                           ELSE {JOB}.attempt END,
            started_at = CASE WHEN v.new_state = 'pending' AND {JOB}.attempt = 1 THEN NULL
                              ELSE {JOB}.started_at END,
            max_attempts = CASE WHEN v.raise_max = 1 AND {JOB}.max_attempts < 100
                                THEN {JOB}.max_attempts + 1 ELSE {JOB}.max_attempts END,
            dead_letter_reason = CASE WHEN {state} = 'dead_letter' THEN v.reason ELSE '' END,
            error_type = CASE WHEN {has_error} THEN v.error_type
                              WHEN {state} = 'cancelled' THEN 'JobCancelled'
                              ELSE {JOB}.error_type END,
            error_message = CASE WHEN {has_error} THEN v.error_message
                                 WHEN {state} = 'cancelled' THEN 'cancelled by an operator'
                                 ELSE {JOB}.error_message END,
            error_traceback = CASE WHEN {has_error} THEN v.error_traceback
                                   ELSE {JOB}.error_traceback END,
            lease_id = NULL,
            lease_expires_at = NULL,
            cancel_requested_at = CASE WHEN {terminal} THEN {JOB}.cancel_requested_at
                                       ELSE NULL END
        FROM v
        WHERE {JOB}.id = v.job_id AND {JOB}.lease_id = v.lease_id AND {JOB}.state = {running}
          AND (v.only_if_expired = 0 OR {JOB}.lease_expires_at < {d.now})
    """


def _applied(r: Finish, state: str) -> Finish:
    """The outcome as it took effect (a cancel that came in turns it into a cancellation)."""
    if state == JobState.CANCELLED and r.state != JobState.CANCELLED:
        r.state = JobState.CANCELLED
        if r.outcome is not None:
            r.outcome = AttemptOutcome.CANCELLED
    return r


_PG = _Dialect("postgresql")

# The outcome columns FINISH_PG reads from its one JSON parameter, with their SQL types.
FINISH_FIELDS = (
    ("job_id", "uuid"),
    ("lease_id", "uuid"),
    ("new_state", "text"),
    ("return_json", "text"),
    ("delay", "float8"),
    ("reason", "text"),
    ("error_type", "text"),
    ("error_message", "text"),
    ("error_traceback", "text"),
    ("only_if_expired", "int"),
    ("raise_max", "int"),
    ("outcome", "text"),
    ("worker_id", "text"),
    ("started_at", "timestamptz"),
    ("finished_at", "timestamptz"),
)

# PostgreSQL: one statement of constant text whatever the batch size: the job update, the
# attempt rows, the continuations released, and the counters. The outcomes arrive as one JSON
# document (encoded in C by the json module; fifteen parameter arrays cost far more to adapt).
FINISH_PG = f"""
    WITH v AS (
        SELECT r.*, r.return_json::jsonb AS return_value, 'running'::text AS running
        FROM json_to_recordset(%s::json)
            AS r({", ".join(f"{name} {kind}" for name, kind in FINISH_FIELDS)})
    ),
    upd AS (
        UPDATE {JOB} SET {_set_outcome_sql(_PG)}
        RETURNING {JOB}.id, {JOB}.attempt, {JOB}.started_at, {JOB}.state
    ),
    done AS (SELECT v.*, upd.attempt AS number, upd.started_at AS claimed_at,
                    upd.state AS final_state,
                    CASE WHEN upd.state = 'cancelled' AND v.new_state <> 'cancelled'
                         THEN 'cancelled' ELSE v.outcome END AS attempt_outcome
             FROM upd JOIN v ON v.job_id = upd.id),
    att AS (
        INSERT INTO {ATTEMPT} (job_id, number, worker_id, started_at, finished_at, outcome,
                               error_type, error_message, error_traceback)
        SELECT job_id, number, worker_id, COALESCE(started_at, claimed_at),
               COALESCE(finished_at, now()), attempt_outcome, error_type, error_message,
               error_traceback
        FROM done WHERE outcome IS NOT NULL
    ),
    rel AS (
        UPDATE {JOB} c SET state = 'pending', run_after = now()
        FROM done WHERE done.final_state = 'succeeded' AND c.parent_id = done.job_id
          AND c.state = 'scheduled'
        RETURNING c.id
    ),
    cnt AS (
        INSERT INTO {COUNTER} (name, value)
        SELECT x.name, x.n FROM (
            SELECT count(*) FILTER (WHERE final_state = 'succeeded') AS succeeded,
                   count(*) FILTER (
                       WHERE attempt_outcome IN ('failed', 'lost', 'poison', 'interrupted')
                   ) AS failed,
                   count(*) FILTER (WHERE final_state = 'retrying') AS requeued,
                   count(*) FILTER (WHERE final_state = 'dead_letter') AS dead,
                   count(*) FILTER (WHERE attempt_outcome = 'lost') AS recovered,
                   count(*) FILTER (WHERE final_state = 'cancelled') AS cancelled
            FROM done
        ) a, LATERAL (VALUES ('jobs_succeeded', a.succeeded), ('jobs_failed', a.failed),
                             ('jobs_requeued', a.requeued), ('jobs_dead_lettered', a.dead),
                             ('jobs_recovered', a.recovered), ('jobs_cancelled', a.cancelled)
        ) x(name, n)
        WHERE x.n > 0
    ),
    -- Released continuations are due now: wake idle workers (delivered at commit).
    woke AS (SELECT pg_notify('{NOTIFY_CHANNEL}', '') FROM (SELECT 1 FROM rel LIMIT 1) AS any_rel)
    SELECT job_id, final_state, (SELECT count(*) FROM woke) AS woken FROM done
"""


def _finish_document(chunk: list[Finish]) -> str:
    names = [name for name, _ in FINISH_FIELDS]
    rows = []
    for r in chunk:
        job_id, lease_id, *rest = r.values()
        rows.append(
            dict(
                zip(
                    names,
                    (
                        str(job_id),
                        str(lease_id),
                        *rest,
                        r.outcome,
                        r.worker_id,
                        r.started_at.isoformat() if r.started_at else None,
                        r.finished_at.isoformat() if r.finished_at else None,
                    ),
                    strict=True,
                )
            )
        )
    return json.dumps(rows, separators=(",", ":"))


def _finish_chunk_pg(chunk: list[Finish]) -> list[Finish]:
    with _BoundCursor() as bound:
        bound.execute(FINISH_PG, [_finish_document(chunk)], prepare=True)
        rows = bound.fetchall()
    changed = {row[0]: row[1] for row in rows}
    return [_applied(r, changed[r.job_id]) for r in chunk if r.job_id in changed]


def _finish_chunk(cursor, d: _Dialect, chunk: list[Finish]) -> list[Finish]:
    rows, params = [], []
    for r in chunk:
        rows.append("(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")
        job_id, lease_id, *rest = r.values()
        params += [d.uuid_value(job_id), d.uuid_value(lease_id), *rest]
    sql = f"""
        WITH v (job_id, lease_id, new_state, return_value, delay, reason, error_type,
                error_message, error_traceback, only_if_expired, raise_max) AS (
            VALUES {", ".join(rows)}
        )
        UPDATE {JOB} SET {_set_outcome_sql(d)}
        RETURNING {JOB}.id, {JOB}.attempt, {JOB}.started_at, {JOB}.state
    """
    cursor.execute(sql, params)
    changed = {d.parse_uuid(r[0]): (r[1], d.parse_time(r[2]), r[3]) for r in cursor.fetchall()}
    applied = []
    for r in chunk:
        if r.job_id in changed:
            attempt, started_at, state = changed[r.job_id]
            r.started_at = r.started_at or started_at
            applied.append((_applied(r, state), attempt))
    _insert_attempts(cursor, d, applied)
    return [r for r, _ in applied]


def _insert_attempts(cursor, d: _Dialect, applied):
    rows, params = [], []
    for r, attempt_after in applied:
        if r.outcome is None:
            continue  # released unstarted: no attempt ran
        # For a release the counter went back; every other outcome keeps the claimed number.
        rows.append(f"({d.uuid}, %s, %s, %s, COALESCE(%s, {d.now}), %s, %s, %s, %s)")
        params += [
            d.uuid_value(r.job_id),
            attempt_after,
            r.worker_id,
            d.time_value(r.started_at),
            d.time_value(r.finished_at),
            r.outcome,
            r.error_type[:255],
            r.error_message,
            r.error_traceback,
        ]
    if rows:
        cursor.execute(
            f"INSERT INTO {ATTEMPT} (job_id, number, worker_id, started_at, finished_at, "
            f"outcome, error_type, error_message, error_traceback) VALUES {', '.join(rows)}",
            params,
        )


def _after_finish(cursor, d: _Dialect, applied: list[Finish]):
    succeeded = [r.job_id for r in applied if r.state == JobState.SUCCEEDED]
    ended_badly = [
        r.job_id for r in applied if r.state in (JobState.DEAD_LETTER, JobState.CANCELLED)
    ]
    if succeeded:
        release_continuations(succeeded, cursor=cursor)
    if ended_badly:
        cancel_continuations(ended_badly, cursor=cursor)
    counts = {
        "jobs_succeeded": len(succeeded),
        "jobs_failed": sum(
            1
            for r in applied
            if r.outcome
            in (
                AttemptOutcome.FAILED,
                AttemptOutcome.LOST,
                AttemptOutcome.POISON,
                AttemptOutcome.INTERRUPTED,
            )
        ),
        "jobs_requeued": sum(1 for r in applied if r.state == JobState.RETRYING),
        "jobs_dead_lettered": sum(1 for r in applied if r.state == JobState.DEAD_LETTER),
        "jobs_recovered": sum(1 for r in applied if r.outcome == AttemptOutcome.LOST),
        "jobs_cancelled": sum(1 for r in applied if r.state == JobState.CANCELLED),
    }
    add_counters(counts, cursor=cursor)


def release_continuations(parent_ids, *, cursor=None):
    """Continuations of parents that succeeded become pending (due now)."""
    return _update_children(
        parent_ids,
        f"state = 'pending', run_after = {dialect().now}",
        cursor=cursor,
        notify=True,
    )


def cancel_continuations(parent_ids, *, cursor=None):
    """Continuations of parents that ended unsuccessfully are cancelled, recursively.

    Counted in `jobs_cancelled` here, in the caller's transaction, whichever path ended the parent.
    """
    d = dialect()
    total = 0
    frontier = list(parent_ids)
    while frontier:
        cancelled = _update_children(
            frontier,
            f"state = 'cancelled', finished_at = {d.now}, "
            "error_type = 'ParentFailed', error_message = 'its parent job did not succeed'",
            cursor=cursor,
            returning=True,
        )
        total += len(cancelled)
        frontier = cancelled
    add_counters({"jobs_cancelled": total}, cursor=cursor)
    return total


def _update_children(parent_ids, assignments, *, cursor=None, notify=False, returning=False):
    d = dialect()
    ids = [d.uuid_value(i) for i in parent_ids]
    sql = (
        f"UPDATE {JOB} SET {assignments} WHERE state = 'scheduled' "
        f"AND parent_id IN {d.in_list(ids, d.uuid)} RETURNING id"
    )

    def run(c):
        c.execute(sql, ids)
        changed = [d.parse_uuid(r[0]) for r in c.fetchall()]
        if notify and changed and d.pg:
            c.execute(f"SELECT pg_notify('{NOTIFY_CHANNEL}', '')")
        return changed

    if cursor is not None:
        return run(cursor)
    with connection.cursor() as c:
        return run(c)


def add_counters(counts: dict[str, int], *, cursor=None):
    rows = [(name, n) for name, n in counts.items() if n]
    if not rows:
        return
    sql = f"INSERT INTO {COUNTER} (name, value) VALUES " + ", ".join(["(%s, %s)"] * len(rows))
    params = [x for row in rows for x in row]
    if cursor is not None:
        cursor.execute(sql, params)
    else:
        with connection.cursor() as c:
            c.execute(sql, params)


# --- heartbeat, recovery, expiry --------------------------------------------------------------


def renew_leases(leases: list[tuple[uuid.UUID, uuid.UUID]], lease_seconds: float) -> set:
    """Extend the leases this worker still holds; returns the job ids whose lease held."""
    if not leases:
        return set()
    d = dialect()
    held = set()
    with connection.cursor() as cursor:
        if d.pg:
            cursor.execute(
                f"UPDATE {JOB} SET lease_expires_at = now() + %s * interval '1 second' "
                f"FROM unnest(%s::uuid[], %s::uuid[]) AS v(job_id, lease_id) "
                f"WHERE {JOB}.id = v.job_id AND {JOB}.lease_id = v.lease_id "
                f"AND {JOB}.state = 'running' RETURNING {JOB}.id",
                [lease_seconds, [j for j, _ in leases], [lease for _, lease in leases]],
            )
            return {r[0] for r in cursor.fetchall()}
        for start in range(0, len(leases), 500):
            chunk = leases[start : start + 500]
            rows = ", ".join(["(%s, %s)"] * len(chunk))
            params = [d.uuid_value(x) for pair in chunk for x in pair]
            cursor.execute(
                f"WITH v (job_id, lease_id) AS (VALUES {rows}) "
                f"UPDATE {JOB} SET lease_expires_at = {d.after('%s')} FROM v "
                f"WHERE {JOB}.id = v.job_id AND {JOB}.lease_id = v.lease_id "
                f"AND {JOB}.state = 'running' RETURNING {JOB}.id",
                [*params, lease_seconds],
            )
            held.update(d.parse_uuid(r[0]) for r in cursor.fetchall())
    return held


@dataclass(slots=True)
class Expired:
    id: uuid.UUID
    lease_id: uuid.UUID
    task_path: str
    backend: str
    attempt: int
    max_attempts: int
    worker_id: str
    started_at: datetime | None

    def as_claimed(self) -> Claimed:
        """The claim the lost worker held, for the retry decision and its fencing."""
        return Claimed(
            id=self.id,
            lease_id=self.lease_id,
            task_path=self.task_path,
            args_json="",
            kwargs_json="",
            attempt=self.attempt,
            max_attempts=self.max_attempts,
            timeout=None,
            queue_name="",
            priority=0,
            backend=self.backend,
        )


def expired_leases(limit: int = 200, *, lock: bool = False) -> list[Expired]:
    """Running jobs whose lease ran out (their worker died, stalled or was cut off).

    With `lock` (inside a transaction), the rows are locked for the caller, and rows another
    session holds — a stalled worker half-way through recording them — are left for a later
    round: waiting for that session would stall the caller too.
    """
    d = dialect()
    skip = " FOR UPDATE SKIP LOCKED" if lock and d.pg else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, lease_id, task_path, backend, attempt, max_attempts, worker_id, "
            f"started_at FROM {JOB} WHERE state = 'running' AND lease_expires_at < {d.now} "
            f"ORDER BY lease_expires_at LIMIT %s{skip}",
            [limit],
        )
        rows = cursor.fetchall()
    return [
        Expired(
            d.parse_uuid(r[0]), d.parse_uuid(r[1]), r[2], r[3], r[4], r[5], r[6], d.parse_time(r[7])
        )
        for r in rows
    ]


def expire_not_after(limit: int = 1000) -> list[uuid.UUID]:
    """Cancel jobs not started by their not_after; their continuations are cancelled too."""
    d = dialect()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {JOB} SET state = 'cancelled', finished_at = {d.now}, "
            f"error_type = 'Expired', error_message = 'not started before not_after' "
            f"WHERE id IN (SELECT id FROM {JOB} WHERE state IN ('pending', 'retrying', "
            f"'scheduled') AND not_after IS NOT NULL AND not_after <= {d.now} LIMIT %s) "
            f"RETURNING id",
            [limit],
        )
        expired = [d.parse_uuid(r[0]) for r in cursor.fetchall()]
        if expired:
            cancel_continuations(expired, cursor=cursor)
            add_counters({"jobs_cancelled": len(expired)}, cursor=cursor)
    return expired


def settle_orphaned_continuations(limit: int = 1000) -> int:
    """Safety net: continuations whose parent already ended (enqueued in a race with it)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"SELECT c.parent_id, p.state FROM {JOB} c JOIN {JOB} p ON p.id = c.parent_id "
            f"WHERE c.state = 'scheduled' AND p.state IN ({TERMINAL_SQL}) LIMIT %s",
            [limit],
        )
        rows = cursor.fetchall()
        d = dialect()
        done = {d.parse_uuid(p) for p, s in rows if s == JobState.SUCCEEDED}
        failed = {d.parse_uuid(p) for p, s in rows if s != JobState.SUCCEEDED}
        n = 0
        if done:
            n += len(release_continuations(list(done), cursor=cursor))
        if failed:
            n += cancel_continuations(list(failed), cursor=cursor)
    return n


def compact_counters() -> None:
    """Fold the counter increments into one row per name.

    Safe with any number of workers doing it at once: the totals put back are summed from
    exactly the rows this statement deleted (PostgreSQL), and SQLite write transactions take
    the write lock at BEGIN, so two compactions never interleave there.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SELECT name, count(*) FROM {COUNTER} GROUP BY name")
        if all(count <= 1 for _, count in cursor.fetchall()):
            return
        if connection.vendor == "postgresql":
            cursor.execute(
                f"WITH gone AS (DELETE FROM {COUNTER} RETURNING name, value) "
                f"INSERT INTO {COUNTER} (name, value) "
                f"SELECT name, sum(value) FROM gone GROUP BY name"
            )
            return
        cursor.execute(f"SELECT name, sum(value) FROM {COUNTER} GROUP BY name")
        totals = cursor.fetchall()
        cursor.execute(f"DELETE FROM {COUNTER}")
        cursor.executemany(f"INSERT INTO {COUNTER} (name, value) VALUES (%s, %s)", totals)
