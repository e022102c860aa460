"""Running one claimed attempt, and the one retry decision every failure goes through.

`run_attempt` executes a task in the current process (a worker's executor child, or inline in
eager mode) and reports what happened as an `Ran`; it never raises. `decide` turns that — or a
failure seen from outside the task, like a timeout or a lost worker — into a `store.Finish`.
"""

import inspect
import json
import logging
import random
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime

from . import payload, retry, signals
from .backend import JobContext, load_task
from .compat import TaskResult, TaskResultStatus, task_finished, task_started
from .errors import PoisonJob, Unrecoverable
from .states import AttemptOutcome, DeadLetterReason, JobState
from .store import Claimed, Finish

logger = logging.getLogger("jobs.worker")
_rng = random.Random()

MAX_TRACEBACK = 64 * 1024


@dataclass(slots=True)
class Ran:
    """The outcome of one attempt as the process that ran it saw it."""

    job_id: object
    kind: str  # "ok", "error", "poison", "released"
    return_json: str | None = None
    error_type: str = ""
    error_message: str = ""
    error_traceback: str = ""
    # Seconds until the next attempt per the task's policy; None means stop retrying.
    delay: float | None = None
    unrecoverable: bool = False
    started_at: datetime | None = None
    finished_at: datetime | None = None


def _now():
    return datetime.now(UTC)


def describe(exc: BaseException) -> tuple[str, str, str]:
    cls = type(exc)
    # Builtins and the engine's own outcome types (JobTimeout, WorkerLost, ...) go by their
    # bare names, as the contract spells them; task exceptions keep their module.
    short = cls.__module__ in ("builtins", "jobs.errors")
    name = cls.__qualname__ if short else f"{cls.__module__}.{cls.__qualname__}"
    text = _format_traceback(exc)
    if len(text) > MAX_TRACEBACK:
        text = text[:1024] + "\n... (traceback shortened) ...\n" + text[-(MAX_TRACEBACK - 1100) :]
    return name, _storable(str(exc)), _storable(text)


def _format_traceback(exc: BaseException) -> str:
    """The traceback as Python prints it, without the ~~~^^^ markers under each source line.

    Placing those markers re-parses every line's source; it cost more than all the rest of a
    failed attempt, and the file, line and code of each frame are still shown.
    """
    top = traceback.TracebackException.from_exception(exc)
    pending, seen = [top], set()
    while pending:
        te = pending.pop()
        if id(te) in seen:
            continue
        seen.add(id(te))
        for frame in te.stack:
            frame.colno = frame.end_colno = None
        pending += [t for t in (te.__cause__, te.__context__) if t is not None]
        pending += te.exceptions or []
    return "".join(top.format())


def _storable(text: str) -> str:
    """Text a database column can hold: NUL and lone surrogates shown as escapes, not lost."""
    text = text.replace("\x00", "\\x00")
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


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


def _poison(claimed: Claimed, exc: BaseException, started) -> Ran:
    error_type, message, text = describe(exc)
    return Ran(
        claimed.id,
        "poison",
        error_type=error_type,
        error_message=message,
        error_traceback=text,
        started_at=started,
        finished_at=_now(),
    )


def run_attempt(claimed: Claimed, *, worker_id: str) -> Ran:
    """Run the task of a claimed job once, here; never raises."""
    started = _now()
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
    except Exception as exc:
        return _poison(claimed, exc, started)

    result = TaskResult(
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
    backend = task.get_backend()
    sender = type(backend)
    task_started.send(sender=sender, task_result=result)
    try:
        if task.takes_context:
            context = JobContext(
                task_result=result,
                attempt=claimed.attempt,
                max_attempts=claimed.max_attempts,
                job_id=str(claimed.id),
            )
            value = task.call(context, *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        return_json = payload.dumps(payload.check_json(value, "return value"))
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit) and not _is_task_raised(exc):
            raise
        finished = _now()
        error_type, message, text = describe(exc)
        unrecoverable = isinstance(exc, Unrecoverable)
        delay = None
        if not unrecoverable:
            try:
                delay = retry.next_delay(
                    backend.backoff_for(task),
                    attempt=claimed.attempt,
                    exception=exc,
                    task_result=result,
                    rng=_rng,
                )
            except Exception as policy_error:  # a broken custom policy stops retrying
                logger.error(
                    "backoff of %s failed: %r; not retrying", claimed.task_path, policy_error
                )
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        object.__setattr__(result, "finished_at", finished)
        task_finished.send(sender=sender, task_result=result)
        return Ran(
            claimed.id,
            "error",
            error_type=error_type,
            error_message=message,
            error_traceback=text,
            delay=delay,
            unrecoverable=unrecoverable,
            started_at=started,
            finished_at=finished,
        )
    finished = _now()
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", finished)
    object.__setattr__(result, "_return_value", value)
    task_finished.send(sender=sender, task_result=result)
    return Ran(claimed.id, "ok", return_json=return_json, started_at=started, finished_at=finished)


def _is_task_raised(exc):
    # SystemExit raised by task code is a failure of that task, not a request to stop us.
    return isinstance(exc, SystemExit)


def decide(claimed: Claimed, ran: Ran, *, worker_id: str, cancel_requested=False) -> Finish:
    """The one retry decision: what state the job goes to after this attempt."""
    common = dict(
        job_id=claimed.id,
        lease_id=claimed.lease_id,
        worker_id=worker_id,
        error_type=ran.error_type,
        error_message=ran.error_message,
        error_traceback=ran.error_traceback,
        started_at=ran.started_at,
        finished_at=ran.finished_at,
    )
    if ran.kind == "released":
        return Finish(
            job_id=claimed.id,
            lease_id=claimed.lease_id,
            state=JobState.PENDING,
            outcome=None,
            worker_id=worker_id,
        )
    if ran.kind == "ok":
        return Finish(
            **common,
            state=JobState.SUCCEEDED,
            outcome=AttemptOutcome.SUCCEEDED,
            return_json=ran.return_json,
        )
    if ran.kind == "poison":
        return Finish(
            **common,
            state=JobState.DEAD_LETTER,
            outcome=AttemptOutcome.POISON,
            reason=DeadLetterReason.POISON,
        )
    if cancel_requested:
        return Finish(**common, state=JobState.CANCELLED, outcome=AttemptOutcome.CANCELLED)
    outcome = (
        ran.kind
        if ran.kind in (AttemptOutcome.LOST, AttemptOutcome.INTERRUPTED)
        else AttemptOutcome.FAILED
    )
    if ran.unrecoverable:
        return Finish(
            **common,
            state=JobState.DEAD_LETTER,
            outcome=outcome,
            reason=DeadLetterReason.UNRECOVERABLE,
        )
    if outcome == AttemptOutcome.INTERRUPTED and claimed.attempt >= retry.MAX_ATTEMPTS:
        # No attempt is left to give back: the stored maximum cannot go past 100.
        return Finish(
            **common, state=JobState.DEAD_LETTER, outcome=outcome, reason=DeadLetterReason.EXHAUSTED
        )
    if outcome == AttemptOutcome.INTERRUPTED:
        # Not the task's fault: it goes back in line now, with one more attempt if needed.
        return Finish(
            **common,
            state=JobState.RETRYING,
            outcome=outcome,
            delay=0,
            raise_max_attempts=claimed.attempt >= claimed.max_attempts,
        )
    if claimed.attempt >= claimed.max_attempts:
        return Finish(
            **common, state=JobState.DEAD_LETTER, outcome=outcome, reason=DeadLetterReason.EXHAUSTED
        )
    if ran.delay is None:
        return Finish(
            **common,
            state=JobState.DEAD_LETTER,
            outcome=outcome,
            reason=DeadLetterReason.UNRECOVERABLE,
        )
    return Finish(**common, state=JobState.RETRYING, outcome=outcome, delay=ran.delay)


def failure_from_outside(
    claimed: Claimed, exc: BaseException, *, kind="error", started_at=None
) -> Ran:
    """A failure the task did not raise itself (timeout, lost worker, shutdown), with the
    delay its task's policy gives for this attempt."""
    error_type, message, _ = describe(exc)
    delay = None
    try:
        task = load_task(claimed.task_path)
        delay = retry.next_delay(
            task.get_backend().backoff_for(task),
            attempt=claimed.attempt,
            exception=exc,
            task_result=None,
            rng=_rng,
        )
    except Exception:  # unknown task: nothing to retry with
        delay = None
    return Ran(
        claimed.id,
        kind,
        error_type=error_type,
        error_message=message,
        error_traceback=f"{error_type}: {message}\n",
        delay=delay,
        started_at=started_at,
        finished_at=_now(),
    )


def announce(finish: Finish, claimed: Claimed | None) -> None:
    """Send job_retry_scheduled / job_dead_lettered for an outcome that took effect."""
    path = claimed.task_path if claimed else ""
    attempt = claimed.attempt if claimed else None
    if finish.state == JobState.RETRYING:
        signals.job_retry_scheduled.send(
            sender=Finish,
            job_id=finish.job_id,
            task_path=path,
            attempt=attempt,
            delay=finish.delay,
            error_type=finish.error_type,
        )
    elif finish.state == JobState.DEAD_LETTER:
        signals.job_dead_lettered.send(
            sender=Finish,
            job_id=finish.job_id,
            task_path=path,
            attempt=attempt,
            reason=finish.reason,
            error_type=finish.error_type,
        )
