"""The shared vocabulary of the engines' statements: table names, states as SQL, how values
go in and come back out, and what a batch of finished attempts counts."""

import uuid
from datetime import UTC, datetime

from .. import payload
from ..errors import CANCELLED_BY_OPERATOR, JobCancelled
from ..states import (
    FAILED_ATTEMPT,
    AttemptOutcome,
    JobState,
)
from .columns import Column
from .records import Finish

JOB = "jobs_job"
ATTEMPT = "jobs_attempt"
COUNTER = "jobs_counterdelta"
DEPENDENCY = "jobs_dependency"
# The node names of a batch's callbacks (jobs.workflows); a workflow's own nodes cannot take them.
BATCH_CALLBACKS = ("batch.on_success", "batch.on_finish")
# Why a job waiting for others was cancelled: one of them ended unsuccessfully.
UPSTREAM_FAILED = "ParentFailed"
UPSTREAM_FAILED_MESSAGE = "a job it runs after did not succeed"
# Where the engine audits what it did on its own (jobs.models.AuditEntry): the nodes a failed
# upstream job cancelled.
AUDIT = "jobs_auditentry"
# Queues nobody claims from (jobs.queues); a handful of rows at most.
PAUSED = "jobs_pausedqueue"
# Flow control's rate starts (jobs.models.LimitStart, jobs.db.limited).
STARTS = "jobs_limitstart"


def sql_in(states) -> str:
    """A list of states as SQL literals, for `state IN (...)`."""
    return ", ".join(f"'{s}'" for s in sorted(states))


def sql_state(state) -> str:
    return f"'{state}'"


# The counters a batch of finished attempts adds to: (name, what it counts by, values counted).
FINISH_COUNTERS = (
    ("jobs_succeeded", "state", (JobState.SUCCEEDED,)),
    ("jobs_failed", "outcome", tuple(FAILED_ATTEMPT)),
    ("jobs_requeued", "state", (JobState.RETRYING,)),
    ("jobs_dead_lettered", "state", (JobState.DEAD_LETTER,)),
    ("jobs_recovered", "outcome", (AttemptOutcome.LOST,)),
    ("jobs_cancelled", "state", (JobState.CANCELLED,)),
    ("jobs_snoozed", "outcome", (AttemptOutcome.SNOOZED,)),
)

# run_after last: read only to put a claim's jobs back in claim order (Engine.claimed_batch).
CLAIMED_COLUMNS = (
    "id, task_path, {args}, {kwargs}, attempt, max_attempts, timeout, queue_name, priority, "
    "backend, started_at, enqueued_at, {backoff}, snoozes, limit_key, attempts_given_back, "
    "snoozes_forgiven, run_after"
)


def finish_counts(applied: list[Finish]) -> dict[str, int]:
    return {
        name: sum(1 for r in applied if getattr(r, by) in values)
        for name, by, values in FINISH_COUNTERS
    }


def applied_as(r: Finish, state: str) -> Finish:
    """The outcome as it took effect (a cancel that came in turns it into a cancellation,
    and an attempt it ended without an error of its own says why, as its job does)."""
    if state == JobState.CANCELLED and r.state != JobState.CANCELLED:
        r.state = JobState.CANCELLED
        if r.outcome is not None:
            r.outcome = AttemptOutcome.CANCELLED
    if r.outcome == AttemptOutcome.CANCELLED and not r.error_type:
        r.error_type, r.error_message = JobCancelled.__name__, CANCELLED_BY_OPERATOR
    return r


def insert_value(column: Column, row: dict):
    """A new job's value for `column`, as the insert statements take it."""
    value = row.get(column.name)
    if value is None and column.fallback is not None:
        value = column.fallback
    if column.is_json:
        return None if value is None and column.nullable else payload.dumps(value)
    if column.empty_text:
        return value or ""
    return value


def parse_uuid(value):
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)


def parse_time(value):
    if value is None:
        return None
    if not isinstance(value, datetime):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)
