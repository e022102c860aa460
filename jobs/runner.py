"""Running one claimed attempt in this process: a worker's executor, or inline in eager mode.

`run_attempt` never raises: whatever the task does — return, raise any BaseException, raise
one whose `__str__` misbehaves — comes back as a `Ran`, its failure described and its next
attempt planned here, where the exception still exists.
"""

import inspect
import json
import logging
import time

from . import forked, payload
from .compat import TaskResult, TaskResultStatus, reaches_anyone, task_finished, task_started
from .db import Claimed
from .errors import JobTimeout, PoisonJob, ResultTooLarge, Snooze, Unrecoverable, snooze_seconds
from .errortext import describe
from .executor_loop import timed_out, timeout_ends
from .logformat import job_fields
from .outcome import Ran, RanKind, now, plan_retry, task_result_for
from .reports import AttemptReport
from .states import DeadLetterReason
from .tasks import JobContext, load_task

_tasks: dict[str, tuple] = {}


def _task_and_signature(task_path):
    """The task at `task_path`, its function's signature and whether it is an `async def`,
    looked up once per process."""
    found = _tasks.get(task_path)
    if found is None:
        task = load_task(task_path)
        found = (task, inspect.signature(task.func), inspect.iscoroutinefunction(task.func))
        _tasks[task_path] = found
    return found


def _decoded(stored):
    """Stored arguments as Python values (most jobs take none: skip the parser for those)."""
    if not isinstance(stored, str):
        return stored
    if stored == "[]":
        return []
    if stored == "{}":
        return {}
    return json.loads(stored)


def _failed(claimed: Claimed, exc: BaseException, kind: RanKind, started, **extra) -> Ran:
    error_type, message, text = describe(exc)
    return Ran(
        claimed.id,
        kind,
        error_type=error_type,
        error_message=message,
        error_traceback=text,
        started_at=started,
        finished_at=now(),
        **extra,
    )


def _snooze_delay(exc: Snooze) -> float | None:
    """The seconds a Snooze asks for, or None when a subclass set `seconds` of its own that no
    snooze can wait (the attempt then fails with that exception, as with any other)."""
    try:
        return snooze_seconds(exc.seconds)
    except BaseException:
        return None


def run_attempt(claimed: Claimed, *, worker_id: str, began: float | None = None) -> Ran:
    """Run the task of a claimed job once, here; never raises.

    `began` (monotonic) is when its executor counts it begun: one that ends past its timeout
    from then timed out, whatever it returned or raised (the worker stops one still running
    then, but may see its end first)."""
    attempt = prepare(claimed, worker_id=worker_id)
    if isinstance(attempt, Ran):
        return attempt
    deadline = timeout_ends(claimed, began) if began is not None else None
    try:
        call_args = attempt.begin()
        try:
            value = attempt.task.call(*call_args, **attempt.kwargs)
        except BaseException as exc:
            forked.leave_if_forked(exc)
            ran = attempt.failed(_late(claimed, deadline, exc))
        else:
            forked.leave_if_forked()
            late = _late(claimed, deadline, None)
            ran = attempt.ended(value) if late is None else attempt.failed(late)
        attempt.close()
        return attempt.announce(ran)
    except BaseException as exc:  # a signal receiver failed, or describing a failure did
        return attempt.broke(exc)


def _late(claimed: Claimed, deadline: float | None, exc: BaseException | None):
    """What an attempt ending now with `exc` (None: it returned) failed with: past
    `deadline`, JobTimeout (caused by `exc`); else `exc`."""
    if deadline is None or time.monotonic() <= deadline or isinstance(exc, JobTimeout):
        return exc
    error = timed_out(claimed)
    error.__cause__ = exc
    return error


def prepare(claimed: Claimed, *, worker_id: str):
    """The Attempt of a claimed job, or the poison `Ran` of one that cannot run at all."""
    started = now()
    try:
        task, signature, args, kwargs = _runnable(claimed)
    except BaseException as exc:
        return _failed(claimed, exc, RanKind.POISON, started)
    if claimed.start_by and time.monotonic() > claimed.start_by:
        # Too late for the rate window its claim counted it in (jobs.limits): not begun.
        return Ran(claimed.id, RanKind.RELEASED)
    return Attempt(claimed, task, args, kwargs, started, worker_id)


def _runnable(claimed: Claimed):
    """The task, its signature and the decoded arguments of a claimed job; PoisonJob, saying
    what is wrong and what to do, when it can never run."""
    path = claimed.task_path
    try:
        task, signature, _ = _task_and_signature(path)
    except BaseException as e:  # a module may raise anything as it loads, SystemExit too
        raise PoisonJob(
            f"no task can be loaded at {path!r} ({type(e).__name__}: {e}): deploy the code "
            "that defines it to the workers and retry the job, or discard it"
        ) from e
    try:
        args = _decoded(claimed.args_json)
        kwargs = _decoded(claimed.kwargs_json)
    except ValueError as e:
        raise PoisonJob(
            f"the stored arguments are not JSON ({e}): rerun the job with arguments that "
            "are (Edit and rerun), or discard it"
        ) from e
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise PoisonJob(
            "the stored arguments are not a list and a dict: rerun the job with arguments "
            "that are (Edit and rerun), or discard it"
        )
    try:
        if task.takes_context:
            signature.bind(None, *args, **kwargs)
        else:
            signature.bind(*args, **kwargs)
    except TypeError as e:
        raise PoisonJob(
            f"the stored arguments do not fit {path}{signature} ({e}): rerun the job with "
            "arguments that do (Edit and rerun), or discard it"
        ) from e
    return task, signature, args, kwargs


def is_coroutine_task(task_path: str) -> bool:
    """Whether the task at `task_path` is an `async def` (False for one that cannot load)."""
    try:
        return _task_and_signature(task_path)[2]
    except BaseException:
        return False


def _task_result(claimed, task, args, kwargs, started, worker_id):
    return TaskResult(
        task=task,
        id=str(claimed.id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=claimed.enqueued_at,
        started_at=started,
        finished_at=None,
        last_attempted_at=started,
        args=args,
        kwargs=kwargs,
        backend=claimed.backend,
        errors=[],
        worker_ids=[worker_id] * claimed.attempt,
    )


def _finished(result, status, finished, **extra):
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", finished)
    for name, value in extra.items():
        object.__setattr__(result, name, value)
    return result


class Attempt:
    """One attempt of a task, in steps around the call itself: `begin` gives the call's
    positional arguments, then `failed(exc)` or `ended(value)` gives the `Ran`, `close` writes
    what the attempt reported, and `announce` sends task_finished. A sync task is called in
    between by `run_attempt`, a coroutine awaited by the executor's event loop."""

    def __init__(self, claimed, task, args, kwargs, started, worker_id):
        self.claimed, self.task, self.args, self.kwargs = claimed, task, args, kwargs
        self.started, self.worker_id = started, worker_id
        self.sender = type(task.get_backend())
        self.result = None
        self.report = None  # where a task with a context reports progress and log lines
        self.value = None

    def begin(self) -> list:
        claimed, task = self.claimed, self.task
        announce_start = reaches_anyone(task_started, self.sender, logging.INFO)
        if announce_start or task.takes_context:
            self.result = self._task_result()
        if announce_start:
            task_started.send(sender=self.sender, task_result=self.result)
        if not task.takes_context:
            return self.args
        self.report = AttemptReport(
            claimed.id, claimed.lease_id, claimed.attempt, log_fields=job_fields(claimed)
        )
        context = JobContext(
            task_result=self.result,
            attempt=claimed.attempt,
            max_attempts=claimed.max_attempts,
            job_id=str(claimed.id),
            logger=self.report.logger,
            report=self.report,
        )
        return [context, *self.args]

    def _task_result(self):
        return _task_result(
            self.claimed, self.task, self.args, self.kwargs, self.started, self.worker_id
        )

    def failed(self, exc: BaseException, *, unrecoverable: bool = False) -> Ran:
        """The attempt raised `exc`; call it where the exception is being handled.
        `unrecoverable`: dead-letter the job at once, as if `exc` were `Unrecoverable`."""
        # Executors ignore SIGINT and SIGTERM, so even KeyboardInterrupt and SystemExit come
        # from the task itself: they fail this attempt like any other exception.
        claimed, task = self.claimed, self.task
        finished = now()
        if isinstance(exc, Snooze) and (delay := _snooze_delay(exc)) is not None:
            return Ran(
                claimed.id,
                RanKind.SNOOZED,
                delay=delay,
                started_at=self.started,
                finished_at=finished,
            )
        error_type, message, text = describe(exc)
        stop, delay = "", None
        if unrecoverable or isinstance(exc, Unrecoverable):
            stop = DeadLetterReason.UNRECOVERABLE
        else:
            delay, stop = plan_retry(
                claimed,
                task,
                exc,
                lambda: task_result_for(
                    claimed, task, worker_id=self.worker_id, error=(error_type, text)
                ),
            )
        return Ran(
            claimed.id,
            RanKind.ERROR,
            error_type=error_type,
            error_message=message,
            error_traceback=text,
            delay=delay,
            stop_reason=stop,
            started_at=self.started,
            finished_at=finished,
        )

    def ended(self, value) -> Ran:
        """The task returned `value` (a value that cannot be stored fails the attempt)."""
        try:
            return_json = payload.dumps(payload.check_json(value, "return value"))
            if len(return_json) > payload.MAX_BYTES:
                raise ResultTooLarge(
                    f"the return value takes {len(return_json):,} bytes as JSON, over the limit "
                    f"of {payload.MAX_BYTES:,} (1 MiB): store it elsewhere and return its key"
                )
        except BaseException as exc:
            # Another attempt would redo the work only to return such a value again.
            return self.failed(exc, unrecoverable=True)
        self.value = value
        return Ran(
            self.claimed.id,
            RanKind.OK,
            return_json=return_json,
            started_at=self.started,
            finished_at=now(),
        )

    def close(self):
        """Write what the attempt reported, before its outcome goes back."""
        if self.report is not None:
            self.report.close()

    def announces(self, ran: Ran) -> bool:
        """Whether `announce` would send anything (most projects: no)."""
        level = logging.ERROR if ran.kind == RanKind.ERROR else logging.INFO
        return reaches_anyone(task_finished, self.sender, level)

    def announce(self, ran: Ran) -> Ran:
        """Send task_finished. Sent outside the except block: the framework's own log receiver
        then has no exception to print in full (uncapped, across many lines); the engine
        records and logs it."""
        if not self.announces(ran):
            return ran
        result = self.result or self._task_result()
        if ran.kind == RanKind.ERROR:
            _finished(result, TaskResultStatus.FAILED, ran.finished_at)
        else:
            value = self.value
            _finished(result, TaskResultStatus.SUCCESSFUL, ran.finished_at, _return_value=value)
        task_finished.send(sender=self.sender, task_result=result)
        return ran

    def broke(self, exc: BaseException) -> Ran:
        """A signal receiver failed, or describing a failure did: no retry can help."""
        return _failed(
            self.claimed,
            exc,
            RanKind.ERROR,
            self.started,
            stop_reason=DeadLetterReason.UNRECOVERABLE,
        )
