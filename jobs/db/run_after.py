"""Run after: jobs that wait for others (continuations, workflow nodes, batch callbacks).

A job that waits for others is `scheduled` with `waiting_for` = its unsettled upstream jobs
(Dependency rows: a continuation has one, a workflow node any number). When upstream jobs end,
one guarded update decrements their downstream jobs by the number of their edges to them, in
the transaction that ended them; the update that reaches 0 moves the job to pending.
Concurrent finishes serialise on the downstream row, so exactly one of them releases it.
PostgreSQL locks the downstream rows in id order first: two finishes sharing two downstream
jobs (a batch's callbacks) never wait on each other crosswise.
"""

from collections.abc import Callable
from typing import Any

from django.db import connection, transaction

from .. import payload
from ..states import (
    TERMINAL,
    JobState,
)
from .sql import (
    AUDIT,
    BATCH_CALLBACKS,
    DEPENDENCY,
    JOB,
    UPSTREAM_FAILED,
    UPSTREAM_FAILED_MESSAGE,
    parse_uuid,
    sql_in,
    sql_state,
)


class RunAfter:
    """The run-after statements of an Engine, which supplies the clock (`now`), uuids
    (`uuid_param`, `uuid_value`), counters (`add_counters`) and wake-ups (`notify`)."""

    now: str
    uuid_param: str
    wakes_workers: bool
    uuid_value: Callable[[Any], Any]
    notify: Callable[[Any], None]
    add_counters: Callable[..., None]

    def settle_sql(self, upstreams: str, only_runs_on_failure: bool) -> str:
        """Decrement the scheduled jobs after `upstreams` (a subquery of ids, or a list)."""
        left = f"CASE WHEN {JOB}.waiting_for > x.n THEN {JOB}.waiting_for - x.n ELSE 0 END"
        mode = f"AND {JOB}.runs_on_upstream_failure = TRUE" if only_runs_on_failure else ""
        return f"""
            UPDATE {JOB} SET waiting_for = {left},
                state = CASE WHEN {JOB}.waiting_for <= x.n THEN {sql_state(JobState.PENDING)}
                             ELSE {JOB}.state END,
                run_after = CASE WHEN {JOB}.waiting_for <= x.n THEN {self.now}
                                 ELSE {JOB}.run_after END
            FROM (SELECT downstream_id AS id, count(*) AS n FROM {DEPENDENCY}
                  WHERE upstream_id IN ({upstreams}) GROUP BY downstream_id) AS x
            WHERE {JOB}.id = x.id AND {JOB}.state = {sql_state(JobState.SCHEDULED)} {mode}
            RETURNING {JOB}.id, {JOB}.state, {JOB}.node_name, {JOB}.workflow_id
        """

    def lock_downstream(self, cursor, upstreams: str, params) -> None:
        """Lock the scheduled jobs after `upstreams` in id order (where rows can be locked)."""

    def _ids_param(self, ids) -> tuple[str, list]:
        values = [self.uuid_value(i) for i in ids]
        return ", ".join([self.uuid_param] * len(values)), values

    def release_continuations(self, parent_ids, *, cursor=None):
        """Jobs waiting for `parent_ids`, which succeeded, count them settled; those left
        waiting for nothing become pending (due now). Returns the ids released."""
        return self._settle(parent_ids, cursor=cursor, only_runs_on_failure=False)

    def _settle(self, upstream_ids, *, cursor, only_runs_on_failure):
        if not upstream_ids:
            return []
        upstreams, params = self._ids_param(upstream_ids)

        def run(c):
            self.lock_downstream(c, upstreams, params)
            c.execute(self.settle_sql(upstreams, only_runs_on_failure), params)
            rows = c.fetchall()
            released = [r for r in rows if r[1] == JobState.PENDING]
            self.after_release(c, released)
            return [parse_uuid(r[0]) for r in released]

        if cursor is not None:
            return run(cursor)
        with connection.cursor() as c:
            return run(c)

    def after_release(self, cursor, released) -> None:
        """Released rows (id, state, node_name, workflow_id): batch callbacks learn the batch's
        counts, and idle workers are woken."""
        callbacks = [r for r in released if r[3] is not None and r[2] in BATCH_CALLBACKS]
        for r in callbacks:
            self.give_batch_counts(cursor, r[0], r[3])
        if released and self.wakes_workers:
            self.notify(cursor)

    def give_batch_counts(self, cursor, job_id, workflow_id) -> None:
        """A released batch callback's keyword arguments: the batch id and its jobs' counts per
        state, read in the transaction that released it (every member has settled by then)."""
        names = ", ".join(f"'{n}'" for n in BATCH_CALLBACKS)
        cursor.execute(
            f"SELECT state, count(*) FROM {JOB} WHERE workflow_id = {self.uuid_param} "
            f"AND node_name NOT IN ({names}) GROUP BY state",
            [self.uuid_value(workflow_id)],
        )
        counts = {state: n for state, n in cursor.fetchall()}
        batch_id = str(parse_uuid(workflow_id))
        cursor.execute(
            f"UPDATE {JOB} SET kwargs = %s WHERE id = {self.uuid_param}",
            [payload.dumps({"batch_id": batch_id, "counts": counts}), self.uuid_value(job_id)],
        )

    def cancel_continuations(self, parent_ids, *, cursor=None):
        """Jobs waiting for `parent_ids`, which ended unsuccessfully: those that run whatever
        happens upstream count them settled; the others are cancelled, and so on downstream.

        Counted in `jobs_cancelled` here, in the caller's transaction, whichever path ended
        the parent.
        """

        def run(c):
            total = 0
            frontier = list(parent_ids)
            while frontier:
                self._settle(frontier, cursor=c, only_runs_on_failure=True)
                upstreams, params = self._ids_param(frontier)
                self.lock_downstream(c, upstreams, params)
                c.execute(
                    f"UPDATE {JOB} SET state = {sql_state(JobState.CANCELLED)}, "
                    f"finished_at = {self.now}, error_type = '{UPSTREAM_FAILED}', "
                    f"error_message = '{UPSTREAM_FAILED_MESSAGE}' "
                    f"WHERE state = {sql_state(JobState.SCHEDULED)} "
                    f"AND runs_on_upstream_failure = FALSE AND id IN "
                    f"(SELECT downstream_id FROM {DEPENDENCY} WHERE upstream_id IN ({upstreams})) "
                    "RETURNING id",
                    params,
                )
                frontier = [parse_uuid(r[0]) for r in c.fetchall()]
                self.audit_cancelled(c, frontier)
                total += len(frontier)
            self.add_counters({"jobs_cancelled": total}, cursor=c)
            return total

        if cursor is not None:
            return run(cursor)
        with connection.cursor() as c:
            return run(c)

    def audit_cancelled(self, cursor, job_ids) -> None:
        """An audit entry for each job cancelled because a job it waited for did not succeed:
        the engine's act, so its page and the audit log say who cancelled it."""
        if not job_ids:
            return
        ids, params = self._ids_param(job_ids)
        cursor.execute(
            f"INSERT INTO {AUDIT} (username, action, source, outcome, at, job_id, request_key, "
            "subject, task_path, detail) "
            f"SELECT '', 'cancel', 'workflow', 'job cancelled: {UPSTREAM_FAILED_MESSAGE}', "
            f"{self.now}, id, '', '', task_path, '{{}}' FROM {JOB} WHERE id IN ({ids})",
            params,
        )

    def link(self, edges, *, cursor=None) -> None:
        """Store (downstream, upstream) job id pairs."""
        if not edges:
            return
        sql = f"INSERT INTO {DEPENDENCY} (downstream_id, upstream_id) VALUES "
        for start in range(0, len(edges), 400):
            chunk = edges[start : start + 400]
            values = ", ".join([f"({self.uuid_param}, {self.uuid_param})"] * len(chunk))
            params = [self.uuid_value(x) for pair in chunk for x in pair]
            if cursor is not None:
                cursor.execute(sql + values, params)
            else:
                with connection.cursor() as c:
                    c.execute(sql + values, params)

    def settle_orphaned_continuations(self, limit: int = 1000) -> int:
        """Safety net: jobs still waiting although every job they wait for has ended (a
        continuation enqueued in a race with its parent's finish): they are settled now."""
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT c.id FROM {JOB} c WHERE c.state = {sql_state(JobState.SCHEDULED)} "
                f"AND NOT EXISTS (SELECT 1 FROM {DEPENDENCY} d JOIN {JOB} p "
                f"ON p.id = d.upstream_id WHERE d.downstream_id = c.id "
                f"AND p.state NOT IN ({sql_in(TERMINAL)})) LIMIT %s",
                [limit],
            )
            stuck = [parse_uuid(r[0]) for r in cursor.fetchall()]
            if not stuck:
                return 0
            ids, params = self._ids_param(stuck)
            cursor.execute(
                f"SELECT DISTINCT d.downstream_id FROM {DEPENDENCY} d "
                f"JOIN {JOB} p ON p.id = d.upstream_id WHERE d.downstream_id IN ({ids}) "
                f"AND p.state <> {sql_state(JobState.SUCCEEDED)}",
                params,
            )
            doomed = [parse_uuid(r[0]) for r in cursor.fetchall()]
            n = 0
            if doomed:
                doomed_ids, doomed_params = self._ids_param(doomed)
                cursor.execute(
                    f"UPDATE {JOB} SET state = {sql_state(JobState.CANCELLED)}, "
                    f"finished_at = {self.now}, error_type = '{UPSTREAM_FAILED}', "
                    f"error_message = '{UPSTREAM_FAILED_MESSAGE}' "
                    f"WHERE id IN ({doomed_ids}) AND state = {sql_state(JobState.SCHEDULED)} "
                    "AND runs_on_upstream_failure = FALSE RETURNING id",
                    doomed_params,
                )
                cancelled = [parse_uuid(r[0]) for r in cursor.fetchall()]
                self.audit_cancelled(cursor, cancelled)
                self.add_counters({"jobs_cancelled": len(cancelled)}, cursor=cursor)
                n += len(cancelled) + self.cancel_continuations(cancelled, cursor=cursor)
            # Waiting for nothing at all: released as the recount finds it.
            cursor.execute(
                f"UPDATE {JOB} SET state = {sql_state(JobState.PENDING)}, waiting_for = 0, "
                f"run_after = {self.now} WHERE id IN ({ids}) "
                f"AND state = {sql_state(JobState.SCHEDULED)} RETURNING id, state, node_name, "
                "workflow_id",
                params,
            )
            released = cursor.fetchall()
            self.after_release(cursor, released)
            return n + len(released)
