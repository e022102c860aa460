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
"""

import logging
import re
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from . import db, payload
from .names import check_queue_name

logger = logging.getLogger("jobs.schedules")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_MICROSECOND = timedelta(microseconds=1)
KEYS = frozenset(
    {
        "task",
        "cron",
        "every",
        "timezone",
        "args",
        "kwargs",
        "queue_name",
        "priority",
        "max_attempts",
        "missed",
    }
)
MISSED_POLICIES = ("latest", "skip", "all")
# The most fire times `missed: "all"` enqueues at once (the most recent ones, oldest first).
MAX_CATCH_UP = 100
# Fire times counted one by one when a cron schedule catches up; past this, the missed counter
# records this many (a worker down for over a thousand fire times is told by its logs anyway).
MAX_COUNTED = 1000
# How often a worker looks for due fire times, in seconds.
TICK_SECONDS = 1.0
# A fire time enqueued within this many seconds of its instant is on time; older ones passed
# while no worker could fire them, and the `missed` policy decides. Overridable with the
# backend option SCHEDULE_GRACE_SECONDS.
DEFAULT_GRACE_SECONDS = 10.0
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class ScheduleError(ValueError):
    """A schedule in the SCHEDULES option that cannot be used; the message says why."""


class UnknownSchedule(LookupError):
    """No schedule of that name is configured."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSpec:
    """One validated entry of the SCHEDULES option."""

    name: str
    task_path: str
    cron: str | None = None
    every: float | None = None
    timezone: str = "UTC"
    args: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)
    queue_name: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    missed: str = "latest"

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def expression(self) -> str:
        """What the fire times are computed from; a change of it restarts the schedule."""
        if self.cron is not None:
            return f"cron {self.cron} {self.timezone}"
        return f"every {self.every:g}"

    def describe(self) -> str:
        """The fire times in words: "At 03:00 every day (Europe/Paris)", "Every 30 seconds"."""
        if self.every is not None:
            return describe_every(self.every)
        try:
            words = CronSim(self.cron, datetime.now(self.zone)).explain()
        except Exception:  # the describer does not know every shape; the expression is exact
            words = self.cron
        return f"{words} ({self.timezone})"


def describe_every(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"Every {unit}" if n == 1 else f"Every {n} {unit}s"
    return "Every second" if seconds == 1 else f"Every {seconds:g} seconds"


# --- parsing the SCHEDULES option -----------------------------------------------------------


def parse(name, raw, backend) -> ScheduleSpec:
    """Validate one entry of SCHEDULES against `backend`; ScheduleError says what is wrong."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ScheduleError(
            f"schedule name {name!r}: use 1 to 100 letters, digits, '.', '_' or '-' "
            "(starting with a letter or digit)"
        )

    def fail(message):
        return ScheduleError(f"schedule {name!r}: {message}")

    if not isinstance(raw, dict):
        raise fail("must be a dict with 'task' and 'cron' or 'every'")
    unknown = sorted(str(k) for k in set(raw) - KEYS)
    if unknown:
        allowed = ", ".join(sorted(KEYS))
        raise fail(f"unknown key {', '.join(map(repr, unknown))}; allowed: {allowed}")
    if ("cron" in raw) == ("every" in raw):
        raise fail("give exactly one of 'cron' (5 fields) or 'every' (seconds)")
    values: dict[str, Any] = {"name": name}

    task_path = raw.get("task")
    if not isinstance(task_path, str) or not task_path:
        raise fail("'task' must be the dotted path of a task, e.g. 'myapp.tasks.build_report'")
    task = _load_task(task_path, fail)
    values["task_path"] = task.module_path

    zone_name = raw.get("timezone", "UTC")
    if not isinstance(zone_name, str) or not zone_name:
        raise fail(f"timezone must be an IANA time zone name, not {zone_name!r}")
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise fail(
            f"unknown timezone {zone_name!r} (use an IANA name such as 'Europe/Paris')"
        ) from None
    values["timezone"] = zone_name

    if "cron" in raw:
        cron = raw["cron"]
        if not isinstance(cron, str) or len(cron.split()) != 5:
            raise fail(f"cron must be 5 fields (minute hour day month weekday), not {cron!r}")
        cron = " ".join(cron.split())
        try:
            next(CronSim(cron, datetime.now(zone)))
        except CronSimError as e:
            raise fail(f"bad cron expression {cron!r}: {e}") from None
        except StopIteration:
            raise fail(f"cron expression {cron!r} never fires") from None
        except Exception as e:
            raise fail(f"bad cron expression {cron!r}: {e}") from None
        values["cron"] = cron
    else:
        every = raw["every"]
        if isinstance(every, bool) or not isinstance(every, int | float) or not every >= 1:
            raise fail(f"every must be a number of seconds >= 1, not {every!r}")
        if every == float("inf") or every > 366 * 86400:
            raise fail(f"every must be at most a year of seconds, not {every!r}")
        values["every"] = float(every)

    try:
        values["args"], values["kwargs"] = payload.check_arguments(
            raw.get("args", []), raw.get("kwargs", {})
        )
    except (TypeError, ValueError) as e:
        raise fail(f"args and kwargs must be a list and a dict of JSON values: {e}") from None
    missed = raw.get("missed", "latest")
    if missed not in MISSED_POLICIES:
        raise fail(f"missed must be one of {', '.join(MISSED_POLICIES)}, not {missed!r}")
    values["missed"] = missed
    for key, low, high in (("priority", -100, 100), ("max_attempts", 1, 100)):
        value = raw.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high
        ):
            raise fail(f"{key} must be a whole number from {low} to {high}, not {value!r}")
        values[key] = value
    queue = raw.get("queue_name")
    if queue is not None:
        try:
            check_queue_name(queue)
        except ValueError as e:
            raise fail(f"queue_name {e}") from None
    values["queue_name"] = queue

    spec = ScheduleSpec(**values)
    try:
        backend.validate_task(_task_for(spec, task))
    except Exception as e:
        raise fail(str(e)) from None
    return spec


def _load_task(task_path, fail):
    from .tasks import load_task

    try:
        return load_task(task_path)
    except (ImportError, TypeError) as e:
        raise fail(f"unknown task {task_path!r}: {e}") from None


def _task_for(spec: ScheduleSpec, task):
    options = {}
    if spec.queue_name is not None:
        options["queue_name"] = spec.queue_name
    if spec.priority is not None:
        options["priority"] = spec.priority
    if spec.max_attempts is not None:
        options["max_attempts"] = spec.max_attempts
    return task.using(**options) if options else task


def raw_schedules(backend) -> Any:
    return backend.options.get("SCHEDULES") or {}


def check(backend) -> list[str]:
    """Every problem of the backend's SCHEDULES option, one message each; [] when all is well."""
    raw = raw_schedules(backend)
    if not isinstance(raw, dict):
        return ["SCHEDULES must be a dict of {name: schedule}"]
    problems = []
    for name, entry in raw.items():
        try:
            parse(name, entry, backend)
        except ScheduleError as e:
            problems.append(str(e))
    grace = backend.options.get("SCHEDULE_GRACE_SECONDS", DEFAULT_GRACE_SECONDS)
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 < grace < 86400:
        problems.append(f"SCHEDULE_GRACE_SECONDS must be a number of seconds > 0, not {grace!r}")
    return problems


def configured(backend) -> dict[str, ScheduleSpec]:
    """The backend's schedules by name, parsed once per backend instance.

    Raises ScheduleError for the first bad entry (`check` lists them all).
    """
    cached = getattr(backend, "_jobs_schedules", None)
    if cached is not None:
        return cached
    raw = raw_schedules(backend)
    if not isinstance(raw, dict):
        raise ScheduleError("SCHEDULES must be a dict of {name: schedule}")
    specs = {name: parse(name, entry, backend) for name, entry in raw.items()}
    backend._jobs_schedules = specs
    return specs


def grace_seconds(backend) -> float:
    return float(backend.options.get("SCHEDULE_GRACE_SECONDS", DEFAULT_GRACE_SECONDS))


def _backend(backend=None):
    if backend is None or isinstance(backend, str):
        from .compat import task_backends

        return task_backends[backend or "default"]
    return backend


def get(name, backend=None) -> ScheduleSpec:
    specs = configured(_backend(backend))
    if name not in specs:
        raise UnknownSchedule(name)
    return specs[name]


# --- fire times: pure functions -------------------------------------------------------------


def _micros(moment: datetime) -> int:
    delta = moment - EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _from_micros(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


def _step(spec: ScheduleSpec) -> int:
    return round(spec.every * 1_000_000)


def latest_fire_at_or_before(spec: ScheduleSpec, moment: datetime) -> datetime | None:
    """The last fire time <= moment (UTC), or None if there is none within cron's reach."""
    if spec.every is not None:
        step = _step(spec)
        return _from_micros(_micros(moment) // step * step)
    start = (moment + ONE_MICROSECOND).astimezone(spec.zone)
    try:
        return next(CronSim(spec.cron, start, reverse=True)).astimezone(UTC)
    except StopIteration:
        return None


def next_fire_after(spec: ScheduleSpec, moment: datetime) -> datetime | None:
    """The first fire time strictly after moment (UTC); None when the cron never fires again."""
    if spec.every is not None:
        step = _step(spec)
        return _from_micros((_micros(moment) // step + 1) * step)
    try:
        return next(CronSim(spec.cron, moment.astimezone(spec.zone))).astimezone(UTC)
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
        first, last = _micros(after) // step + 1, _micros(until) // step
        count = max(0, last - first + 1)
        ks = range(max(first, last - keep + 1), last + 1)
        return Due(count, [_from_micros(k * step) for k in ks])
    recent: deque[datetime] = deque(maxlen=keep)
    count = 0
    times = CronSim(spec.cron, after.astimezone(spec.zone))
    while count < MAX_COUNTED:
        moment = next(times, None)
        if moment is None or moment.astimezone(UTC) > until:
            return Due(count, list(recent))
        recent.append(moment.astimezone(UTC))
        count += 1
    # Too many to count: the most recent ones, walking back from `until`.
    back = CronSim(spec.cron, (until + ONE_MICROSECOND).astimezone(spec.zone), reverse=True)
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


# --- firing ---------------------------------------------------------------------------------


def database_now() -> datetime:
    """The database's clock (PostgreSQL), or this machine's (SQLite: one machine)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp()")
            return cursor.fetchone()[0]
    return timezone.now()


@dataclass(frozen=True, slots=True)
class Fired:
    schedule: str
    fire_times: list[datetime]
    missed: int


@dataclass(frozen=True, slots=True)
class Tick:
    """What one tick did, and when the next one is due."""

    fired: list[Fired]
    # Seconds until the next fire time of any active schedule (at most TICK_SECONDS), by the
    # database's clock, so a worker whose clock is off still ticks right at the fire time.
    next_in: float


# Ticking this long after a fire time makes sure the database's clock has passed it.
TICK_MARGIN = 0.005


def tick(backend=None) -> Tick:
    """Enqueue every due fire time of every schedule; the one call the worker makes.

    Safe to call from any number of workers at once: for each schedule, one of them wins.
    """
    backend = _backend(backend)
    specs = configured(backend)
    if not specs:
        return Tick([], TICK_SECONDS)
    now = database_now()
    rows = _rows(specs, now)
    grace = grace_seconds(backend)
    fired = []
    next_in = TICK_SECONDS
    for name, spec in specs.items():
        row = rows[name]
        if row.paused:
            continue
        upcoming = next_fire_after(spec, now)
        if upcoming is not None:
            next_in = min(next_in, (upcoming - now).total_seconds() + TICK_MARGIN)
        if row.expression != spec.expression:
            _restart(row, spec, now)
            continue
        decision = plan(spec, row.last_fire_at, now, grace)
        if decision is None:
            continue
        try:
            won = _fire(spec, row, decision, backend)
        except (OperationalError, InterfaceError):
            raise  # the database is away: the caller reconnects and ticks again
        except Exception as e:  # one broken schedule must not stop the others, nor the worker
            logger.error("schedule %s could not fire: %s: %s", name, type(e).__name__, e)
            continue
        if won:
            result = Fired(name, decision.fire, decision.missed)
            fired.append(result)
            _log(result)
    return Tick(fired, max(TICK_MARGIN, next_in))


def _rows(specs, now):
    """The Schedule row of each spec, creating missing ones (a new schedule fires from now on)."""
    from .models import Schedule

    rows = {row.name: row for row in Schedule.objects.filter(name__in=list(specs))}
    missing = [name for name in specs if name not in rows]
    if missing:
        Schedule.objects.bulk_create(
            [
                Schedule(
                    name=name,
                    expression=specs[name].expression,
                    last_fire_at=_baseline(specs[name], now),
                )
                for name in missing
            ],
            ignore_conflicts=True,
        )
        rows |= {row.name: row for row in Schedule.objects.filter(name__in=missing)}
    return rows


def _baseline(spec, now):
    """Where a schedule starts counting: its latest fire time, so nothing before now fires."""
    return latest_fire_at_or_before(spec, now) or now


def _restart(row, spec, now):
    """The expression changed in settings: start over from now, without catching up."""
    from .models import Schedule

    Schedule.objects.filter(name=row.name, expression=row.expression).update(
        expression=spec.expression, last_fire_at=_baseline(spec, now)
    )


def _fire(spec, row, decision: Plan, backend) -> bool:
    """Move last_fire_at forward and insert the jobs, in one transaction; False if we lost."""
    from .models import Job, Schedule

    with transaction.atomic():
        won = Schedule.objects.filter(
            name=spec.name,
            paused=False,
            expression=spec.expression,
            last_fire_at=row.last_fire_at,
        ).update(
            last_fire_at=decision.last_fire_at,
            fires=F("fires") + len(decision.fire),
            missed=F("missed") + decision.missed,
        )
        if not won:
            return False
        if decision.fire:
            try:
                with transaction.atomic():
                    Job.objects.bulk_create(
                        [_job(spec, backend, scheduled_at=t) for t in decision.fire]
                    )
            except IntegrityError:
                # Only reachable if the row was reset by hand: the jobs' own constraint holds.
                logger.warning("schedule %s: a fire time already had its job", spec.name)
                return False
            db.add_counters({"jobs_enqueued": len(decision.fire)})
            db.notify_workers()
    return True


def _job(spec: ScheduleSpec, backend, *, scheduled_at: datetime | None):
    from .models import Job
    from .tasks import load_task

    row = backend._row(_task_for(spec, load_task(spec.task_path)), spec.args, spec.kwargs)
    row["run_after"] = scheduled_at or timezone.now()
    return Job(**row, schedule=spec.name, scheduled_at=scheduled_at)


def _log(result: Fired):
    if result.fire_times:
        logger.info(
            "schedule %s fired for %s%s",
            result.schedule,
            ", ".join(t.isoformat() for t in result.fire_times[-3:]),
            f" ({len(result.fire_times)} fire times)" if len(result.fire_times) > 3 else "",
        )
    if result.missed:
        logger.warning(
            "schedule %s: %d fire time(s) passed while no worker ran; not enqueued",
            result.schedule,
            result.missed,
        )


# --- pause, resume, run now ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScheduleActionResult:
    changed: bool
    message: str
    job: Any = None


def _row_for(spec, backend):
    return _rows({spec.name: spec}, database_now())[spec.name]


def pause_schedule(name, *, user=None, source="python", backend=None) -> ScheduleActionResult:
    from .models import Schedule

    backend = _backend(backend)
    spec = get(name, backend)
    with transaction.atomic():
        _row_for(spec, backend)
        changed = Schedule.objects.filter(name=name, paused=False).update(
            paused=True, paused_at=timezone.now()
        )
        message = "schedule paused" if changed else "schedule already paused"
        _audit(name, "pause", message, user=user, source=source)
    return ScheduleActionResult(bool(changed), message)


def resume_schedule(name, *, user=None, source="python", backend=None) -> ScheduleActionResult:
    """Fire again from the next fire time on: what passed while paused is not back-filled."""
    from .models import Schedule

    backend = _backend(backend)
    spec = get(name, backend)
    with transaction.atomic():
        _row_for(spec, backend)
        row = Schedule.objects.select_for_update().get(name=name)
        if row.paused:
            baseline = _baseline(spec, database_now())
            Schedule.objects.filter(name=name, paused=True).update(
                paused=False,
                paused_at=None,
                expression=spec.expression,
                last_fire_at=max(baseline, row.last_fire_at)
                if row.expression == spec.expression
                else baseline,
            )
        message = "schedule resumed" if row.paused else "schedule was not paused"
        _audit(name, "resume", message, user=user, source=source)
    return ScheduleActionResult(row.paused, message)


def trigger_schedule(name, *, user=None, source="python", backend=None) -> ScheduleActionResult:
    """Enqueue one run now, outside the fire times: its scheduled_at is null."""
    backend = _backend(backend)
    spec = get(name, backend)
    job = _job(spec, backend, scheduled_at=None)
    with transaction.atomic():
        job.save(force_insert=True)
        db.add_counters({"jobs_enqueued": 1})
        db.notify_workers()
        _audit(name, "trigger", "run enqueued", user=user, source=source, job_id=job.id)
    return ScheduleActionResult(True, "run enqueued", job=job)


def _audit(name, action, outcome, *, user=None, source="python", job_id=None):
    from .models import ScheduleAuditEntry

    ScheduleAuditEntry.record(
        schedule=name,
        user=user,
        action=action,
        source=source,
        outcome=outcome,
        result_job_id=job_id,
    )


# The contract's Python API.


def pause(name, **audit) -> bool:
    """Stop firing `name` (persisted; every worker sees it). UnknownSchedule if not configured."""
    return pause_schedule(name, **audit).changed


def resume(name, **audit) -> bool:
    """Fire `name` again from its next fire time; nothing missed while paused is enqueued."""
    return resume_schedule(name, **audit).changed


def trigger(name, **audit):
    """Enqueue one run of `name` now (scheduled_at null, schedule set); returns the Job."""
    return trigger_schedule(name, **audit).job


# --- the console's and the API's view of the schedules ---------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleState:
    spec: ScheduleSpec
    paused: bool
    paused_at: datetime | None
    last_fire_at: datetime | None
    next_fire_at: datetime | None
    fires: int
    missed: int


def states(backend=None) -> list[ScheduleState]:
    """Every configured schedule with its persisted state, in name order."""
    from .models import Schedule

    backend = _backend(backend)
    specs = configured(backend)
    now = database_now()
    rows = {row.name: row for row in Schedule.objects.filter(name__in=list(specs))}
    result = []
    for name in sorted(specs):
        spec, row = specs[name], rows.get(name)
        paused = bool(row and row.paused)
        result.append(
            ScheduleState(
                spec=spec,
                paused=paused,
                paused_at=row.paused_at if row else None,
                last_fire_at=row.last_fire_at if row else None,
                next_fire_at=None if paused else next_fire_after(spec, now),
                fires=row.fires if row else 0,
                missed=row.missed if row else 0,
            )
        )
    return result


def state(name, backend=None) -> ScheduleState:
    for s in states(backend):
        if s.spec.name == name:
            return s
    raise UnknownSchedule(name)
