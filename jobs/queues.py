"""Queues: pausing them, and what the console shows of each.

Workers claim nothing from a paused queue until it is resumed. The pause is a row in
`PausedQueue`, so it is shared by every worker and survives restarts. Jobs already running
finish; enqueues still land and wait. Each call is audited.

What a queue holds is read without counting the job table: the number of jobs per state comes
from the counting triggers' rows (`jobs.state_counts`), and the last hour's attempts from the
attempts' time index, their split across queues from the most recent of them.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction

from . import db, state_counts
from .models import Attempt, AuditEntry, PausedQueue
from .names import check_queue_name
from .states import is_failed_attempt

# The last hour's attempts are counted one by one up to this many; beyond it, "more than".
LAST_HOUR_CAP = 10_000
# The most recent attempts whose jobs are looked up to split the last hour across queues: exact
# when they are all of the hour's, otherwise the hour's count is shared out in their proportions.
LAST_HOUR_SAMPLE = 1_000


# The audit action of a resume (the circuit breaker counts failures from the last one).
RESUMED = "resume queue"


def _audit(name, action, outcome, **audit):
    AuditEntry.record(subject=name, action=action, outcome=outcome, **audit)


def _checked(name) -> str:
    try:
        return check_queue_name(name)
    except ValueError as e:
        raise ValueError(f"a queue name {e}") from None


def pause(name: str, *, user=None, source="python") -> bool:
    """Pause queue `name`; returns False when it was already paused."""
    name = _checked(name)
    username = user.get_username() if getattr(user, "pk", None) else ""
    try:
        with transaction.atomic():
            PausedQueue.objects.create(name=name, paused_by=username)
            _audit(name, "pause queue", "queue paused", user=user, source=source)
    except IntegrityError:
        return False
    return True


def resume(name: str, *, user=None, source="python") -> bool:
    """Resume queue `name`; returns False when it was not paused."""
    name = _checked(name)
    with transaction.atomic():
        deleted, _ = PausedQueue.objects.filter(name=name).delete()
        if deleted:
            _audit(name, RESUMED, "queue resumed", user=user, source=source)
    if deleted:
        db.notify_workers()
    return bool(deleted)


def paused() -> dict[str, PausedQueue]:
    """The paused queues by name."""
    return {row.name: row for row in PausedQueue.objects.all()}


def pause_of(name: str) -> PausedQueue | None:
    """The queue's pause (who paused it, when, why), or None when it is not paused."""
    return PausedQueue.objects.filter(name=name).first()


def is_paused(name: str) -> bool:
    return pause_of(name) is not None


def job_counts() -> dict[str, dict[str, int]]:
    """{queue: {state: jobs}} for every queue holding a job; exact, without counting the table."""
    counts: dict[str, dict[str, int]] = {}
    for (queue, state), n in state_counts.job_counts().items():
        counts.setdefault(queue, {})[state] = n
    return counts


@dataclass(frozen=True, kw_only=True, slots=True)
class LastHour:
    # Attempts finished in the last hour per queue, and how many of them failed.
    finished: dict[str, int]
    failed: dict[str, int]
    # Are the numbers counted (rather than the hour's total shared out by a sample)?
    exact: bool
    # Did the hour hold more attempts than `LAST_HOUR_CAP` (the numbers then a floor)?
    capped: bool


def last_hour(now: datetime) -> LastHour:
    """The attempts finished in the hour before `now`, per queue."""
    recent = Attempt.objects.filter(finished_at__gte=now - timedelta(hours=1))
    total = recent.order_by().values("finished_at")[: LAST_HOUR_CAP + 1].count()
    sample = recent.order_by("-finished_at").values_list("job__queue_name", "outcome")[
        :LAST_HOUR_SAMPLE
    ]
    finished: dict[str, int] = {}
    failed: dict[str, int] = {}
    for queue, outcome in sample:
        finished[queue] = finished.get(queue, 0) + 1
        if is_failed_attempt(outcome):
            failed[queue] = failed.get(queue, 0) + 1
    sampled = sum(finished.values())
    if sampled == total:
        return LastHour(finished=finished, failed=failed, exact=True, capped=False)
    hour = min(total, LAST_HOUR_CAP)
    return LastHour(
        finished={queue: round(hour * n / sampled) for queue, n in finished.items()},
        failed={queue: round(hour * n / sampled) for queue, n in failed.items()},
        exact=False,
        capped=total > LAST_HOUR_CAP,
    )
