"""PostgreSQL's one-statement finish: the guarded job update, the attempt rows, the released
continuations, the counters and the wake-up, for a whole batch of outcomes at once."""

import json

from ..errors import CANCELLED_BY_OPERATOR, JobCancelled
from ..moments import to_micros
from ..states import AttemptOutcome, JobState
from .columns import attempt_row
from .postgres_notify import NOTIFY_CHANNEL
from .records import Finish
from .sql import (
    ATTEMPT,
    BATCH_CALLBACKS,
    COUNTER,
    DEPENDENCY,
    FINISH_COUNTERS,
    JOB,
    STARTS,
    sql_in,
    sql_state,
)

# The outcome columns the finish statement reads from its one JSON parameter, in order, with
# their types: Finish.values() (OUTCOME_COLUMNS, the return value as JSON text), then the
# attempt's own. The attempt's times come as whole microseconds since the epoch: exact, and a
# fifth of the client's cost of ISO text (finish_document builds hundreds of these per
# transaction).
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
    ("snoozed", "int"),
    ("outcome", "text"),
    ("worker_id", "text"),
    ("started_us", "int8"),
    ("finished_us", "int8"),
)


def finish_statement(engine) -> str:
    """One statement of constant text whatever the batch size.

    The outcomes arrive as one JSON document (encoded in C by the json module; fifteen
    parameter arrays cost far more to adapt), an array per outcome: read by position from
    jsonb, they cost PostgreSQL half of what objects read by `json_to_recordset` did, and the
    client half of what building them did.
    """
    # An attempt a cancel ended without an error of its own (it returned) says why, as its job.
    cancelled_by = f"attempt_outcome = '{AttemptOutcome.CANCELLED}' AND error_type = ''"
    attempt_exprs = {
        "started_at": "COALESCE(started_at, claimed_at)",
        "finished_at": "COALESCE(finished_at, now())",
        "outcome": "attempt_outcome",
        "error_type": f"CASE WHEN {cancelled_by} THEN '{JobCancelled.__name__}' "
        "ELSE error_type END",
        "error_message": f"CASE WHEN {cancelled_by} THEN '{CANCELLED_BY_OPERATOR}' "
        "ELSE error_message END",
    }
    attempt_names = attempt_row()
    by = {"state": "final_state", "outcome": "attempt_outcome"}
    counts = ",\n".join(
        f"count(*) FILTER (WHERE {by[kind]} IN ({sql_in(values)})) AS n{i}"
        for i, (_, kind, values) in enumerate(FINISH_COUNTERS)
    )
    named = ", ".join(f"('{name}', a.n{i})" for i, (name, _, _) in enumerate(FINISH_COUNTERS))
    cancelled = sql_state(JobState.CANCELLED)
    scheduled = sql_state(JobState.SCHEDULED)
    pending = sql_state(JobState.PENDING)
    fields = ", ".join(
        f"(e->>{i})::{kind} AS {name}" for i, (name, kind) in enumerate(FINISH_FIELDS)
    )
    by_id = f"\n          AND {JOB}.id = ANY(ARRAY(SELECT id FROM own))"
    # The state guard compares with a column of v, not a literal: given a literal, the
    # planner may scan every running job (all workers' prefetched ones, and their dead
    # versions) instead of looking up each outcome's row by its primary key. The rows are
    # also picked by id from an array: joined to v alone (a function's rows, a hundred to the
    # planner), a table of tens of thousands of jobs analyzed while small was read whole at
    # every finish (14 ms for one outcome among 30,000 jobs). They are locked in id order
    # first (own), as every action that locks several jobs locks them: updated in the order
    # of the table's pages, a finish of several outcomes met a retry or a bulk cancel of the
    # same jobs in a lock cycle, which PostgreSQL broke by rolling one of them back.
    return f"""
WITH v AS (
    SELECT r.*, r.return_json::jsonb AS return_value,
           timestamptz 'epoch' + r.started_us * interval '1 microsecond' AS started_at,
           timestamptz 'epoch' + r.finished_us * interval '1 microsecond' AS finished_at,
           {sql_state(JobState.RUNNING)}::text AS running
    FROM (SELECT {fields} FROM jsonb_array_elements(%s::jsonb) AS e) AS r
),
own AS (
    SELECT id FROM {JOB} WHERE id = ANY(ARRAY(SELECT job_id FROM v)) ORDER BY id FOR UPDATE
),
upd AS (
    UPDATE {JOB} SET {engine.set_outcome_sql(running="v.running", pick=by_id)}
    RETURNING {JOB}.id, {JOB}.attempt + {JOB}.snoozes AS number, {JOB}.started_at,
              {JOB}.state
),
done AS (SELECT v.*, upd.number, upd.started_at AS claimed_at,
                upd.state AS final_state,
                CASE WHEN upd.state = {cancelled} AND v.new_state <> {cancelled}
                     THEN '{AttemptOutcome.CANCELLED}' ELSE v.outcome END AS attempt_outcome
         FROM upd JOIN v ON v.job_id = upd.id),
-- An attempt that ran began before now: its rate starts count from now at the latest.
begun AS (
    UPDATE {STARTS} s SET started_at = now() FROM done
    WHERE s.job_id = done.job_id AND done.outcome IS NOT NULL AND s.started_at > now()
),
att AS (
    INSERT INTO {ATTEMPT} ({", ".join(attempt_names)})
    SELECT {", ".join(attempt_exprs.get(n, n) for n in attempt_names)}
    FROM done WHERE outcome IS NOT NULL
),
up AS (
    SELECT d.downstream_id AS id, count(*) AS n FROM {DEPENDENCY} d
    JOIN done ON d.upstream_id = done.job_id
    WHERE done.final_state = {sql_state(JobState.SUCCEEDED)}
    GROUP BY d.downstream_id
),
-- Waiting jobs locked in id order before the update (engine.py: why).
lk AS (
    SELECT c.id, up.n FROM {JOB} c JOIN up ON c.id = up.id
    WHERE c.state = {scheduled} ORDER BY c.id FOR UPDATE OF c
),
rel AS (
    UPDATE {JOB} c SET
        waiting_for = CASE WHEN c.waiting_for > lk.n THEN c.waiting_for - lk.n ELSE 0 END,
        state = CASE WHEN c.waiting_for <= lk.n THEN {pending} ELSE c.state END,
        run_after = CASE WHEN c.waiting_for <= lk.n THEN now() ELSE c.run_after END
    FROM lk WHERE c.id = lk.id AND c.state = {scheduled}
    RETURNING c.id, c.state, c.node_name, c.workflow_id
),
cnt AS (
    INSERT INTO {COUNTER} (name, value)
    SELECT x.name, x.n FROM (SELECT {counts} FROM done) a,
        LATERAL (VALUES {named}) x(name, n)
    WHERE x.n > 0
),
-- Released continuations are due now: wake idle workers (delivered at commit).
woke AS (SELECT pg_notify('{NOTIFY_CHANNEL}', '')
         FROM (SELECT 1 FROM rel WHERE state = {pending} LIMIT 1) AS any_rel),
-- Released batch callbacks, to be given their batch's counts (engine.give_batch_counts).
cb AS (SELECT array_agg(id) AS ids, array_agg(workflow_id) AS batches FROM rel
       WHERE state = {pending} AND node_name IN ({sql_in(BATCH_CALLBACKS)}))
SELECT job_id, final_state, (SELECT count(*) FROM woke) AS woken, cb.ids, cb.batches
FROM done, cb
"""


def finish_document(chunk: list[Finish]) -> str:
    """The outcomes as finish_statement reads them: one JSON array per outcome, its items
    FINISH_FIELDS in order (Finish.values(), then the attempt's own)."""
    rows = []
    for r in chunk:
        job_id, lease_id, *values = r.values()
        started, finished = r.started_at, r.finished_at
        rows.append(
            [
                # 32 hex digits are a uuid to PostgreSQL, and cost a tenth of str(uuid).
                job_id.hex,
                lease_id.hex,
                *values,
                r.outcome,
                r.worker_id,
                # Aware: the executor's clock, or read from the database through sql.parse_time.
                to_micros(started) if started else None,
                to_micros(finished) if finished else None,
            ]
        )
    return json.dumps(rows, separators=(",", ":"))
