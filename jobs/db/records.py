"""The values that cross the engine's interface: a claimed job, an attempt's outcome, a lost one,
and what wakes an idle worker.

Plain records, the same for every database; the engines turn them into statement parameters.
"""

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


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
    # A per-call backoff policy (jobs.retry.policy_to_json); None: the task's own.
    backoff: dict | None = None
    # Attempts given back by Snooze (attempt rows are numbered attempt + snoozes).
    snoozes: int = 0
    limit_key: str | None = None
    # Attempts given back at worker shutdowns: max_attempts was raised by as many.
    attempts_given_back: int = 0
    # Snoozes an operator's retry gave back (MAX_SNOOZES counts snoozes - snoozes_forgiven).
    snoozes_forgiven: int = 0
    # Set by the worker: when the attempt actually began in an executor (monotonic clock).
    began: float | None = field(default=None, compare=False)
    # Set by the worker: until when (monotonic clock) the claim's lease is sure to hold.
    lease_until: float = field(default=0.0, compare=False)
    # Set by a claim under a rate limit: the task must begin within this many seconds of the
    # claim (the rate window's slack), else it is handed back unstarted (jobs.runner).
    rate_slack: float = field(default=0.0, compare=False)
    # Set by the worker from rate_slack: the latest moment (monotonic clock) it may begin.
    start_by: float = field(default=0.0, compare=False)


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
    # The task snoozed: its attempt is given back and counted in the job's snoozes.
    snoozed: bool = False

    def values(self) -> tuple:
        """The outcome as both engines' finish statements take it (OUTCOME_COLUMNS)."""
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
            1 if self.snoozed else 0,
        )


# The columns of Finish.values(), as the finish statements name them.
OUTCOME_COLUMNS = (
    "job_id",
    "lease_id",
    "new_state",
    "return_value",
    "delay",
    "reason",
    "error_type",
    "error_message",
    "error_traceback",
    "only_if_expired",
    "raise_max",
    "snoozed",
)


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
    backoff: dict | None = None

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
            started_at=self.started_at,
            backoff=self.backoff,
        )


class Listener(Protocol):
    """A wake-up source an idle worker waits on beside its executors' pipes (Engine.listener).

    The worker polls `fileno_or_none()` for reading; when it is readable, `drain()` takes
    every wake-up waiting there (they carry nothing: the worker claims what is due). None from
    `fileno_or_none()` means not now (reconnecting): the worker polls the database meanwhile.
    """

    def fileno_or_none(self) -> int | None: ...

    def drain(self) -> None: ...

    def close(self) -> None: ...
