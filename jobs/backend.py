"""The django.tasks backend that stores jobs in the database for `manage.py worker`."""

import logging
import uuid
from contextlib import contextmanager
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from . import backend_options, db, moments, payload, retry, tracing
from .backend_options import DEFAULT_ASYNC_CONCURRENCY  # noqa: F401 (re-exported)
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    reaches_anyone,
    task_enqueued,
)
from .db.sql import UPSTREAM_FAILED, UPSTREAM_FAILED_MESSAGE
from .errors import DuplicateJob
from .names import check_queue_name
from .states import JobState
from .tasks import ON_CRASH_CHOICES, JobContext, JobTask, load_task  # noqa: F401 (re-exported)
from .text import holds_as_is


def check_key(field: str, key, error=ValueError) -> str:
    """`key` if it can be a job's `field` (dedup_key or limit_key: 255-character columns)."""
    if not isinstance(key, str) or not 0 < len(key) <= 255 or not holds_as_is(key):
        raise error(
            f"{field} must be a string of 1-255 characters without NUL or a lone surrogate, "
            f"not {key!r}"
        )
    return key


def limit_key_for(task, args, kwargs) -> str | None:
    """The job's limit key: given per call or per task, or computed by the task's callable."""
    key = getattr(task, "limit_key", None)
    if callable(key):
        key = key(args, kwargs)
    return None if key is None else check_key("limit_key", key)


STATUS_OF_STATE = {
    JobState.PENDING: TaskResultStatus.READY,
    JobState.SCHEDULED: TaskResultStatus.READY,
    JobState.RETRYING: TaskResultStatus.READY,
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobState.CANCELLED: TaskResultStatus.FAILED,
    JobState.DEAD_LETTER: TaskResultStatus.FAILED,
}


class JobsBackend(BaseTaskBackend):
    task_class = JobTask

    # Does the backend support Tasks to be enqueued with the run_after attribute?
    supports_defer = True
    # Does the backend support coroutines to be enqueued?
    supports_async_task = True
    # Does the backend support results being retrieved (from any thread/process)?
    supports_get_result = True
    # Does the backend support executing Tasks in a given priority order?
    supports_priority = True

    def __init__(self, alias, params):
        super().__init__(alias, params)
        if "QUEUES" in params and not params["QUEUES"]:
            self.queues = set()  # [] means any queue name is allowed
        read = backend_options.read(self.options)
        if not isinstance(self.options, dict):
            self.options = {}
        # Reported by `manage.py check` (jobs.E005, E006, W002) and refused by the worker;
        # meanwhile the defaults stand in (a web process never fails on a bad option).
        self.option_problems = read.problems
        self.timing_problems = read.timing_problems
        self.unknown_options = read.unknown
        self.default_max_attempts = self.options.get("MAX_ATTEMPTS")
        self.default_backoff = read.backoff
        self.timing = read.timing
        self.heartbeat_seconds = self.timing.heartbeat_seconds
        self.lease_seconds = self.timing.lease_seconds
        self.cancel_grace_seconds = self.timing.cancel_grace_seconds
        # Run each job inline at enqueue (for users' own test suites), through the same
        # retry logic, without waiting out the backoff.
        self.eager = read.eager
        # A Sentry Crons check-in per schedule fire (jobs.sentry).
        self.sentry_crons = read.sentry_crons
        # Coroutines of async def tasks each executor runs at once (worker --async-concurrency).
        self.async_concurrency = read.async_concurrency

    # --- validation -------------------------------------------------------------------------

    def validate_task(self, task):
        if task.run_after is not None and not isinstance(task.run_after, datetime):
            # Django's own check would fail on it with an AttributeError.
            raise InvalidTask(
                f"run_after must be an aware datetime, not {type(task.run_after).__name__}"
            )
        if isinstance(task.priority, bool) or not isinstance(task.priority, int | float):
            # Django's own range check would fail on it with a TypeError.
            raise InvalidTask(f"priority must be a whole number, not {task.priority!r}")
        super().validate_task(task)
        if not isinstance(task, JobTask):
            return
        if task.backoff is not None and not retry.is_backoff(task.backoff):
            raise InvalidTask(
                "backoff must be a jobs.retry policy (Exponential, Linear, Fixed, NoRetry) or a "
                "callable (exception, task_result) -> seconds or None"
            )
        if task.timeout is not None and (
            isinstance(task.timeout, bool)
            or not isinstance(task.timeout, int | float)
            or not task.timeout > 0
        ):
            raise InvalidTask(f"timeout must be a number of seconds > 0, not {task.timeout!r}")
        if task.not_after is not None:
            if not isinstance(task.not_after, datetime):
                raise InvalidTask("not_after must be a datetime")
            if settings.USE_TZ and timezone.is_naive(task.not_after):
                raise InvalidTask("not_after must be an aware datetime.")
        for name in ("run_after", "not_after"):
            value = getattr(task, name)
            if isinstance(value, datetime) and (why := moments.refusal(name, value)):
                raise InvalidTask(why)
        if task.dedup_key is not None:
            check_key("dedup_key", task.dedup_key, InvalidTask)
        if task.on_crash not in ON_CRASH_CHOICES:
            raise InvalidTask(f"on_crash must be one of {ON_CRASH_CHOICES}, not {task.on_crash!r}")
        try:
            check_queue_name(task.queue_name)
        except ValueError as e:
            raise InvalidTask(f"queue_name {e}") from None
        if task.limit_key is not None and not callable(task.limit_key):
            check_key("limit_key", task.limit_key, InvalidTask)

    def backoff_for(self, task):
        return getattr(task, "backoff", None) or self.default_backoff

    def max_attempts_for(self, task):
        return retry.resolve_max_attempts(
            task=getattr(task, "max_attempts", None), option=self.default_max_attempts
        )

    # --- enqueue ----------------------------------------------------------------------------

    def job_row(self, task, args, kwargs) -> dict:
        """The new job row of one call of `task`, as `db.insert_job` takes it: every enqueue,
        a workflow's nodes and a schedule's fires build their rows here."""
        args, kwargs = payload.check_arguments(args, kwargs)
        return {
            "id": uuid.uuid4(),
            "task_path": task.module_path,
            "backend": self.alias,
            "args": args,
            "kwargs": kwargs,
            "queue_name": task.queue_name,
            "priority": task.priority,
            "state": JobState.PENDING,
            "attempt": 0,
            "max_attempts": self.max_attempts_for(task),
            "timeout": float(task.timeout) if getattr(task, "timeout", None) else None,
            "run_after": task.run_after,
            "not_after": getattr(task, "not_after", None),
            "dedup_key": getattr(task, "dedup_key", None),
            "backoff": getattr(task, "call_backoff", None),
            "limit_key": limit_key_for(task, args, kwargs),
        }

    def enqueue(self, task, args, kwargs):
        self.validate_task(task)
        row = self.job_row(task, args, kwargs)
        after = getattr(task, "after", None)
        with tracing.enqueue_span(row):
            if after is None:
                self._insert(row)  # one statement: atomic by itself
            else:
                with transaction.atomic():
                    row["parent_id"], row["state"] = self._continuation_state(after)
                    if row["state"] == JobState.SCHEDULED:
                        row["waiting_for"] = 1
                    if row["state"] == JobState.CANCELLED:  # its parent had already failed
                        row["error_type"] = UPSTREAM_FAILED
                        row["error_message"] = UPSTREAM_FAILED_MESSAGE
                    self._insert(row)
                    # The one-parent case of a workflow's edges (jobs.db: "run after"), stored
                    # whatever the parent's state: the child reads its parent's value through
                    # it, and a retry of a failed parent re-arms the child through it.
                    db.link([(row["id"], row["parent_id"])])
                    if row["state"] == JobState.CANCELLED:
                        db.add_counters({"jobs_cancelled": 1})
                        db.audit_cancelled([row["id"]])
        result = self._result_from_row(task, row)
        if reaches_anyone(task_enqueued, type(self), logging.DEBUG):
            task_enqueued.send(type(self), task_result=result)
        if self.eager:
            from .eager import run_inline

            run_inline(row["id"], backend=self)
            result = self.get_result(row["id"])
        return result

    def enqueue_many(self, task, calls):
        self.validate_task(task)
        if getattr(task, "after", None) is not None or getattr(task, "dedup_key", None):
            raise InvalidTask("enqueue_many does not take after= or dedup_key=; use enqueue")
        try:
            calls = list(calls)
        except TypeError:
            raise TypeError(
                f"enqueue_many takes a list of (args, kwargs) pairs, not {calls!r:.80}"
            ) from None
        if callable(getattr(task, "limit_key", None)):
            # One batch per key the calls compute, all in one transaction.
            by_key: dict = {}
            for args, kwargs in _pairs(calls):
                key = limit_key_for(task, list(args), dict(kwargs))
                by_key.setdefault(key, []).append((args, kwargs))
            with transaction.atomic():
                return [
                    job_id
                    for key, group in by_key.items()
                    for job_id in self.enqueue_many(task.using(limit_key=key), group)
                ]
        template = self.job_row(task, (), {})
        ids = []

        def checked():
            # Checked as the rows stream in: on PostgreSQL the server stores one chunk while
            # the next is checked. A bad call raises inside the transaction, so nothing lands.
            for args, kwargs in _pairs(calls):
                ids.append(job_id := uuid.uuid4())
                yield job_id, *payload.checked_arguments(args, kwargs)[2:]

        with tracing.enqueue_span(template, count=len(calls)):
            if calls:
                db.insert_job_batch(template, checked())
        if self.eager:
            from .eager import run_inline

            for job_id in ids:
                run_inline(job_id, backend=self)
        return ids

    def _insert(self, row):
        with refusing_held_dedup_keys([row.get("dedup_key")]):
            db.insert_job(row)

    def _continuation_state(self, after):
        from .models import Job

        parent_id = getattr(after, "id", after)
        try:
            parent_id = uuid.UUID(str(parent_id))
        except ValueError:
            raise ValueError(f"after= must be a job id, not {after!r}") from None
        parents = Job.objects.filter(id=parent_id)
        if db.engine().locks_rows:
            # Serialise with the parent's completion, which promotes its continuations.
            parents = parents.select_for_update()
        state = parents.values_list("state", flat=True).first()
        if state is None:
            raise ValueError(f"after= names job {parent_id}, which does not exist")
        if state == JobState.SUCCEEDED:
            return parent_id, JobState.PENDING
        if state in (JobState.CANCELLED, JobState.DEAD_LETTER):
            return parent_id, JobState.CANCELLED
        return parent_id, JobState.SCHEDULED

    # --- results ----------------------------------------------------------------------------

    def _result_from_row(self, task, row):
        now = timezone.now()
        return TaskResult(
            task=task,
            id=str(row["id"]),
            status=STATUS_OF_STATE[row["state"]],
            enqueued_at=now,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=row["args"],
            kwargs=row["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

    def get_result(self, result_id):
        from .models import Job

        try:
            job = Job.objects.get(id=uuid.UUID(str(result_id)))
        except (ValueError, Job.DoesNotExist):
            raise TaskResultDoesNotExist(result_id) from None
        return self.result_for_job(job)

    def result_for_job(self, job, task=None):
        """The standard TaskResult view of a job row (errors: every failed attempt)."""
        if task is None:
            task = load_task(job.task_path)
        attempts = list(job.attempts.order_by("number"))
        errors = [
            TaskError(
                exception_class_path=a.error_type or "Exception",
                traceback=a.error_traceback or a.error_message,
            )
            for a in attempts
            if a.error_type
        ]
        result = TaskResult(
            task=task,
            id=str(job.id),
            status=STATUS_OF_STATE[job.state],
            enqueued_at=job.enqueued_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            last_attempted_at=attempts[-1].started_at if attempts else job.started_at,
            args=job.args,
            kwargs=job.kwargs,
            backend=job.backend,
            errors=errors,
            worker_ids=[a.worker_id for a in attempts],
        )
        object.__setattr__(result, "_return_value", job.return_value)
        return result


@contextmanager
def refusing_held_dedup_keys(keys):
    """Insert jobs holding `keys` (None for none) inside this block: a key a non-terminal job
    already holds is `DuplicateJob`, carrying that job's id, and nothing of the block is stored.
    The unique index decides, so two concurrent enqueues never both win."""
    keys = [key for key in keys if key]
    if not keys:
        yield
        return
    try:
        with transaction.atomic():
            yield
    except IntegrityError:
        from .models import Job

        for key in dict.fromkeys(keys):
            holder = Job.objects.holding_dedup_key(key).values_list("id", flat=True).first()
            if holder is not None:
                raise DuplicateJob(key, holder) from None
        raise


def _pairs(calls):
    """`enqueue_many`'s calls, each an (args, kwargs) pair; anything else is a clear error."""
    for number, call in enumerate(calls, 1):
        try:
            args, kwargs = call
        except (TypeError, ValueError):
            args = kwargs = None
        if not isinstance(args, list | tuple) or not isinstance(kwargs, dict):
            raise TypeError(
                f"enqueue_many takes (args, kwargs) pairs, args a list or tuple and kwargs a "
                f"dict, such as ((1, 2), {{}}); call {number} is {call!r:.80}"
            )
        yield args, kwargs
