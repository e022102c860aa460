"""Fire times: pure functions of a schedule and an instant.

`every` is the multiples of N seconds since the Unix epoch; `cron` is evaluated by cronsim in
the schedule's time zone (Debian cron's rules across DST changes, see jobs.schedules).
"""

from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice

from cronsim import CronSim

from ..moments import from_micros, to_micros
from .spec import ScheduleSpec

ONE_MICROSECOND = timedelta(microseconds=1)
# The most fire times `missed: "all"` enqueues at once (the most recent ones, oldest first).
MAX_CATCH_UP = 100
# Fire times counted one by one when a cron schedule catches up; past this, the missed counter
# records this many (a worker down for over a thousand fire times is told by its logs anyway).
MAX_COUNTED = 1000


def _step(spec: ScheduleSpec) -> int:
    return round(spec.period * 1_000_000)


def latest_fire_at_or_before(spec: ScheduleSpec, moment: datetime) -> datetime | None:
    """The last fire time <= moment (UTC), or None if there is none within cron's reach."""
    if spec.every is not None:
        step = _step(spec)
        return from_micros(to_micros(moment) // step * step)
    start = (moment + ONE_MICROSECOND).astimezone(spec.zone)
    try:
        return next(CronSim(spec.cron_expression, start, reverse=True)).astimezone(UTC)
    except StopIteration:
        return None


def next_fire_after(spec: ScheduleSpec, moment: datetime) -> datetime | None:
    """The first fire time strictly after moment (UTC); None when the cron never fires again."""
    if spec.every is not None:
        step = _step(spec)
        return from_micros((to_micros(moment) // step + 1) * step)
    try:
        return next(CronSim(spec.cron_expression, moment.astimezone(spec.zone))).astimezone(UTC)
    except StopIteration:
        return None


@dataclass(frozen=True, slots=True)
class Due:
    """The fire times in (after, until]: how many, and the most recent ones, oldest first."""

    count: int
    recent: list[datetime]


def fire_times_between(spec: ScheduleSpec, after: datetime, until: datetime, keep: int) -> Due:
    """Fire times in (after, until]: their count (cron: at most MAX_COUNTED) and the last
    `keep` of them."""
    if until <= after:
        return Due(0, [])
    if spec.every is not None:
        step = _step(spec)
        first, last = to_micros(after) // step + 1, to_micros(until) // step
        count = max(0, last - first + 1)
        ks = range(max(first, last - keep + 1), last + 1)
        return Due(count, [from_micros(k * step) for k in ks])
    recent: deque[datetime] = deque(maxlen=keep)
    count = 0
    times = CronSim(spec.cron_expression, after.astimezone(spec.zone))
    while count < MAX_COUNTED:
        moment = next(times, None)
        if moment is None or moment.astimezone(UTC) > until:
            return Due(count, list(recent))
        recent.append(moment.astimezone(UTC))
        count += 1
    # Too many to count: the most recent ones, walking back from `until`.
    back = CronSim(
        spec.cron_expression, (until + ONE_MICROSECOND).astimezone(spec.zone), reverse=True
    )
    newest = [m.astimezone(UTC) for m in islice(back, keep)]
    return Due(MAX_COUNTED, sorted(m for m in newest if m > after))


@dataclass(frozen=True, slots=True)
class Plan:
    """What one tick does for one schedule."""

    # Fire times to enqueue now, oldest first.
    fire: list[datetime]
    # Fire times passed over (the missed counter).
    missed: int
    # The new last_fire_at: the most recent due fire time.
    last_fire_at: datetime


def plan(spec: ScheduleSpec, after: datetime, now: datetime, grace: float) -> Plan | None:
    """Which of the fire times in (after, now] to enqueue; None when none is due.

    Fire times within `grace` seconds of now are on time: with no older one due, each is
    enqueued (a busy worker may tick a little late). An older one means no worker ran for a
    while, and the policy decides for everything that passed meanwhile: `latest` enqueues one
    job, for the most recent fire time (late or on time); `skip` only the on-time ones; `all`
    each (the MAX_CATCH_UP most recent late ones, and the on-time ones), oldest first.
    """
    due = fire_times_between(spec, after, now, keep=MAX_CATCH_UP + 1)
    if not due.count:
        return None
    cutoff = now - timedelta(seconds=grace)
    on_time = [t for t in due.recent if t >= cutoff]
    late = [t for t in due.recent if t < cutoff]
    outage = due.count > len(on_time)
    if not outage or spec.missed == "skip":
        fire = on_time
    elif spec.missed == "latest":
        fire = due.recent[-1:]
    else:
        fire = late[-MAX_CATCH_UP:] + on_time
    return Plan(fire=fire, missed=due.count - len(fire), last_fire_at=due.recent[-1])
