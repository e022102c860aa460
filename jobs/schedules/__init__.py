"""Recurring jobs: the SCHEDULES option, fire-time arithmetic, missed fires, pause/resume/trigger.

Every running worker calls `tick()` about once a second. Each fire time of a schedule becomes
at most one job, ever, because the database decides who fires it:

- the schedule's row (`jobs.models.Schedule`) holds `last_fire_at`, which only moves forward,
  through a compare-and-set update in the same transaction that inserts the job(s); the worker
  whose update changed no row lost the race and inserts nothing;
- and the job table has a unique constraint on (schedule, scheduled_at) as a second guard.

So pruning old jobs can never let a fire time fire again, and any number of workers on any
number of machines may tick at once. "Now" is the database's clock, so a machine whose clock
is off fires neither early nor late.

Fire times are pure functions of the schedule and an instant (`fire_times_between`,
`latest_fire_at_or_before`, `next_fire_after`): `every` is the multiples of N seconds since the
Unix epoch; `cron` is evaluated by cronsim in the schedule's time zone, which follows Debian
cron across DST changes: a time that falls in the spring-forward gap fires once, right after
the gap; on the repeated hour of the autumn change, a fixed-time entry fires once (the first
occurrence) while entries with a wildcard or a step in the hour field fire in both hours.

The package, one module per part:

    spec.py        the SCHEDULES option parsed and checked (ScheduleSpec)
    fire_times.py  fire times: pure functions of a spec and an instant
    firing.py      the tick: due fire times become jobs, one per fire time
    controls.py    pause, resume, run now, and each schedule's persisted state
"""

from ..db import database_now
from .controls import (
    ScheduleActionResult,
    ScheduleState,
    pause,
    pause_schedule,
    resume,
    resume_schedule,
    state,
    states,
    trigger,
    trigger_schedule,
)
from .fire_times import (
    MAX_CATCH_UP,
    MAX_COUNTED,
    Due,
    Plan,
    fire_times_between,
    latest_fire_at_or_before,
    next_fire_after,
    plan,
)
from .firing import TICK_MARGIN, TICK_SECONDS, Fired, Tick, tick
from .spec import (
    DEFAULT_GRACE_SECONDS,
    MISSED_POLICIES,
    ScheduleError,
    ScheduleSpec,
    UnknownSchedule,
    check,
    configured,
    describe_every,
    get,
    grace_seconds,
    parse,
    raw_schedules,
)

__all__ = [
    "DEFAULT_GRACE_SECONDS",
    "MAX_CATCH_UP",
    "MAX_COUNTED",
    "MISSED_POLICIES",
    "TICK_MARGIN",
    "TICK_SECONDS",
    "Due",
    "Fired",
    "Plan",
    "ScheduleActionResult",
    "ScheduleError",
    "ScheduleSpec",
    "ScheduleState",
    "Tick",
    "UnknownSchedule",
    "check",
    "configured",
    "database_now",
    "describe_every",
    "fire_times_between",
    "get",
    "grace_seconds",
    "latest_fire_at_or_before",
    "next_fire_after",
    "parse",
    "pause",
    "pause_schedule",
    "plan",
    "raw_schedules",
    "resume",
    "resume_schedule",
    "state",
    "states",
    "tick",
    "trigger",
    "trigger_schedule",
]
