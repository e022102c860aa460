"""Running one claimed attempt in this process: a worker's executor, or inline in eager mode.

`run_attempt` never raises: whatever the task does — return, raise any BaseException, raise
one whose `__str__` misbehaves — comes back as a `Ran`, its failure described and its next
attempt planned here, where the exception still exists.
"""

import inspect
import json
import logging
import time

from . import payload
from .compat import TaskResult, TaskResultStatus, reaches_anyone, task_finished, task_started
from .db import Claimed
from .errors import PoisonJob, ResultTooLarge, Snooze, Unrecoverable
from .errortext import describe
from .outcome import Ran, now, plan_retry, task_result_for
from .reports import AttemptReport
from .states import DeadLetterReason
from .tasks import JobContext, load_task

_tasks: dict[str, tuple] = {}


def _task_and_signature(task_path):
    """The task at `task_path` and its function's signature, looked up once per process."""
    found = _tasks.get(task_path)
    if found is None:
        task = load_task(task_path)
        found = _tasks[task_path] = (task, inspect.signature(task.func))
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


def _failed(claimed: Claimed, exc: BaseException, kind: str, started, **extra) -> Ran:
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


def run_attempt(claimed: Claimed, *, worker_id: str) -> Ran:
    """Run the task of a claimed job once, here; never raises."""
    started = now()
    try:
        task, signature = _task_and_signature(claimed.task_path)
        args = _decoded(claimed.args_json)
        kwargs = _decoded(claimed.kwargs_json)
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise PoisonJob("stored arguments are not a list and a dict")
        if task.takes_context:
            signature.bind(None, *args, **kwargs)
        else:
            signature.bind(*args, **kwargs)
    except BaseException as exc:
        return _failed(claimed, exc, "poison", started)
    if claimed.start_by and time.monotonic() > claimed.start_by:
        # Too late for the rate window its claim counted it in (jobs.limits): not begun.
        return Ran(claimed.id, "released")
    try:
        return _run(claimed, task, args, kwargs, started, worker_id)
    except BaseException as exc:  # a signal receiver failed, or describing a failure did
        return _failed(claimed, exc, "error", started, stop_reason=DeadLetterReason.UNRECOVERABLE)


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


def _run(claimed, task, args, kwargs, started, worker_id) -> Ran:
    sender = type(task.get_backend())
    announce_start = reaches_anyone(task_started, sender, logging.INFO)
    result = None
    if announce_start or task.takes_context:
        result = _task_result(claimed, task, args, kwargs, started, worker_id)
    if announce_start:
        task_started.send(sender=sender, task_result=result)
    report = None
    try:
        if task.takes_context:
            report = AttemptReport(claimed.id, claimed.lease_id, claimed.attempt)
            context = JobContext(
                task_result=result,
                attempt=claimed.attempt,
                max_attempts=claimed.max_attempts,
                job_id=str(claimed.id),
                logger=report.logger,
                report=report,
            )
            value = task.call(context, *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        return_json = payload.dumps(payload.check_json(value, "return value"))
        if len(return_json) > payload.MAX_BYTES:
            raise ResultTooLarge(
                f"the return value takes {len(return_json):,} bytes as JSON, over the limit of "
                f"{payload.MAX_BYTES:,} (1 MiB): store it elsewhere and return its key"
            )
    except Snooze as snooze:
        return Ran(
            claimed.id, "snoozed", delay=snooze.seconds, started_at=started, finished_at=now()
        )
    except BaseException as exc:
        # Executors ignore SIGINT and SIGTERM, so even KeyboardInterrupt and SystemExit come
        # from the task itself: they fail this attempt like any other exception.
        finished = now()
        error_type, message, text = describe(exc)
        stop, delay = "", None
        if isinstance(exc, Unrecoverable):
            stop = DeadLetterReason.UNRECOVERABLE
        else:
            delay, stop = plan_retry(
                claimed,
                task,
                exc,
                lambda: task_result_for(
                    claimed, task, worker_id=worker_id, error=(error_type, text)
                ),
            )
        failure = Ran(
            claimed.id,
            "error",
            error_type=error_type,
            error_message=message,
            error_traceback=text,
            delay=delay,
            stop_reason=stop,
            started_at=started,
            finished_at=finished,
        )
    else:
        failure = None
    if report is not None:
        report.close()  # what it reported is written before its outcome goes back
    if failure is not None:
        # Sent outside the except block: the framework's own log receiver then has no exception
        # to print in full (uncapped, across many lines); the engine records and logs it.
        if reaches_anyone(task_finished, sender, logging.ERROR):
            result = result or _task_result(claimed, task, args, kwargs, started, worker_id)
            _finished(result, TaskResultStatus.FAILED, failure.finished_at)
            task_finished.send(sender=sender, task_result=result)
        return failure
    finished = now()
    if reaches_anyone(task_finished, sender, logging.INFO):
        result = result or _task_result(claimed, task, args, kwargs, started, worker_id)
        _finished(result, TaskResultStatus.SUCCESSFUL, finished, _return_value=value)
        task_finished.send(sender=sender, task_result=result)
    return Ran(claimed.id, "ok", return_json=return_json, started_at=started, finished_at=finished)
