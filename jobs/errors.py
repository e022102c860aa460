"""Exceptions task authors raise and callers catch."""

import math

from .retry import MAX_DELAY


class Snooze(Exception):
    """Raise from a task to run it again `seconds` from now; the attempt is given back.

    The attempt is recorded with outcome `snoozed` and does not count toward max_attempts;
    OPTIONS["MAX_SNOOZES"] (default 100) bounds how often a job may snooze. A snooze longer
    than a retry's longest delay (ten years) waits that long, as a retry would.
    """

    def __init__(self, seconds: float = 0):
        self.seconds = snooze_seconds(seconds)
        super().__init__(f"snoozed for {self.seconds:g}s")


def snooze_seconds(seconds) -> float:
    """`seconds` as a snooze waits them: a number from 0 up, at most MAX_DELAY; ValueError for
    anything else (a subclass of Snooze that set its own `seconds` is checked again here)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise ValueError(f"Snooze takes seconds >= 0, not {seconds!r}")
    # Compared, not converted: an int too large for a float is a long snooze, not an error.
    if seconds != seconds or seconds == math.inf:
        raise ValueError("Snooze takes a finite number of seconds")
    return float(min(seconds, MAX_DELAY))


class Unrecoverable(Exception):
    """Raise from a task to dead-letter its job at once, skipping the remaining attempts."""


class ResultTooLarge(Unrecoverable):
    """The task returned a value over the size limit (jobs.payload.MAX_BYTES) as JSON.

    Unrecoverable: another attempt would redo the task's work only to return as much again.
    """


class DuplicateJob(Exception):
    """A non-terminal job already holds this dedup_key."""

    def __init__(self, dedup_key: str, job_id):
        self.dedup_key = dedup_key
        self.job_id = job_id
        super().__init__(f"a job with dedup_key {dedup_key!r} is already queued: {job_id}")


class JobTimeout(Exception):
    """The attempt ran past the task's timeout and was stopped."""


class WorkerLost(Exception):
    """The worker running the attempt stopped renewing its lease (killed, stalled, cut off)."""


class WorkerShutdown(Exception):
    """The worker shut down before the attempt finished and handed the job back."""


class JobCancelled(Exception):
    """An operator cancelled the job while it was running."""


CANCELLED_BY_OPERATOR = "cancelled by an operator"  # the message of every JobCancelled


class PoisonJob(Exception):
    """The job can never run: its task is unknown or its stored arguments do not fit."""


class ExecutorCrashed(Exception):
    """The process running the attempt died under it (segfault, os._exit, out-of-memory kill)."""
