"""The engine interface, and every statement and rule both databases share, written once.

All state changes are guarded updates: they name the states a row may be in (from
jobs.states, never a literal) and, for a worker's writes, the `lease_id` of its claim, and
report which rows actually changed. A row that did not change means the caller lost a race; it
is never treated as success.

A database's engine (postgres.py, sqlite.py) says how its clock, its uuids and its times are
written, and supplies what only it does: inserting, claiming's execution, the finish statement,
lease renewal, counter compaction, wake-ups. Everything here reads the same on both.
"""

import json
import uuid
from functools import cached_property

from django.db import connection, transaction

from ..errors import CANCELLED_BY_OPERATOR, JobCancelled
from ..retry import MAX_ATTEMPTS
from ..states import (
    CANCEL_OVERRIDES,
    CLAIMABLE,
    TERMINAL,
    UNCLAIMABLE,
    WAITING,
    JobState,
)
from .columns import FINISHED_AT, Column
from .records import Claimed, Expired, Finish
from .run_after import RunAfter
from .sql import (
    CLAIMED_COLUMNS,
    COUNTER,
    JOB,
    PAUSED,
    STARTS,
    parse_time,
    parse_uuid,
    sql_in,
    sql_state,
)


class Engine(RunAfter):
    vendor: str
    # The database clock, as SQL.
    now: str
    # A uuid parameter's placeholder.
    uuid_param: str = "%s"
    # Can a SELECT lock the rows it reads until the transaction ends?
    locks_rows: bool = False
    # Are idle workers woken by a notification (else they poll)?
    wakes_workers: bool = False
    # Does the finish statement itself bring the rate starts of attempts that ran forward to
    # the finish (else after_finish does)?
    finish_marks_starts: bool = False
    # Has a claim of this process recorded rate starts? Until then its finishes have none to
    # bring forward (a start left at its latest moment still counts exactly, only longer).
    recorded_starts: bool = False

    # --- how this database writes values --------------------------------------------------

    def after(self, expr: str) -> str:
        """now + `expr` seconds, as SQL."""
        raise NotImplementedError

    def uuid_value(self, value):
        raise NotImplementedError

    def time_value(self, value):
        """A datetime parameter as this database stores it."""
        return value

    def as_text(self, column: str) -> str:
        """A JSON column read as its text."""
        return column

    def skip_locked(self, lock: bool) -> str:
        """The clause leaving rows another session holds, when `lock` asks for row locks."""
        return ""

    def notify(self, cursor) -> None:
        """Wake idle workers (delivered at commit), on a database that `wakes_workers`."""
        raise NotImplementedError

    def notify_workers(self) -> None:
        if self.wakes_workers:
            with connection.cursor() as cursor:
                self.notify(cursor)

    def configure_worker_session(self, conn, *, lease_seconds, heartbeat_seconds) -> None:
        """Settings of a worker's own connection; none by default."""

    def listener(self, options: dict):
        """What wakes an idle worker when a job becomes due (a records.Listener), or None:
        the worker polls. `options`: the backend's OPTIONS."""
        return None

    # --- claim ------------------------------------------------------------------------------

    def claimed_columns(self) -> str:
        return CLAIMED_COLUMNS.format(
            args=self.as_text("args"),
            kwargs=self.as_text("kwargs"),
            backoff=self.as_text("backoff"),
        )

    def claim_sets(self) -> str:
        """The assignments of a claim: running, one more attempt, a fresh lease, and no
        progress until this attempt reports its own."""
        return (
            f"state = {sql_state(JobState.RUNNING)}, attempt = attempt + 1, progress = NULL, "
            f"lease_id = {self.uuid_param}, "
            f"lease_expires_at = {self.after('%s')}, started_at = {self.now}, worker_id = %s"
        )

    def claim_source(self, shape: int) -> str:
        """The table a claim reads due jobs from (SQLite names the index to read it by)."""
        return JOB

    # A claim walks the claim index one priority at a time. Read as one range, the index puts
    # every job of a higher priority first, due or not: 200,000 jobs at priority 10 waiting for
    # tomorrow (or for their backoff) were read by every claim of the due jobs at priority 0.
    # Within one priority the index is in due order, so each level's due jobs are read in claim
    # order and the read stops at the first not yet due; `top_level` finds the next level down
    # in one index descent.

    def claimable(self, shape: int) -> str:
        """Claimable, said as the claim index of this shape says it (jobs.models: why)."""
        if shape:
            return f"NOT (state IN ({sql_in(UNCLAIMABLE)}))"
        return f"state IN ({sql_in(CLAIMABLE)})"

    def top_level(self, queue_test: str, shape: int, below: str = "") -> str:
        """The highest priority among claimable jobs (`below`: `AND priority < ...`)."""
        return f"""
            SELECT priority FROM {self.claim_source(shape)}
            WHERE {self.claimable(shape)} {queue_test} {below}
            ORDER BY priority DESC LIMIT 1
        """

    def due_jobs(self, columns: str, queue_test: str, shape: int) -> str:
        """Due jobs in claim order, up to a LIMIT placeholder."""
        return f"""
            SELECT {columns} FROM {self.claim_source(shape)}
            WHERE {self.claimable(shape)} AND run_after <= {self.now}
              AND attempt < max_attempts
              AND (not_after IS NULL OR not_after > {self.now}) {queue_test}
              AND queue_name NOT IN (SELECT name FROM {PAUSED})
            ORDER BY priority DESC, run_after
            LIMIT %s {self.skip_locked(True)}
        """

    def level_walk(self, queue_test: str, shape: int) -> str:
        """`WITH RECURSIVE level(priority)`: the priorities of claimable jobs, highest first.

        Its last row is NULL (nothing lower); readers of a level skip it. Parameters: those of
        `queue_test`, twice.
        """
        return f"""
            WITH RECURSIVE level(priority) AS (
                SELECT ({self.top_level(queue_test, shape)})
                UNION ALL
                SELECT ({self.top_level(queue_test, shape, "AND priority < level.priority")})
                FROM level WHERE level.priority IS NOT NULL
            )
        """

    def claimed_from_row(self, r, lease_id) -> Claimed:
        """A row of CLAIMED_COLUMNS as a Claimed."""
        return Claimed(
            id=parse_uuid(r[0]),
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
            started_at=parse_time(r[10]),
            enqueued_at=parse_time(r[11]),
            backoff=json.loads(r[12]) if isinstance(r[12], str | bytes) else r[12],
            snoozes=r[13],
            limit_key=r[14],
            attempts_given_back=r[15],
            snoozes_forgiven=r[16],
        )

    def claimed_batch(self, rows, lease_id) -> list[Claimed]:
        """A claim's rows as Claimed, in claim order: highest priority first, then due first.

        An UPDATE returns its rows in no set order, and the worker hands its jobs to executors
        in this order: a sync job held back for must come before the coroutines claimed with
        it (jobs.pool.dispatcher)."""
        rows = sorted(rows, key=lambda r: (-r[8], r[-1]))
        return [self.claimed_from_row(r, lease_id) for r in rows]

    def claim(self, *, worker_id: str, queues: list[str] | None, limit: int, lease_seconds: float):
        """Claim up to `limit` due jobs in priority order (then due time), under one fresh
        lease_id; `queues` None means every queue."""
        raise NotImplementedError

    def claim_within(self, *, limits=None, can_begin=None, **claim_args):
        """`claim`, or the claim under flow control (db.limited) while a limit is in force.

        `limits` is a jobs.limits.LimitsCache (a worker's); None claims without limits.
        `can_begin`: how many claimed jobs could begin at once (idle executors); jobs under a
        rate limit are taken only up to it, as they must begin at once.
        """
        in_force = limits.current() if limits is not None else None
        if in_force is None:
            return self.claim(**claim_args)
        if not in_force.limits_claims and not (in_force.takes_turns and in_force.turns_pending()):
            # No budget to count: between the keys' turns a claim is the one statement, and
            # only says which keys it served, so that the next turn goes to the others.
            batch = self.claim(**claim_args)
            if in_force.takes_turns:
                in_force.took_keys({c.limit_key for c in batch})
            return batch
        from .limited import claim_limited

        return claim_limited(self, limits=in_force, can_begin=can_begin, **claim_args)

    def local_settings(self, cursor) -> None:
        """A worker's settings for the current transaction only (behind a pooler); none by
        default."""

    def key_source(self) -> str:
        """The table flow control's turns read each limit key's due jobs from."""
        return JOB

    def keyed_jobs_waiting(self) -> bool:
        """Does a pending or retrying job carry a limit key (one read of the keys' index)?"""
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM {self.key_source()} WHERE limit_key IS NOT NULL "
                f"AND state IN ({sql_in(CLAIMABLE)}) LIMIT 1"
            )
            return cursor.fetchone() is not None

    def in_list(self, column: str) -> str:
        """`column` is one of the values of a list_value parameter."""
        return f"{column} IN (SELECT value FROM json_each(%s))"

    def list_value(self, values) -> object:
        return json.dumps(list(values))

    def lock_budgets(self, cursor, budget_ids: list[str], *, wait=False) -> set[str]:
        """Hold flow-control budgets until the transaction ends; returns those held. Where
        every write transaction holds the database's write lock, that is all of them."""
        return set(budget_ids)

    @cached_property
    def claim_one_sql(self) -> str:
        return f"""
            UPDATE {JOB} SET {self.claim_sets()}
            WHERE id = {self.uuid_param} AND state IN ({sql_in(CLAIMABLE)})
              AND attempt < max_attempts
            RETURNING {self.claimed_columns()}
        """

    def claim_one(self, job_id, *, worker_id: str, lease_seconds: float) -> Claimed | None:
        """Claim one specific due job (the eager backend runs jobs this way)."""
        lease_id = uuid.uuid4()
        with connection.cursor() as cursor:
            cursor.execute(
                self.claim_one_sql,
                [self.uuid_value(lease_id), lease_seconds, worker_id, self.uuid_value(job_id)],
            )
            r = cursor.fetchone()
        return None if r is None else self.claimed_from_row(r, lease_id)

    # --- finish -----------------------------------------------------------------------------

    def set_outcome_sql(self, running: str, pick: str = "") -> str:
        """The SET clause applying row v of outcomes to the job (`running`: the state guard;
        `pick`: a further condition on the job rows, ANDed to the join on v).

        Every expression reads the row as it was before the update, in both databases.
        """
        # A running job whose cancel was requested ends cancelled however its attempt ended
        # (CANCEL_OVERRIDES): the row knows of a request its worker may not have seen yet.
        state = (
            f"(CASE WHEN {JOB}.cancel_requested_at IS NOT NULL "
            f"AND v.new_state IN ({sql_in(CANCEL_OVERRIDES)}) "
            f"THEN {sql_state(JobState.CANCELLED)} ELSE v.new_state END)"
        )
        terminal = f"{state} IN ({sql_in(TERMINAL)})"
        has_error = "v.error_type <> ''"
        pending = sql_state(JobState.PENDING)
        cancelled = sql_state(JobState.CANCELLED)
        gives_back = f"v.raise_max = 1 AND {JOB}.max_attempts < {MAX_ATTEMPTS}"
        return f"""
            state = {state},
            finished_at = CASE WHEN {terminal} THEN {self.now} ELSE NULL END,
            return_value = CASE WHEN {state} = {sql_state(JobState.SUCCEEDED)}
                                THEN v.return_value ELSE {JOB}.return_value END,
            run_after = CASE WHEN {state} = {sql_state(JobState.RETRYING)} OR v.snoozed = 1
                             THEN {self.after("v.delay")} ELSE {JOB}.run_after END,
            attempt = CASE WHEN v.new_state = {pending} THEN {JOB}.attempt - 1
                           ELSE {JOB}.attempt END,
            started_at = CASE WHEN v.new_state = {pending} AND {JOB}.attempt = 1
                                   AND v.snoozed = 0 THEN NULL
                              ELSE {JOB}.started_at END,
            worker_id = CASE WHEN v.new_state = {pending} AND v.snoozed = 0 THEN ''
                             ELSE {JOB}.worker_id END,
            snoozes = {JOB}.snoozes + v.snoozed,
            max_attempts = CASE WHEN {gives_back} THEN {JOB}.max_attempts + 1
                                ELSE {JOB}.max_attempts END,
            attempts_given_back = CASE WHEN {gives_back} THEN {JOB}.attempts_given_back + 1
                                       ELSE {JOB}.attempts_given_back END,
            dead_letter_reason = CASE WHEN {state} = {sql_state(JobState.DEAD_LETTER)}
                                      THEN v.reason ELSE '' END,
            error_type = CASE WHEN {has_error} THEN v.error_type
                              WHEN {state} = {cancelled} THEN '{JobCancelled.__name__}'
                              ELSE {JOB}.error_type END,
            error_message = CASE WHEN {has_error} THEN v.error_message
                                 WHEN {state} = {cancelled} THEN '{CANCELLED_BY_OPERATOR}'
                                 ELSE {JOB}.error_message END,
            error_traceback = CASE WHEN {has_error} THEN v.error_traceback
                                   ELSE {JOB}.error_traceback END,
            lease_id = NULL,
            lease_expires_at = NULL,
            cancel_requested_at = CASE WHEN {terminal} THEN {JOB}.cancel_requested_at
                                       ELSE NULL END
        FROM v
        WHERE {JOB}.id = v.job_id AND {JOB}.lease_id = v.lease_id AND {JOB}.state = {running}
          AND (v.only_if_expired = 0 OR {JOB}.lease_expires_at < {self.now}){pick}
    """

    def finish(self, results: list[Finish]) -> list[Finish]:
        """Apply the outcomes whose lease still holds; return those that took effect.

        One transaction: the guarded job update, the attempt rows, the continuations of jobs
        that became terminal, and the counters.
        """
        if not results:
            return []
        applied: list[Finish] = []
        with transaction.atomic(savepoint=False), connection.cursor() as cursor:
            for chunk_start in range(0, len(results), 1000):
                chunk = results[chunk_start : chunk_start + 1000]
                applied.extend(self.finish_chunk(cursor, chunk))
            if applied:
                self.after_finish(cursor, applied)
        return applied

    def finish_chunk(self, cursor, chunk: list[Finish]) -> list[Finish]:
        raise NotImplementedError

    def after_finish(self, cursor, applied: list[Finish]) -> None:
        """What the finish statement left to do for the outcomes that took effect."""
        ended_badly = [
            r.job_id for r in applied if r.state in (JobState.DEAD_LETTER, JobState.CANCELLED)
        ]
        if ended_badly:
            self.cancel_continuations(ended_badly, cursor=cursor)
        # Handed back unstarted (released): its rate starts never happened, their room is free.
        released = [self.uuid_value(r.job_id) for r in applied if r.outcome is None]
        if released:
            cursor.execute(
                f"DELETE FROM {STARTS} WHERE {self.in_list('job_id')}",
                [self.list_value(released)],
            )
        ran = [self.uuid_value(r.job_id) for r in applied if r.outcome is not None]
        if ran and self.recorded_starts and not self.finish_marks_starts:
            cursor.execute(self.starts_begun_sql, [self.list_value(ran)])

    @cached_property
    def starts_begun_sql(self) -> str:
        """An attempt that ran began before its finish: its rate starts count from the finish
        if that is before their latest moment (jobs.db.limited: still exact)."""
        return (
            f"UPDATE {STARTS} SET started_at = {self.now} "
            f"WHERE {self.in_list('job_id')} AND started_at > {self.now}"
        )

    def finish_and_claim(self, results: list[Finish], **claim_args):
        """Record outcomes and claim the next batch in one transaction (one commit to wait for)."""
        wants_claim = claim_args.get("limit", 0) > 0
        if not results:
            # One statement commits by itself: no BEGIN/COMMIT round trips on the wake-up path.
            return [], self.claim_within(**claim_args) if wants_claim else []
        with transaction.atomic(savepoint=False):
            applied = self.finish(results)
            claimed = self.claim_within(**claim_args) if wants_claim else []
        return applied, claimed

    def add_counters(self, counts: dict[str, int], *, cursor=None):
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

    def compact_counters(self) -> None:
        """Fold the counter increments into one row per name.

        Safe with any number of workers doing it at once (see each engine's fold_counters).
        """
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SELECT name, count(*) FROM {COUNTER} GROUP BY name")
            if all(count <= 1 for _, count in cursor.fetchall()):
                return
            self.fold_counters(cursor)

    def fold_counters(self, cursor) -> None:
        raise NotImplementedError

    # --- enqueue ------------------------------------------------------------------------------

    def finished_at_value(self, column: Column, row: dict):
        """A new job is finished at enqueue only when it is enqueued in a terminal state."""
        return column.name == FINISHED_AT and row["state"] in TERMINAL

    def insert_job(self, row: dict) -> None:
        raise NotImplementedError

    def insert_job_batch(self, template: dict, calls) -> None:
        raise NotImplementedError

    def insert_jobs(self, rows: list[dict]) -> None:
        """Insert new jobs of any shape (a workflow's nodes) in the caller's transaction."""
        raise NotImplementedError

    # --- heartbeat, recovery, expiry ---------------------------------------------------------

    def renew_leases(self, leases, lease_seconds: float) -> set:
        """Extend the leases this worker still holds; returns the job ids whose lease held."""
        if not leases:
            return set()
        return self.extend_leases(leases, lease_seconds)

    def extend_leases(self, leases, lease_seconds: float) -> set:
        raise NotImplementedError

    def expired_leases(self, limit: int = 200, *, lock: bool = False) -> list[Expired]:
        """Running jobs whose lease ran out (their worker died, stalled or was cut off).

        With `lock` (inside a transaction), the rows are locked for the caller, and rows another
        session holds — a stalled worker half-way through recording them — are left for a later
        round: waiting for that session would stall the caller too.
        """
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id, lease_id, task_path, backend, attempt, max_attempts, worker_id, "
                f"started_at, {self.as_text('backoff')} FROM {JOB} "
                f"WHERE state = {sql_state(JobState.RUNNING)} AND lease_expires_at < {self.now} "
                f"ORDER BY lease_expires_at LIMIT %s{self.skip_locked(lock)}",
                [limit],
            )
            rows = cursor.fetchall()
        return [
            Expired(
                parse_uuid(r[0]),
                parse_uuid(r[1]),
                r[2],
                r[3],
                r[4],
                r[5],
                r[6],
                parse_time(r[7]),
                json.loads(r[8]) if r[8] else None,
            )
            for r in rows
        ]

    def expire_not_after(self, limit: int = 1000) -> list[uuid.UUID]:
        """Cancel jobs not started by their not_after; their continuations are cancelled too."""
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {JOB} SET state = {sql_state(JobState.CANCELLED)}, "
                f"finished_at = {self.now}, "
                f"error_type = 'Expired', error_message = 'not started before not_after' "
                f"WHERE id IN (SELECT id FROM {JOB} WHERE state IN ({sql_in(WAITING)}) "
                f"AND not_after IS NOT NULL AND not_after <= {self.now} LIMIT %s) "
                f"RETURNING id",
                [limit],
            )
            expired = [parse_uuid(r[0]) for r in cursor.fetchall()]
            if expired:
                self.cancel_continuations(expired, cursor=cursor)
                self.add_counters({"jobs_cancelled": len(expired)}, cursor=cursor)
        return expired
