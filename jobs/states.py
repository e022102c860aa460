"""The job lifecycle: its states, the only transitions allowed between them, and every guard.

`TRANSITIONS` is the source of every guard in the engine: the states a claim takes jobs from,
the states an operator's retry or cancel accepts, the states not_after expiry ends, all come
from it here, and the guarded statements (jobs.db, jobs.actions) name these, never a literal.
"""

from django.db import models


class JobState(models.TextChoices):
    # Waiting to be claimed once run_after has passed.
    PENDING = "pending", "Pending"
    # A continuation waiting for its parent to succeed.
    SCHEDULED = "scheduled", "Scheduled"
    # Claimed by a worker; an attempt is in progress.
    RUNNING = "running", "Running"
    # The last attempt failed; the next one is due at run_after.
    RETRYING = "retrying", "Retrying"
    # Terminal: the last attempt returned.
    SUCCEEDED = "succeeded", "Succeeded"
    # Terminal: by an operator, by not_after expiry, or because the parent ended unsuccessfully.
    CANCELLED = "cancelled", "Cancelled"
    # Terminal: attempts exhausted, Unrecoverable raised, or the job cannot run at all.
    DEAD_LETTER = "dead_letter", "Dead letter"


class DeadLetterReason(models.TextChoices):
    # Every allowed attempt failed.
    EXHAUSTED = "exhausted", "Attempts exhausted"
    # The task raised Unrecoverable (or the retry policy said stop).
    UNRECOVERABLE = "unrecoverable", "Unrecoverable error"
    # The job cannot run at all: unknown task or undecodable payload.
    POISON = "poison", "Poison (cannot run)"
    # Extension: the task's custom backoff callable raised, so no next attempt could be planned.
    BACKOFF_FAILED = "backoff_failed", "Backoff failed"
    # Extension: its executor died (segfault, os._exit, OOM kill) and on_crash="dead_letter".
    CRASHED = "crashed", "Crashed"
    # The task raised Snooze more often than OPTIONS["MAX_SNOOZES"] allows.
    SNOOZED_TOO_OFTEN = "snoozed_too_often", "Snoozed too often"


class AttemptOutcome(models.TextChoices):
    # The task returned.
    SUCCEEDED = "succeeded", "Succeeded"
    # The task raised, or ran past its timeout (error_type JobTimeout).
    FAILED = "failed", "Failed"
    # The worker running it vanished; recovered after its lease expired.
    LOST = "lost", "Lost (worker gone)"
    # The worker shut down before the task finished and handed it back.
    INTERRUPTED = "interrupted", "Interrupted (worker shutdown)"
    # An operator cancelled it while it ran.
    CANCELLED = "cancelled", "Cancelled"
    # The job could not run at all (unknown task, bad arguments).
    POISON = "poison", "Poison"
    # The task raised Snooze: it runs again later, and this attempt is given back.
    SNOOZED = "snoozed", "Snoozed"


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.CANCELLED, JobState.DEAD_LETTER})
ACTIVE = frozenset(set(JobState) - TERMINAL)

TRANSITIONS: dict[str, frozenset[str]] = {
    # Back to waiting: a retried workflow node whose upstream jobs have not all settled it.
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.SCHEDULED}),
    JobState.SCHEDULED: frozenset({JobState.PENDING, JobState.CANCELLED}),
    JobState.RUNNING: frozenset(
        {
            JobState.SUCCEEDED,
            JobState.RETRYING,
            JobState.DEAD_LETTER,
            JobState.CANCELLED,
            # A claimed job released unstarted (worker shutting down before it began).
            JobState.PENDING,
        }
    ),
    JobState.RETRYING: frozenset({JobState.RUNNING, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    # Retry by an operator puts the same row back in line; a workflow node cancelled because an
    # upstream node failed waits again when that node is retried (jobs.workflows.rearm).
    JobState.CANCELLED: frozenset({JobState.PENDING, JobState.SCHEDULED}),
    JobState.DEAD_LETTER: frozenset({JobState.PENDING}),
}


class IllegalTransition(ValueError):
    """A state change the lifecycle does not allow."""


def can_transition(source: str, target: str) -> bool:
    return target in TRANSITIONS.get(source, frozenset())


def sources_of(target: str) -> tuple[str, ...]:
    """Every state from which `target` may be reached, for guarded updates."""
    sources = tuple(s for s, targets in TRANSITIONS.items() if target in targets)
    if not sources:
        raise IllegalTransition(f"no state may move to {target!r}")
    return sources


def check_transition(source: str, target: str) -> None:
    if not can_transition(source, target):
        raise IllegalTransition(f"a job cannot go from {source!r} to {target!r}")


# Claimable once run_after has passed; "run now" brings that moment forward.
CLAIMABLE = sources_of(JobState.RUNNING)
# Every other state: the claim index of named queues is defined by excluding these (see
# jobs.models). Sorted: index conditions name it.
UNCLAIMABLE = tuple(sorted(set(JobState) - set(CLAIMABLE)))
# Not started, and ended at once by an operator's cancel or by not_after expiry (a running job
# is cancelled cooperatively: its worker sees the request). Sorted: index conditions name it.
WAITING = tuple(sorted(set(sources_of(JobState.CANCELLED)) - {JobState.RUNNING}))
# An operator's retry puts a finished job back in line (the same row).
RETRYABLE = tuple(s for s in sources_of(JobState.PENDING) if s in TERMINAL)
# Rerun (a new row) and discard (deleting the row) take any finished job.
RERUNNABLE = DISCARDABLE = tuple(sorted(TERMINAL))
# How a running job may end. A cancel requested while it runs is final, and this is the one
# place that says so: however the attempt ends (success, a retry, a dead letter of any reason,
# a hand-back) the job ends cancelled, whether or not its worker noticed the request before the
# attempt ended. The worker's decision (jobs.outcome.decide) and the finishing statement
# (jobs.db) both derive from this.
CANCEL_OVERRIDES = tuple(sorted(TRANSITIONS[JobState.RUNNING] - {JobState.CANCELLED}))

# What counts as a failed attempt, everywhere: the jobs_failed counter, the console's failure
# counts and rates, the metrics. An attempt handed back at shutdown was cut short, not a success.
FAILED_ATTEMPT = frozenset(
    {
        AttemptOutcome.FAILED,
        AttemptOutcome.LOST,
        AttemptOutcome.POISON,
        AttemptOutcome.INTERRUPTED,
    }
)


# The failed attempts a queue's circuit breaker counts: those its own work caused. An attempt
# handed back at a worker's shutdown or recovered from a vanished worker says nothing of the
# queue's work, and a rolling restart must not pause a healthy queue.
BREAKER_FAILURE = frozenset({AttemptOutcome.FAILED, AttemptOutcome.POISON})


def is_failed_attempt(outcome: str | None) -> bool:
    return outcome in FAILED_ATTEMPT
