"""Pause, resume, run now, and each schedule's persisted state (the console's, the API's)."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from .. import db
from .fire_times import next_fire_after
from .firing import baseline, insert_run, rows_for
from .spec import ScheduleSpec, UnknownSchedule, backend_for, configured, get


@dataclass(frozen=True, slots=True)
class ScheduleActionResult:
    changed: bool
    message: str
    job: Any = None


def _row_for(spec):
    return rows_for({spec.name: spec}, db.database_now())[spec.name]


def pause_schedule(name, *, user=None, source="python", backend=None) -> ScheduleActionResult:
    from ..models import Schedule

    backend = backend_for(backend)
    spec = get(name, backend)
    with transaction.atomic():
        _row_for(spec)
        changed = Schedule.objects.filter(name=name, paused=False).update(
            paused=True, paused_at=timezone.now()
        )
        message = "schedule paused" if changed else "schedule already paused"
        _audit(name, "pause", message, user=user, source=source)
    return ScheduleActionResult(bool(changed), message)


def resume_schedule(name, *, user=None, source="python", backend=None) -> ScheduleActionResult:
    """Fire again from the next fire time on: what passed while paused is not back-filled."""
    from ..models import Schedule

    backend = backend_for(backend)
    spec = get(name, backend)
    with transaction.atomic():
        _row_for(spec)
        row = Schedule.objects.select_for_update().get(name=name)
        if row.paused:
            start = baseline(spec, db.database_now())
            Schedule.objects.filter(name=name, paused=True).update(
                paused=False,
                paused_at=None,
                expression=spec.expression,
                last_fire_at=max(start, row.last_fire_at)
                if row.expression == spec.expression
                else start,
            )
        message = "schedule resumed" if row.paused else "schedule was not paused"
        _audit(name, "resume", message, user=user, source=source)
    return ScheduleActionResult(row.paused, message)


def trigger_schedule(name, *, user=None, source="python", backend=None) -> ScheduleActionResult:
    """Enqueue one run now, outside the fire times: its scheduled_at is null."""
    backend = backend_for(backend)
    spec = get(name, backend)
    from ..models import Job

    with transaction.atomic():
        job = Job.objects.get(id=insert_run(spec, backend)["id"])
        _audit(name, "trigger", "run enqueued", user=user, source=source, job_id=job.id)
    return ScheduleActionResult(True, "run enqueued", job=job)


def _audit(name, action, outcome, *, job_id=None, **audit):
    from ..models import ScheduleAuditEntry

    ScheduleAuditEntry.record(
        schedule=name, action=action, outcome=outcome, result_job_id=job_id, **audit
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
    from ..models import Schedule

    backend = backend_for(backend)
    specs = configured(backend)
    now = db.database_now()
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
