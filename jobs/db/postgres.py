"""The PostgreSQL engine: COPY, SKIP LOCKED, the one-statement finish, prepared statements, NOTIFY.

Times come from the server's clock (`now()`, the transaction's start). Claims lock their rows
with `FOR UPDATE SKIP LOCKED`, so workers never wait on each other. The hot statements (insert,
claim, finish) have a constant text whatever the batch size (arrays or one JSON document in),
and go through a psycopg cursor that prepares them once per connection and binds parameters on
the server. A finish is one statement (its text: postgres_finish.py). Idle workers LISTEN on
NOTIFY_CHANNEL (postgres_notify.py); every statement that makes a job due sends one NOTIFY (an
insert's comes from the job table's insert trigger, migration 0022).
"""

import uuid
from contextlib import nullcontext
from datetime import datetime
from functools import cached_property
from itertools import batched

from django.db import connection, transaction

from ..states import TERMINAL, JobState
from .columns import FINISHED_AT, job_inserted
from .engine import Engine
from .pooler import is_pooled
from .postgres_finish import finish_document, finish_statement
from .postgres_notify import NOTIFY, NOTIFY_CHANNEL, listener_for
from .records import Finish
from .sql import COUNTER, DEPENDENCY, JOB, applied_as, insert_value, sql_in, sql_state

__all__ = ["NOTIFY_CHANNEL", "BoundCursor", "PostgresEngine"]

# A prepare threshold no statement reaches by repetition: only `prepare=True` prepares.
ONLY_WHEN_ASKED = 2**31 - 1


class BoundCursor:
    """A psycopg cursor with server-side binding for the hot statements.

    Django's own cursors interpolate on the client. Errors come out as Django's database
    exceptions, like any other query.

    Django turns psycopg's prepared statements off (`prepare_threshold` None) for the sake of
    connection poolers, and psycopg then ignores `prepare=True`; planning the hot statements
    afresh costs more than running them. So, unless the project's DATABASES OPTIONS name
    `prepare_threshold` themselves, the threshold is raised to "never automatically": only
    these explicitly marked statements are prepared. Behind a transaction-mode pooler without
    prepared-statement support (found by is_pooled) they stay off; naming
    `prepare_threshold` in OPTIONS decides either way (PgBouncer >= 1.21 with
    max_prepared_statements keeps them).
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
            and not is_pooled(connection)
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


class PostgresEngine(Engine):
    vendor = "postgresql"
    now = "now()"
    uuid_param = "%s::uuid"
    locks_rows = True
    wakes_workers = True
    finish_marks_starts = True

    def after(self, expr):
        return f"now() + ({expr}) * interval '1 second'"

    def uuid_value(self, value):
        if value is None or isinstance(value, uuid.UUID):
            return value
        return uuid.UUID(str(value))

    def as_text(self, column):
        return f"{column}::text"

    def skip_locked(self, lock):
        return " FOR UPDATE SKIP LOCKED" if lock else ""

    def notify(self, cursor):
        cursor.execute(NOTIFY)

    def listener(self, options):
        return listener_for(connection, options)

    def in_list(self, column):
        return f"{column} = ANY(%s)"

    def list_value(self, values):
        return list(values)

    def lock_budgets(self, cursor, budget_ids, *, wait=False):
        """Transaction-scoped advisory locks; nothing outlives the transaction (poolers in
        transaction mode keep working). With `wait`, taken in key order, waiting for claims
        holding them (a claim waits only while it holds nothing taken later than in key order,
        so no two claims wait on each other); otherwise tried, and a budget another claim
        holds right now is left to it."""
        from .limited import LOCK_SPACE, lock_key

        keys = {}
        for i in budget_ids:
            keys.setdefault(lock_key(i), []).append(i)
        if wait:
            cursor.execute(
                "SELECT count(pg_advisory_xact_lock(%s, k)) FROM "
                "(SELECT k FROM unnest(%s::int[]) AS k ORDER BY k) AS ordered",
                [LOCK_SPACE, sorted(keys)],
            )
            return set(budget_ids)
        cursor.execute(
            "SELECT k FROM unnest(%s::int[]) AS k WHERE pg_try_advisory_xact_lock(%s, k)",
            [list(keys), LOCK_SPACE],
        )
        return {i for (k,) in cursor.fetchall() for i in keys[k]}

    def lock_downstream(self, cursor, upstreams, params):
        cursor.execute(
            f"SELECT id FROM {JOB} WHERE state = {sql_state(JobState.SCHEDULED)} AND id IN "
            f"(SELECT downstream_id FROM {DEPENDENCY} WHERE upstream_id IN ({upstreams})) "
            "ORDER BY id FOR UPDATE",
            params,
        )

    def configure_worker_session(self, conn, *, lease_seconds, heartbeat_seconds):
        """A worker's connection. A stalled worker must not hold locks longer than a lease, nor
        wait on one longer than a heartbeat (PostgreSQL ends the session or the statement; the
        worker reconnects).

        No bitmap scans: a claim must walk its index in claim order and stop at its LIMIT. With
        statistics taken before the table held due jobs (a new installation's first burst, any
        bulk load, a server running without autovacuum) the planner believes a handful of rows
        are due, reads every due row through a bitmap instead and sorts them all, on every
        claim, a cost growing with the backlog (bench/README.md, "claims and plans"). The
        worker's other statements read rows by key or through small partial indexes, where a
        bitmap scan gains nothing (pruning runs in its own command, not in the worker).

        Through a transaction-mode pooler a session setting would stay behind for the next
        client of that session and be missing from the worker's next transaction: there the
        claim and the finish take lock_timeout and enable_bitmapscan for their own transaction
        (local_settings), and the pooler's own idle_transaction_timeout stands in for
        PostgreSQL's.
        """
        timeouts = [f"{int(lease_seconds * 1000)}ms", f"{int(heartbeat_seconds * 1000)}ms"]
        if is_pooled(conn):
            conn.jobsite_local_settings = timeouts[1:]
            return
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('idle_in_transaction_session_timeout', %s, false), "
                "set_config('lock_timeout', %s, false), "
                "set_config('enable_bitmapscan', 'off', false)",
                timeouts,
            )

    def local_settings(self, cursor):
        """The worker's settings for the current transaction only (behind a pooler)."""
        lock_timeout = getattr(connection, "jobsite_local_settings", None)
        if lock_timeout:
            cursor.execute(
                "SELECT set_config('lock_timeout', %s, true), "
                "set_config('enable_bitmapscan', 'off', true)",
                lock_timeout,
            )

    # --- enqueue ------------------------------------------------------------------------------

    @cached_property
    def insert_one_sql(self) -> str:
        """One job: one plain INSERT of constant text. The insert trigger counts it and wakes
        idle workers (migration 0022), as it does for every insert.

        Named parameters, one per column, so that finished_at can read the state's.
        """
        inserted = job_inserted()
        values = ", ".join(
            f"CASE WHEN %(state)s::text IN ({sql_in(TERMINAL)}) THEN now() END"
            if c.name == FINISHED_AT
            else f"COALESCE(%({c.name})s::{c.pg_type}, now())"
            if c.defaults_to_now
            else f"%({c.name})s::{c.pg_type}"
            for c in inserted
        )
        return f"INSERT INTO {JOB} ({', '.join(c.name for c in inserted)}) VALUES ({values})"

    def insert_job(self, row: dict) -> None:
        """`row` carries already-validated values; `run_after` None means now."""
        values = {c.name: insert_value(c, row) for c in job_inserted()}
        with BoundCursor() as cursor:
            cursor.execute(self.insert_one_sql, values, prepare=True)

    def insert_job_batch(self, template: dict, calls) -> None:
        """The rows stream in through COPY, formatted here: only id, args and kwargs differ."""
        inserted = job_inserted()
        with transaction.atomic(), BoundCursor() as cursor:
            # The transaction's now(), as the single-row statement would have used.
            now = cursor.execute("SELECT now()").fetchone()[0]
            shared = {**template}
            for column in inserted:
                if column.defaults_to_now and shared.get(column.name) is None:
                    shared[column.name] = now
            if shared["state"] in TERMINAL:
                shared[FINISHED_AT] = now
            varying = {"id": "{0}", "args": "{1}", "kwargs": "{2}"}
            line = (
                "\t".join(
                    varying.get(c.name)
                    or _copy_text(insert_value(c, shared)).replace("{", "{{").replace("}", "}}")
                    for c in inserted
                )
                + "\n"
            ).format
            names = ", ".join(c.name for c in inserted)
            with cursor.copy(f"COPY {JOB} ({names}) FROM STDIN") as copy:
                for chunk in batched(calls, 2000):
                    # 32 hex digits are a uuid to PostgreSQL, and cost a tenth of str(uuid).
                    # JSON text has no raw tab or newline: only its backslashes double.
                    copy.write(
                        "".join(
                            line(i.hex, a.replace("\\", "\\\\"), k.replace("\\", "\\\\"))
                            for i, a, k in chunk
                        )
                    )

    def insert_jobs(self, rows: list[dict]) -> None:
        """Rows of any shape stream in through COPY; one count, one wake-up."""
        if not rows:
            return
        inserted = job_inserted()
        names = ", ".join(c.name for c in inserted)
        with transaction.atomic(), BoundCursor() as cursor:
            now = cursor.execute("SELECT now()").fetchone()[0]

            def value(column, row):
                if column.name == FINISHED_AT:
                    return now if row["state"] in TERMINAL else None
                v = insert_value(column, row)
                return now if v is None and column.defaults_to_now else v

            with cursor.copy(f"COPY {JOB} ({names}) FROM STDIN") as copy:
                for start in range(0, len(rows), 2000):
                    copy.write(
                        "".join(
                            "\t".join(_copy_text(value(c, row)) for c in inserted) + "\n"
                            for row in rows[start : start + 2000]
                        )
                    )

    def link(self, edges, *, cursor=None) -> None:
        if not edges:
            return
        sql = f"COPY {DEPENDENCY} (downstream_id, upstream_id) FROM STDIN"
        with BoundCursor() as bound, bound.copy(sql) as copy:
            for start in range(0, len(edges), 5000):
                copy.write(
                    "".join(
                        f"{self.uuid_value(d).hex}\t{self.uuid_value(u).hex}\n"
                        for d, u in edges[start : start + 5000]
                    )
                )

    # --- claim --------------------------------------------------------------------------------

    # One statement of constant text per shape: the due jobs' ids picked by walking the claim
    # index level by level (engine.level_walk), locked with SKIP LOCKED, and claimed. The ids
    # come as an array, looked up in the primary key: as `id IN (...)`, on a table of tens of
    # thousands of jobs, the planner hashed them and read the whole table instead.

    def claim(self, *, worker_id, queues, limit, lease_seconds):
        lease_id = uuid.uuid4()
        queues = list(dict.fromkeys(queues)) if queues else None
        pooled = getattr(connection, "jobsite_local_settings", None)
        in_transaction = transaction.atomic(savepoint=False) if pooled else nullcontext()
        with in_transaction, BoundCursor() as cursor:
            self.local_settings(cursor)
            cursor.execute(
                self.claim_sql(queues),
                self.claim_params(lease_id, lease_seconds, worker_id, queues, limit),
                prepare=True,
            )
            rows = cursor.fetchall()
        return self.claimed_batch(rows, lease_id)

    def claim_shape(self, queues) -> int:
        """What a claim's text depends on: 0 for every queue, 1 for one, 2 for several (one
        array parameter, so the text stays the same for any list)."""
        return min(len(queues), 2) if queues else 0

    def claim_sql(self, queues=None) -> str:
        """The claim statement for `queues` (parameters: claim_params)."""
        return self._claim_sql[self.claim_shape(queues)]

    @cached_property
    def _claim_sql(self) -> dict[int, str]:
        return {
            shape: f"""
                UPDATE {JOB} SET {self.claim_sets()}
                WHERE id = ANY(ARRAY({self.claim_ids(shape)}))
                RETURNING {self.claimed_columns()}
            """
            for shape in (0, 1, 2)
        }

    def claim_params(self, lease_id, lease_seconds, worker_id, queues, limit) -> list:
        """The parameters of claim_sql(queues), in order."""
        sets = [self.uuid_value(lease_id), lease_seconds, worker_id]
        if not queues:
            return [*sets, limit, limit]
        if len(queues) == 1:
            # The queue in both level lookups and in the read.
            return [*sets, *queues * 3, limit, limit]
        return [*sets, list(queues), limit, limit, limit]

    def claim_ids(self, shape):
        if shape < 2:
            return self.by_level("id", "AND queue_name = %s" if shape else "", shape)
        # Each queue's first LIMIT rows are locked; those the merge leaves out stay locked (and
        # skipped by other workers) only until this claim commits.
        return f"""
            SELECT due.id FROM unnest(%s::text[]) AS q(name)
            CROSS JOIN LATERAL (
                {self.by_level("id, priority, run_after", "AND queue_name = q.name", shape)}
            ) AS due
            ORDER BY due.priority DESC, due.run_after
            LIMIT %s
        """

    def by_level(self, columns, queue_test, shape):
        """Due jobs in claim order, read one priority level at a time.

        No ORDER BY at the end, on purpose: sorting would read every level, locking up to LIMIT
        rows in each. The recursive query yields the levels from the highest down, and the
        nested loop over them keeps that order, so the first LIMIT rows are the claim's.
        """
        due = self.due_jobs(columns, f"{queue_test} AND priority = level.priority", shape)
        picked = ", ".join(f"due.{c.strip()}" for c in columns.split(","))
        return f"""
            {self.level_walk(queue_test, shape)}
            SELECT {picked} FROM level CROSS JOIN LATERAL ({due}) AS due
            LIMIT %s
        """

    # --- finish -------------------------------------------------------------------------------

    @cached_property
    def finish_sql(self) -> str:
        return finish_statement(self)

    def finish_chunk(self, cursor, chunk: list[Finish]) -> list[Finish]:
        with BoundCursor() as bound:
            self.local_settings(bound)
            bound.execute(self.finish_sql, [finish_document(chunk)], prepare=True)
            rows = bound.fetchall()
        changed = {row[0]: row[1] for row in rows}
        if rows and rows[0][3]:
            for job_id, batch_id in zip(rows[0][3], rows[0][4], strict=True):
                self.give_batch_counts(cursor, job_id, batch_id)
        return [applied_as(r, changed[r.job_id]) for r in chunk if r.job_id in changed]

    # --- heartbeat, counters ------------------------------------------------------------------

    def extend_leases(self, leases, lease_seconds: float) -> set:
        # The rows are locked in id order first, as every statement that locks several jobs
        # locks them: updated in the order of the join, a renewal met a bulk cancel of the
        # same running jobs in a lock cycle, which PostgreSQL broke by rolling one back.
        with connection.cursor() as cursor:
            cursor.execute(
                f"WITH v AS (SELECT * FROM unnest(%s::uuid[], %s::uuid[]) AS v(job_id, lease_id)), "
                f"own AS (SELECT id FROM {JOB} WHERE id = ANY(ARRAY(SELECT job_id FROM v)) "
                f"ORDER BY id FOR UPDATE) "
                f"UPDATE {JOB} SET lease_expires_at = {self.after('%s')} FROM v "
                f"WHERE {JOB}.id = v.job_id AND {JOB}.lease_id = v.lease_id "
                f"AND {JOB}.id = ANY(ARRAY(SELECT id FROM own)) "
                f"AND {JOB}.state = {sql_state(JobState.RUNNING)} RETURNING {JOB}.id",
                [[j for j, _ in leases], [lease for _, lease in leases], lease_seconds],
            )
            return {r[0] for r in cursor.fetchall()}

    def fold_counters(self, cursor) -> None:
        # The totals put back are summed from exactly the rows this statement deleted, so
        # concurrent compactions and increments lose nothing.
        cursor.execute(
            f"WITH gone AS (DELETE FROM {COUNTER} RETURNING name, value) "
            f"INSERT INTO {COUNTER} (name, value) "
            f"SELECT name, sum(value) FROM gone GROUP BY name"
        )


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
