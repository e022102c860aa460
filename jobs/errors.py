"""Exceptions task authors raise and callers catch."""


class Unrecoverable(Exception):  # noqa: N818 - the contract's name
    """Raise from a task to dead-letter its job at once, skipping the remaining attempts."""


class DuplicateJob(Exception):  # noqa: N818 - the contract's name
    """A non-terminal job already holds this dedup_key."""

    def __init__(self, dedup_key: str, job_id):
        self.dedup_key = dedup_key
        self.job_id = job_id
        super().__init__(f"a job with dedup_key {dedup_key!r} is already queued: {job_id}")


class JobTimeout(Exception):  # noqa: N818 - recorded as an error_type
    """The attempt ran past the task's timeout and was stopped."""


class WorkerLost(Exception):  # noqa: N818 - recorded as an error_type
    """The worker running the attempt stopped renewing its lease (killed, stalled, cut off)."""


class WorkerShutdown(Exception):  # noqa: N818 - recorded as an error_type
    """The worker shut down before the attempt finished and handed the job back."""


class JobCancelled(Exception):  # noqa: N818 - recorded as an error_type
    """An operator cancelled the job while it was running."""


class PoisonJob(Exception):  # noqa: N818 - recorded as an error_type
    """The job can never run: its task is unknown or its stored arguments do not fit."""
