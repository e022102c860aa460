"""The one retry decision: what becomes of a job after an attempt, however the attempt ended.

`Ran` is what the process that ran the attempt saw (or, for a timeout, a crash or a lost worker,
what the worker saw from outside). `decide` turns it into a `db.Finish` through the named
constructors of `Outcome`; `announce` sends the signals once the outcome took effect.
"""

import dataclasses
import enum
import logging
import random
from dataclasses import dataclass
from datetime import UTC, datetime

from . import retry, signals
from .compat import TaskError, TaskResult, TaskResultStatus
from .db import Claimed, Finish
from .errortext import describe, for_log
from .states import CANCEL_OVERRIDES, AttemptOutcome, DeadLetterReason, JobState
from .tasks import load_task
from .text import storable

logger = logging.getLogger(__name__)
_rng = random.Random()


class RanKind(enum.StrEnum):
    """How an attempt ended, as the process that ran it saw it (plain text on the pipe)."""

    OK = "ok"
    ERROR = "error"
    POISON = "poison"  # it cannot run at all
    RELEASED = "released"  # never started
    SNOOZED = AttemptOutcome.SNOOZED.value
    # From outside the task:
    LOST = AttemptOutcome.LOST.value
    INTERRUPTED = AttemptOutcome.INTERRUPTED.value
    CRASHED = "crashed"


@dataclass(slots=True)
class Ran:
    """The outcome of one attempt as the process that ran it saw it."""

    job_id: object
    kind: RanKind
    return_json: str | None = None
    error_type: str = ""
    error_message: str = ""
    error_traceback: str = ""
    # Seconds until the next attempt per the job's policy; None means stop retrying.
    delay: float | None = None
    # Set when retrying is out of the question: "unrecoverable", "backoff_failed", "crashed".
    stop_reason: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None


def now():
    return datetime.now(UTC)


DEFAULT_MAX_SNOOZES = 100


def parse_max_snoozes(value) -> int:
    """OPTIONS["MAX_SNOOZES"] as a count (None: the default); ValueError saying what is
    wrong with it."""
    if value is None:
        return DEFAULT_MAX_SNOOZES
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"MAX_SNOOZES must be a whole number >= 0, not {value!r}")
    return value


def max_snoozes_problems(backend) -> list[str]:
    """What is wrong with a backend's MAX_SNOOZES (`manage.py check`, the worker's start)."""
    try:
        parse_max_snoozes(backend.options.get("MAX_SNOOZES", DEFAULT_MAX_SNOOZES))
    except ValueError as e:
        return [str(e)]
    return []


def max_snoozes(backend_alias: str) -> int:
    """OPTIONS["MAX_SNOOZES"] of the job's backend: how often a job may snooze."""
    from .compat import task_backends

    try:
        options = task_backends[backend_alias].options
        return parse_max_snoozes(options.get("MAX_SNOOZES", DEFAULT_MAX_SNOOZES))
    except Exception:
        # A backend no longer configured, or a malformed option (the check and the worker's
        # start report it): the default bound, never a worker stopped mid-finish.
        return DEFAULT_MAX_SNOOZES


# --- planning the next attempt -------------------------------------------------------------


def policy_of(claimed: Claimed, task):
    """The backoff of this job: given per call (stored on the row), else the task's own, else
    the BACKOFF of the backend it was enqueued through (the alias stored on the row, as its
    MAX_ATTEMPTS was), whichever alias the worker serves."""
    if claimed.backoff:
        return retry.policy_from_json(claimed.backoff)
    from .compat import task_backends

    try:
        return task_backends[claimed.backend].backoff_for(task)  # type: ignore[attr-defined]
    except Exception:
        # An alias no longer configured, or not a jobs backend: the task's own backend, never
        # a finish stopped.
        return task.get_backend().backoff_for(task)


def task_result_for(claimed: Claimed, task, *, worker_id: str, error=None, status=None):
    """The TaskResult a custom backoff callable gets: this attempt's number (`attempts`) and
    the errors so far, this attempt's last (`error`: (error_type, traceback))."""
    errors = [
        TaskError(exception_class_path=t or "Exception", traceback=tb or m)
        for t, m, tb in _earlier_errors(claimed)
    ]
    if error is not None:
        errors.append(TaskError(exception_class_path=error[0], traceback=error[1]))
    return TaskResult(
        task=task,
        id=str(claimed.id),
        status=status or TaskResultStatus.FAILED,
        enqueued_at=claimed.enqueued_at,
        started_at=claimed.started_at,
        finished_at=None,
        last_attempted_at=claimed.started_at,
        args=[],
        kwargs={},
        backend=claimed.backend,
        errors=errors,
        worker_ids=[worker_id] * claimed.attempt,
    )


def _earlier_errors(claimed: Claimed):
    from .models import Attempt

    return list(
        Attempt.objects.filter(job_id=claimed.id, number__lt=claimed.attempt + claimed.snoozes)
        .exclude(error_type="")
        .order_by("number")
        .values_list("error_type", "error_message", "error_traceback")
    )


def plan_retry(claimed: Claimed, task, exc: BaseException, task_result) -> tuple[float | None, str]:
    """(seconds until the next attempt or None to stop, "" or "backoff_failed").

    `task_result` is a TaskResult or a function making one: a custom callable always gets one;
    the built-in policies need none, so none is made for them.
    """
    try:
        policy = policy_of(claimed, task)
        if not hasattr(policy, "delay") and callable(task_result):
            task_result = task_result()
        delay = retry.next_delay(
            policy, attempt=claimed.attempt, exception=exc, task_result=task_result, rng=_rng
        )
    except BaseException:
        logger.exception(
            "backoff of %s raised for job %s (attempt %d); dead-lettering it (backoff_failed)",
            for_log(claimed.task_path),
            claimed.id,
            claimed.attempt,
        )
        return None, DeadLetterReason.BACKOFF_FAILED
    return delay, ""


def plan_failed_retry(
    claimed: Claimed, task, exc: BaseException, *, worker_id: str, error
) -> tuple[float | None, str]:
    """`plan_retry` for a failed attempt whose `error` is (error type, traceback text)."""

    def task_result():
        return task_result_for(claimed, task, worker_id=worker_id, error=error)

    return plan_retry(claimed, task, exc, task_result)


def failure_from_outside(
    claimed: Claimed,
    exc: BaseException,
    *,
    kind=RanKind.ERROR,
    worker_id="",
    started_at=None,
) -> Ran:
    """A failure the task did not raise itself (timeout, crash, lost worker, shutdown), with
    the delay its job's policy gives for this attempt."""
    error_type, message, _ = describe(exc)
    text = f"{error_type}: {message}\n"
    delay, stop = None, ""
    try:
        task = load_task(claimed.task_path)
    except Exception:  # unknown task: nothing to retry with
        task = None
    if task is not None:
        if kind == RanKind.CRASHED and getattr(task, "on_crash", "retry") == "dead_letter":
            stop = DeadLetterReason.CRASHED
        elif kind != RanKind.INTERRUPTED:
            delay, stop = plan_failed_retry(
                claimed, task, exc, worker_id=worker_id, error=(error_type, text)
            )
    error = {"error_type": error_type, "error_message": message, "error_traceback": text}
    return Ran(
        claimed.id,
        kind,
        **error,
        delay=delay,
        stop_reason=stop,
        started_at=started_at,
        finished_at=now(),
    )


# --- the decision --------------------------------------------------------------------------


class Outcome:
    """Named constructors of the Finish that records an attempt's end."""

    @staticmethod
    def released(claimed: Claimed, worker_id: str) -> Finish:
        """Handed back unstarted: no attempt ran, the job is due again as it was."""
        return Finish(
            job_id=claimed.id,
            lease_id=claimed.lease_id,
            state=JobState.PENDING,
            outcome=None,
            worker_id=worker_id,
        )

    @staticmethod
    def _ran(claimed: Claimed, ran: Ran, worker_id: str, state, **fields) -> Finish:
        """An attempt that ran, taking its job to `state`."""
        return Finish(
            job_id=claimed.id,
            lease_id=claimed.lease_id,
            worker_id=worker_id,
            error_type=ran.error_type,
            error_message=ran.error_message,
            error_traceback=ran.error_traceback,
            started_at=ran.started_at,
            finished_at=ran.finished_at,
            state=state,
            **fields,
        )

    @classmethod
    def succeeded(cls, claimed: Claimed, ran: Ran, worker_id: str) -> Finish:
        done = {"outcome": AttemptOutcome.SUCCEEDED, "return_json": ran.return_json}
        return cls._ran(claimed, ran, worker_id, JobState.SUCCEEDED, **done)

    @classmethod
    def retry(
        cls, claimed: Claimed, ran: Ran, worker_id: str, *, outcome, delay, give_back=False
    ) -> Finish:
        """Another attempt after `delay` seconds; `give_back` adds one to max_attempts."""
        again = {"outcome": outcome, "delay": delay, "raise_max_attempts": give_back}
        return cls._ran(claimed, ran, worker_id, JobState.RETRYING, **again)

    @classmethod
    def dead_letter(cls, claimed: Claimed, ran: Ran, worker_id: str, *, outcome, reason) -> Finish:
        ended = {"outcome": outcome, "reason": reason}
        return cls._ran(claimed, ran, worker_id, JobState.DEAD_LETTER, **ended)

    @classmethod
    def snoozed(cls, claimed: Claimed, ran: Ran, worker_id: str) -> Finish:
        """Due again after the task's delay; the attempt is given back (counted as a snooze)."""
        again = {"outcome": AttemptOutcome.SNOOZED, "delay": ran.delay or 0, "snoozed": True}
        return cls._ran(claimed, ran, worker_id, JobState.PENDING, **again)

    @classmethod
    def cancelled(cls, claimed: Claimed, ran: Ran, worker_id: str) -> Finish:
        ended = {"outcome": AttemptOutcome.CANCELLED}
        return cls._ran(claimed, ran, worker_id, JobState.CANCELLED, **ended)


def decide(claimed: Claimed, ran: Ran, *, worker_id: str, cancel_requested=False) -> Finish:
    """The one retry decision: what state the job goes to after this attempt.

    A cancel requested while the attempt ran wins over however it ended
    (`states.CANCEL_OVERRIDES`); a job handed back unstarted had no attempt, and the finishing
    statement ends it cancelled from the row's own request.
    """
    finish = _ending(claimed, ran, worker_id)
    if cancel_requested and finish.outcome is not None and finish.state in CANCEL_OVERRIDES:
        return Outcome.cancelled(claimed, ran, worker_id)
    return finish


def _ending(claimed: Claimed, ran: Ran, worker_id: str) -> Finish:
    if ran.kind == RanKind.RELEASED:
        return Outcome.released(claimed, worker_id)
    if ran.kind == RanKind.OK:
        return Outcome.succeeded(claimed, ran, worker_id)
    if ran.kind == RanKind.POISON:
        return Outcome.dead_letter(
            claimed, ran, worker_id, outcome=AttemptOutcome.POISON, reason=DeadLetterReason.POISON
        )
    if ran.kind == RanKind.SNOOZED:
        allowed = max_snoozes(claimed.backend)
        if claimed.snoozes - claimed.snoozes_forgiven >= allowed:
            # Said in the job's error, as any other dead letter's reason is.
            ran = dataclasses.replace(
                ran,
                error_type="SnoozedTooOften",
                error_message=(
                    f"snoozed again after {allowed} snoozes, the most MAX_SNOOZES allows"
                ),
            )
            return Outcome.dead_letter(
                claimed,
                ran,
                worker_id,
                outcome=AttemptOutcome.SNOOZED,
                reason=DeadLetterReason.SNOOZED_TOO_OFTEN,
            )
        return Outcome.snoozed(claimed, ran, worker_id)
    outcome = (
        AttemptOutcome(ran.kind)
        if ran.kind in (RanKind.LOST, RanKind.INTERRUPTED)
        else AttemptOutcome.FAILED  # a raised exception, a timeout, a crash
    )
    if ran.stop_reason:
        return Outcome.dead_letter(claimed, ran, worker_id, outcome=outcome, reason=ran.stop_reason)
    if outcome == AttemptOutcome.INTERRUPTED:
        if claimed.attempt >= retry.MAX_ATTEMPTS:
            # No attempt is left to give back: the stored maximum cannot go past 100.
            return Outcome.dead_letter(
                claimed, ran, worker_id, outcome=outcome, reason=DeadLetterReason.EXHAUSTED
            )
        # Not the task's fault: it goes back in line now, with one more attempt if needed.
        return Outcome.retry(
            claimed,
            ran,
            worker_id,
            outcome=outcome,
            delay=0,
            give_back=claimed.attempt >= claimed.max_attempts,
        )
    if claimed.attempt >= claimed.max_attempts:
        return Outcome.dead_letter(
            claimed, ran, worker_id, outcome=outcome, reason=DeadLetterReason.EXHAUSTED
        )
    if ran.delay is None:
        return Outcome.dead_letter(
            claimed, ran, worker_id, outcome=outcome, reason=DeadLetterReason.UNRECOVERABLE
        )
    return Outcome.retry(claimed, ran, worker_id, outcome=outcome, delay=ran.delay)


def storable_finish(finish: Finish) -> Finish:
    """`finish` as the database takes any outcome: its texts in plain ASCII (escapes for the
    rest, NUL included), its delay a number from 0 to retry.MAX_DELAY. The second try for an
    outcome the database refused as it was (jobs.worker)."""

    def plain(text):
        return storable(str(text)).encode("ascii", "backslashreplace").decode("ascii")

    delay = finish.delay
    if isinstance(delay, bool) or not isinstance(delay, int | float) or delay != delay:
        delay = 0.0
    return dataclasses.replace(
        finish,
        worker_id=plain(finish.worker_id),
        reason=plain(finish.reason),
        error_type=plain(finish.error_type),
        error_message=plain(finish.error_message),
        error_traceback=plain(finish.error_traceback),
        delay=float(min(max(delay, 0), retry.MAX_DELAY)),
    )


def duration_of(finish: Finish) -> float | None:
    """Seconds the attempt ran, when both ends are known."""
    if finish.started_at is None or finish.finished_at is None:
        return None
    return max(0.0, (finish.finished_at - finish.started_at).total_seconds())


def announce(finish: Finish, claimed: Claimed | None) -> None:
    """Send job_retry_scheduled / job_dead_lettered for an outcome that took effect."""
    path = claimed.task_path if claimed else ""
    attempt = claimed.attempt if claimed else None
    common = dict(
        sender=Finish,
        job_id=finish.job_id,
        task_path=path,
        attempt=attempt,
        error_type=finish.error_type,
        error_message=finish.error_message,
        duration=duration_of(finish),
    )
    if finish.state == JobState.RETRYING:
        signals.job_retry_scheduled.send(**common, delay=finish.delay)
    elif finish.state == JobState.DEAD_LETTER:
        signals.job_dead_lettered.send(**common, reason=finish.reason)
