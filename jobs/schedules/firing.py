"""The tick: every due fire time of every schedule becomes one job, whichever worker wins."""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, InterfaceError, OperationalError, transaction
from django.db.models import F
from django.db.models.functions import Now

from .. import db, tracing
from .fire_times import Plan, latest_fire_at_or_before, next_fire_after, plan
from .spec import ScheduleSpec, backend_for, configured, grace_seconds, task_for

logger = logging.getLogger("jobs.schedules")

# How often a worker looks for due fire times, in seconds.
TICK_SECONDS = 1.0


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
# Per schedule this process found held by another worker's fire (locked): the schedule's
# last_fire_at then, and the moment from which its fire times count as on time. Those that fall
# due while a stalled worker holds the row passed with workers running, so the `missed` policy
# (fire times that passed while no worker ran) is not theirs: once the row is free they fire,
# each, as on-time ones do.
_held_up: dict[str, tuple[datetime, datetime]] = {}

# A schedule back in the settings after being gone longer than this (or the grace, if longer)
# starts over; a shorter absence is a deploy rolling out, its older workers still without it.
MIN_ABSENCE = 5.0


def tick(backend=None) -> Tick:
    """Enqueue every due fire time of every schedule; the one call the worker makes.

    Safe to call from any number of workers at once: for each schedule, one of them wins.
    """
    backend = backend_for(backend)
    specs = configured(backend)
    known = _every_row()
    mark_unconfigured(known)
    if not specs:
        return Tick([], TICK_SECONDS)
    now = db.database_now()
    rows = rows_for(specs, now, known)
    grace = grace_seconds(backend)
    fired = []
    next_in = TICK_SECONDS
    for name, spec in specs.items():
        row = rows[name]
        if row.unconfigured_since is not None and _configured_again(row, spec, now, grace):
            continue
        if row.paused:
            continue
        upcoming = next_fire_after(spec, now)
        if upcoming is not None:
            next_in = min(next_in, (upcoming - now).total_seconds() + TICK_MARGIN)
        if row.expression != spec.expression:
            _restart(row, spec, now)
            continue
        decision = plan(spec, row.last_fire_at, now, grace, on_time_from=_on_time_from(row))
        if decision is None:
            continue
        try:
            won = fire(spec, row, decision, backend)
            if won is None:  # held by another worker's fire, maybe stalled in it
                # From the fire times this tick would have fired (a late tick's too), or the
                # grace's start: what falls due from then on passed with this worker running.
                since = now - timedelta(seconds=grace)
                if decision.fire:
                    since = min(since, decision.fire[0])
                _held_up.setdefault(name, (row.last_fire_at, since))
                continue
            _held_up.pop(name, None)
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


def _on_time_from(row) -> datetime | None:
    """Since when this process saw `row` held up by another worker's fire (None: it did not,
    or that worker has fired since: the row moved on)."""
    held = _held_up.get(row.name)
    if held is None:
        return None
    if held[0] != row.last_fire_at:
        del _held_up[row.name]
        return None
    return held[1]


def rows_for(specs, now, known=None):
    """The Schedule row of each spec, creating missing ones (a new schedule fires from now on).

    `known` is every row as `_every_row` read it a moment ago, to spare a second read."""
    from ..models import Schedule

    if known is None:
        known = {row.name: row for row in Schedule.objects.filter(name__in=list(specs))}
    rows = {name: known[name] for name in specs if name in known}
    missing = [name for name in specs if name not in rows]
    if missing:
        Schedule.objects.bulk_create(
            [
                Schedule(
                    name=name,
                    expression=specs[name].expression,
                    last_fire_at=baseline(specs[name], now),
                )
                for name in missing
            ],
            ignore_conflicts=True,
        )
        rows |= {row.name: row for row in Schedule.objects.filter(name__in=missing)}
    return rows


def _every_row() -> dict:
    """Every Schedule row by name: one read serves both what the tick fires and what it notes
    as gone (a table of one row per schedule ever configured)."""
    from ..models import Schedule

    return {row.name: row for row in Schedule.objects.all()}


def mark_unconfigured(rows: dict) -> None:
    """Note, on the row of each schedule that none of this process's backends configures any
    more, since when (no write when there is none to note)."""
    from ..models import Schedule

    configured_anywhere = _configured_anywhere()
    gone = [
        name
        for name, row in rows.items()
        if row.unconfigured_since is None and name not in configured_anywhere
    ]
    if gone:
        Schedule.objects.filter(name__in=gone, unconfigured_since__isnull=True).update(
            unconfigured_since=Now()
        )


def _configured_anywhere() -> set[str]:
    """The names of the schedules of every backend in the settings (each worker serves one),
    read from the settings themselves: another backend need not load here."""
    from django.conf import settings

    names: set[str] = set()
    for config in (getattr(settings, "TASKS", None) or {}).values():
        options = config.get("OPTIONS") if isinstance(config, dict) else None
        schedules = options.get("SCHEDULES") if isinstance(options, dict) else None
        if isinstance(schedules, dict):
            names.update(schedules)
    return names


def _configured_again(row, spec, now, grace) -> bool:
    """A schedule a worker noted as gone from the settings is in this worker's: True if it came
    back after longer than a moment and starts over from its next fire time (the fire times
    that passed meanwhile were not missed: workers ran, without it). Noted a moment ago, a
    worker of an older deploy may still run without it: the note is cleared, and it fires."""
    from ..models import Schedule

    absent = (now - row.unconfigured_since).total_seconds()
    # Not compared by value: SQLite keeps the database's Now() as text Django writes otherwise.
    same = Schedule.objects.filter(name=row.name, unconfigured_since__isnull=False)
    if absent <= max(grace, MIN_ABSENCE):
        same.update(unconfigured_since=None)
        return False
    if same.update(
        unconfigured_since=None, expression=spec.expression, last_fire_at=baseline(spec, now)
    ):
        logger.info(
            "schedule %s is configured again after %s without it: it starts over from its "
            "next fire time, without catching up",
            row.name,
            _duration(absent),
        )
    return True


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def baseline(spec, now):
    """Where a schedule starts counting: its latest fire time, so nothing before now fires."""
    return latest_fire_at_or_before(spec, now) or now


def _restart(row, spec, now):
    """The expression changed in settings: start over from now, without catching up."""
    from ..models import Schedule

    Schedule.objects.filter(name=row.name, expression=row.expression).update(
        expression=spec.expression, last_fire_at=baseline(spec, now)
    )


def fire(spec, row, decision: Plan, backend) -> bool | None:
    """Move last_fire_at forward and insert the jobs, in one transaction; False if we lost,
    None if another worker holds the row (it is firing the schedule, or stalled doing so).

    `row` is the Schedule row as this worker read it: the compare-and-set on its
    last_fire_at lets one worker win each fire time, and the jobs' unique constraint on
    (schedule, scheduled_at) is the second guard.
    """
    from ..models import Schedule

    with transaction.atomic():
        unchanged = Schedule.objects.filter(
            name=spec.name,
            paused=False,
            expression=spec.expression,
            last_fire_at=row.last_fire_at,
        )
        if db.engine().locks_rows and not unchanged.select_for_update(skip_locked=True).exists():
            # Another worker is firing it now (or has just fired it): never wait for it. One
            # that stalled inside its transaction must not hold up every other worker's tick,
            # and with it their claims and heartbeats, until its transaction ends. Still as
            # read, it is held (None); else another worker has fired it (False).
            return None if unchanged.exists() else False
        won = unchanged.update(
            last_fire_at=decision.last_fire_at,
            fires=F("fires") + len(decision.fire),
            missed=F("missed") + decision.missed,
        )
        if not won:
            return False
        if decision.fire:
            try:
                rows = [job_row(spec, backend, scheduled_at=t) for t in decision.fire]
                with transaction.atomic(), _fire_span(spec, rows):
                    db.insert_jobs(rows)
            except IntegrityError:
                # Only reachable if the row was reset by hand: the jobs' own constraint holds.
                logger.warning("schedule %s: a fire time already had its job", spec.name)
                return False
    return True


def job_row(spec: ScheduleSpec, backend, *, scheduled_at: datetime | None) -> dict:
    """The new job of one fire time (`scheduled_at`), or of a run now (None: due now)."""
    from ..tasks import load_task

    row = backend.job_row(task_for(spec, load_task(spec.task_path)), spec.args, spec.kwargs)
    return {**row, "run_after": scheduled_at, "schedule": spec.name, "scheduled_at": scheduled_at}


def insert_run(spec: ScheduleSpec, backend) -> dict:
    """Enqueue one run of `spec` now, outside its fire times; returns its row."""
    row = job_row(spec, backend, scheduled_at=None)
    with _fire_span(spec, [row]):
        db.insert_job(row)
    return row


def _fire_span(spec: ScheduleSpec, rows: list[dict]):
    """The enqueue span of a schedule's jobs: their runs' spans are its children."""
    return tracing.enqueue_rows_span(
        rows,
        name=f"enqueue {spec.task_path}",
        attributes={"jobsite.schedule": spec.name, "jobsite.task": spec.task_path},
    )


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
            "schedule %s: %d fire time(s) passed before any worker could fire them (none ran, "
            "or the database was away); not enqueued",
            result.schedule,
            result.missed,
        )
