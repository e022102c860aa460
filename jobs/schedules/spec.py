"""The SCHEDULES option: each entry parsed and checked into a ScheduleSpec."""

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .. import payload
from ..names import check_queue_name

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

# A fire time enqueued within this many seconds of its instant is on time; older ones passed
# while no worker could fire them, and the `missed` policy decides. Overridable with the
# backend option SCHEDULE_GRACE_SECONDS.
DEFAULT_GRACE_SECONDS = 10.0
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


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
    def cron_expression(self) -> str:
        """The cron expression of a schedule that fires by cron (not every N seconds)."""
        if self.cron is None:
            raise ValueError(f"schedule {self.name!r} fires every {self.every:g}s, not by cron")
        return self.cron

    @property
    def period(self) -> float:
        """The seconds between fire times of a schedule that fires every N seconds."""
        if self.every is None:
            raise ValueError(f"schedule {self.name!r} fires by cron, not every N seconds")
        return self.every

    @property
    def expression(self) -> str:
        """What the fire times are computed from; a change of it restarts the schedule."""
        if self.cron is not None:
            return f"cron {self.cron} {self.timezone}"
        return f"every {_exact(self.period)}"

    @property
    def every_text(self) -> str:
        """The interval's seconds as written, for display ("30", "1000001", "1.1")."""
        return _seconds_text(self.period)

    def describe(self) -> str:
        """The fire times in words: "At 03:00 every day (Europe/Paris)", "Every 30 seconds"."""
        if self.every is not None:
            return describe_every(self.every)
        try:
            words = CronSim(self.cron_expression, datetime.now(self.zone)).explain()
        except Exception:  # the describer does not know every shape; the expression is exact
            words = self.cron_expression
        return f"{words} ({self.timezone})"


def describe_every(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"Every {unit}" if n == 1 else f"Every {n:,} {unit}s"
    if seconds == 1:
        return "Every second"
    return f"Every {_seconds_text(seconds, grouped=True)} seconds"


def _seconds_text(seconds: float, *, grouped: bool = False) -> str:
    """Every digit of `seconds`: a whole number without a decimal point ("1,000,001" when
    `grouped`), any other as Python writes it back exactly ("100000.4")."""
    if seconds != int(seconds):
        return repr(float(seconds))
    return f"{int(seconds):,}" if grouped else str(int(seconds))


def _exact(seconds: float) -> str:
    """`seconds` in as few digits as name it exactly ("30", "1e+06", "1000001", "0.25"): the
    short form earlier versions stored wherever it is exact, so their rows still match."""
    short = f"{seconds:g}"
    return short if float(short) == seconds else _seconds_text(seconds)


def parse(name, raw, backend) -> ScheduleSpec:
    """Validate one entry of SCHEDULES against `backend`; ScheduleError says what is wrong."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
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

    args, kwargs = raw.get("args", []), raw.get("kwargs", {})
    # Checked before list() and dict() would make a list of a text's letters or a dict's keys.
    if not isinstance(args, list | tuple) or not isinstance(kwargs, dict):
        raise fail(
            f"args and kwargs must be a list and a dict, not {type(args).__name__} and "
            f"{type(kwargs).__name__}"
        )
    try:
        values["args"], values["kwargs"] = payload.check_arguments(args, kwargs)
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
        backend.validate_task(task_for(spec, task))
    except Exception as e:
        raise fail(str(e)) from None
    return spec


def _load_task(task_path, fail):
    from ..tasks import load_task

    try:
        return load_task(task_path)
    except (ImportError, TypeError) as e:
        raise fail(f"unknown task {task_path!r}: {e}") from None


def task_for(spec: ScheduleSpec, task):
    options: dict[str, object] = {}
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


def backend_for(backend=None):
    if backend is None or isinstance(backend, str):
        from ..compat import task_backends

        return task_backends[backend or "default"]
    return backend


def get(name, backend=None) -> ScheduleSpec:
    specs = configured(backend_for(backend))
    if name not in specs:
        raise UnknownSchedule(name)
    return specs[name]
