"""Exceptions task authors raise and callers catch."""


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


class PoisonJob(Exception):
    """The job can never run: its task is unknown or its stored arguments do not fit."""


class ExecutorCrashed(Exception):
    """The process running the attempt died under it (segfault, os._exit, out-of-memory kill)."""
