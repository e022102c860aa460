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


# An autumn DST change repeats at most two hours of wall-clock time (four in UTC, both passes):
# this far back, an instant is sure to lie before the repeated hours it may be in.
BEFORE_REPEATED_HOURS = timedelta(hours=6)


def _repeated(moment: datetime, spec: ScheduleSpec) -> bool:
    """Is `moment` in a repeated hour of the schedule's zone (its wall time happens twice)?

    cronsim counts in wall time: started there, it takes the wall time for its first pass, and
    a fixed-time entry (which fired in the first pass) would come out in the past, or a day
    early. From before the repeated hours its iteration is right (jobs.schedules)."""
    local = moment.astimezone(spec.zone)
    return local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset()


def _fire_times_around(spec: ScheduleSpec, moment: datetime):
    """The fire times from BEFORE_REPEATED_HOURS before `moment` on, in UTC."""
    start = (moment - BEFORE_REPEATED_HOURS).astimezone(spec.zone)
    for fire_time in CronSim(spec.cron_expression, start):
        yield fire_time.astimezone(UTC)


def latest_fire_at_or_before(spec: ScheduleSpec, moment: datetime) -> datetime | None:
    """The last fire time <= moment (UTC), or None if there is none within cron's reach."""
    if spec.every is not None:
        step = _step(spec)
        return from_micros(to_micros(moment) // step * step)
    if _repeated(moment, spec):
        latest = None
        for fire_time in _fire_times_around(spec, moment):
            if fire_time > moment:
                break
            latest = fire_time
        if latest is not None:
            return latest
        moment = moment - BEFORE_REPEATED_HOURS  # none since then: the last one is older
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
    if _repeated(moment, spec):
        for fire_time in _fire_times_around(spec, moment):
            if fire_time > moment:
                return fire_time
        return None
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
    for count, moment in enumerate(_fire_times_from(spec, after), start=1):
        if moment > until:
            return Due(count - 1, list(recent))
        recent.append(moment)
        if count == MAX_COUNTED:
            break
    else:
        return Due(count, list(recent))
    # Too many to count: the most recent ones, walking back from `until`.
    return Due(MAX_COUNTED, [m for m in _last_fire_times(spec, until, keep) if m > after])


def _fire_times_from(spec: ScheduleSpec, after: datetime):
    """The fire times strictly after `after`, in UTC."""
    if _repeated(after, spec):
        for moment in _fire_times_around(spec, after):
            if moment > after:
                yield moment
        return
    for moment in CronSim(spec.cron_expression, after.astimezone(spec.zone)):
        yield moment.astimezone(UTC)


def _last_fire_times(spec: ScheduleSpec, until: datetime, keep: int) -> list[datetime]:
    """The last `keep` fire times <= `until`, oldest first."""
    newest: list[datetime] = []
    if _repeated(until, spec):
        for moment in _fire_times_around(spec, until):
            if moment > until:
                break
            newest.append(moment)
        until = until - BEFORE_REPEATED_HOURS  # older ones are counted from there
    start = (until + ONE_MICROSECOND).astimezone(spec.zone)
    back = CronSim(spec.cron_expression, start, reverse=True)
    older = [m.astimezone(UTC) for m in islice(back, max(0, keep - len(newest)))]
    return (sorted(older) + newest)[-keep:]


@dataclass(frozen=True, slots=True)
class Plan:
    """What one tick does for one schedule."""

    # Fire times to enqueue now, oldest first.
    fire: list[datetime]
    # Fire times passed over (the missed counter).
    missed: int
    # The new last_fire_at: the most recent due fire time.
    last_fire_at: datetime


def plan(
    spec: ScheduleSpec,
    after: datetime,
    now: datetime,
    grace: float,
    on_time_from: datetime | None = None,
) -> Plan | None:
    """Which of the fire times in (after, now] to enqueue; None when none is due.

    Fire times within `grace` seconds of now are on time, and so are those from `on_time_from`
    on (a worker ran then, held up by another's stalled fire): with no older one due, each is
    enqueued (a busy worker may tick a little late). An older one means no worker ran for a
    while, and the policy decides for everything that passed meanwhile: `latest` enqueues one
    job, for the most recent fire time (late or on time); `skip` that one only when it is on
    time; `all` each: the MAX_CATCH_UP most recent late ones, then the on-time ones (at most
    MAX_CATCH_UP of them too), oldest first.
    """
    cutoff = now - timedelta(seconds=grace)
    if on_time_from is not None:
        cutoff = min(cutoff, on_time_from)
    # Counted apart, so that on-time fire times never take the place of late ones.
    late = fire_times_between(spec, after, cutoff - ONE_MICROSECOND, keep=MAX_CATCH_UP)
    on_time = fire_times_between(spec, max(after, cutoff - ONE_MICROSECOND), now, keep=MAX_CATCH_UP)
    count = late.count + on_time.count
    if not count:
        return None
    recent = late.recent + on_time.recent
    if not late.count:
        fire = on_time.recent
    elif spec.missed == "skip":
        # The fire times within the grace passed while no worker ran too: only the last, as
        # if on time (a tick's own lateness), never more than `latest` enqueues.
        fire = on_time.recent[-1:]
    elif spec.missed == "latest":
        fire = recent[-1:]
    else:
        fire = recent
    return Plan(fire=fire, missed=count - len(fire), last_fire_at=recent[-1])
