"""The task type of this backend, the context a task may take, and looking tasks up by path.

Imported by the backend, the runner and the worker alike; it imports none of them.
"""

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from . import retry
from .compat import InvalidTask, Task, TaskContext

_UNSET = object()

# What an executor crash (segfault, os._exit, out-of-memory kill) does to the job.
ON_CRASH_CHOICES = ("retry", "dead_letter")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobTask(Task):
    """A Task with the job system's options; any of them may be overridden per call."""

    # Attempts allowed before dead-lettering; None defers to OPTIONS["MAX_ATTEMPTS"].
    max_attempts: int | None = None
    # A jobs.retry policy or a callable (exception, task_result) -> seconds | None.
    backoff: Any = None
    # Seconds an attempt may run before it is stopped and counted as failed (JobTimeout).
    timeout: float | None = None
    # The job is cancelled if it has not started by then.
    not_after: datetime | None = None
    # At most one non-terminal job holds a given key.
    dedup_key: str | None = None
    # A job id (or TaskResult) this continuation waits for.
    after: Any = None
    # "retry" (through the backoff, like any failure) or "dead_letter" (reason "crashed").
    on_crash: str = "retry"
    # The limit key of its jobs (jobs.limits): a string, or a callable (args, kwargs) -> str
    # called at enqueue.
    limit_key: Any = None
    # A backoff given to .using(), as stored on the job row (it must outlive this process).
    call_backoff: dict | None = field(default=None, repr=False)

    def using(
        self,
        *,
        priority=None,
        queue_name=None,
        run_after=None,
        backend=None,
        max_attempts=_UNSET,
        backoff=_UNSET,
        timeout=_UNSET,
        not_after=_UNSET,
        dedup_key=_UNSET,
        after=_UNSET,
        on_crash=_UNSET,
        limit_key=_UNSET,
    ):
        task = Task.using(
            self, priority=priority, queue_name=queue_name, run_after=run_after, backend=backend
        )
        changes = {
            name: value
            for name, value in [
                ("max_attempts", max_attempts),
                ("backoff", backoff),
                ("timeout", timeout),
                ("not_after", not_after),
                ("dedup_key", dedup_key),
                ("after", after),
                ("on_crash", on_crash),
                ("limit_key", limit_key),
            ]
            if value is not _UNSET
        }
        if backoff is not _UNSET:
            changes["call_backoff"] = _storable_backoff(backoff)
        return replace(task, **changes) if changes else task

    def enqueue_many(self, calls):
        """Enqueue many calls at once: `calls` is an iterable of (args, kwargs).

        All or nothing: one transaction (PostgreSQL: one COPY), one NOTIFY. Returns the new
        job ids. Validation is the same as for enqueue; dedup keys and continuations are not
        available in bulk.
        """
        return self.get_backend().enqueue_many(self, calls)


def _storable_backoff(backoff):
    """A per-call backoff as the job row keeps it; a callable cannot be kept and is refused."""
    if backoff is None:
        return None
    try:
        return retry.policy_to_json(backoff)
    except TypeError as e:
        raise InvalidTask(
            f"{e}: a per-call backoff is stored with the job and must be a jobs.retry policy "
            "(Exponential, Linear, Fixed, NoRetry); give a callable to @task(backoff=...) instead"
        ) from None


# Django's TaskContext is a frozen dataclass too; its stubs do not say so.
@dataclass(frozen=True, slots=True, kw_only=True)
class JobContext(TaskContext):  # type: ignore[misc]
    """What a task with takes_context=True receives as `context`."""

    attempt: int
    max_attempts: int
    job_id: str
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("jobs.task"))
    # Where this attempt's progress and log lines go (a jobs.reports.AttemptReport).
    report: Any = field(default=None, repr=False, compare=False)

    def progress(self, done, total=None, message="") -> None:
        """Record how far this attempt has come (`done` of `total`, and what it is doing): the
        console and the API show it while the job runs. Cheap to call often: it is written at
        most once a second, and the last value always."""
        if self.report is not None:
            self.report.progress(done, total, message)

    def cancel_requested(self) -> bool:
        """True once an operator has asked to cancel this running job; return early then."""
        from .models import Job

        return Job.objects.filter(id=self.job_id, cancel_requested_at__isnull=False).exists()

    @property
    def upstream(self) -> dict:
        """The return values of the jobs this one ran after: {node name: value} (a failed
        upstream job, run past with on_upstream_failure="run", gives None).

        It reads the database: an `async def` task awaits `aupstream()` instead."""
        from django.core.exceptions import SynchronousOnlyOperation

        from .workflows import upstream_values

        try:
            return upstream_values(self.job_id)
        except SynchronousOnlyOperation:
            raise SynchronousOnlyOperation(
                "context.upstream reads the database, which an event loop may not do: "
                "in an async def task, use `await context.aupstream()`"
            ) from None

    async def aupstream(self) -> dict:
        """`upstream` for an `async def` task, read in Django's sync thread as the async ORM
        reads (`values = await context.aupstream()`)."""
        from asgiref.sync import sync_to_async

        from .workflows import upstream_values

        return await sync_to_async(upstream_values)(self.job_id)


def load_task(task_path: str):
    """Import the Task object at `task_path`; ImportError/TypeError when it is not a Task."""
    from django.utils.module_loading import import_string

    try:
        obj = import_string(task_path)
    except ImportError:
        raise
    except Exception as e:  # a module that fails to import is just as unusable
        raise ImportError(f"importing {task_path!r} failed: {type(e).__name__}: {e}") from e
    if not isinstance(obj, Task):
        raise TypeError(f"{task_path!r} is not a task (decorate it with @task)")
    return obj
