"""Sentry: failed attempts as events, schedule fires as cron check-ins (the `jobsite[sentry]`
extra).

Active only when sentry_sdk is installed and initialised by the project; otherwise each hook
is one check. The backend's OPTIONS choose what is sent:

    SENTRY_CAPTURE  "dead_letter" (default): a job that ends in the dead letter queue;
                    "every_failure": every failed attempt, retried or not.
    SENTRY_CRONS    true: each schedule fire sends a check-in to the monitor named after the
                    schedule (with its crontab when it has one).

An event carries the tags job_id, task, queue and attempt, the error's type and message as its
exception, and the traceback text the attempt recorded (the exception itself lived in the
executor process).
"""

from .states import JobState
from .worker_log import JOB_LINES

try:
    import sentry_sdk
except ImportError:  # the sentry extra is not installed
    sentry_sdk = None  # type: ignore[assignment]

CAPTURE_CHOICES = ("dead_letter", "every_failure")


# Loggers whose ERROR records tell of a failure `capture_failures` sends itself, with its tags:
# the worker's line per finished job, and the tasks framework's record of each failed attempt
# (Django's `django.tasks`, the backport's `django_tasks`). Sentry's logging integration, on by
# default, would make each an event of its own: five events for one job failing three times,
# whatever SENTRY_CAPTURE says.
TOLD_BY_EVENTS = (JOB_LINES, "django.tasks", "django_tasks")


def keep_repeats_out() -> None:
    """Keep the records of TOLD_BY_EVENTS out of Sentry's events and breadcrumbs, in this
    process (called from JobsConfig.ready, in every process that runs Django)."""
    if sentry_sdk is None:
        return
    from sentry_sdk.integrations.logging import ignore_logger

    for name in TOLD_BY_EVENTS:
        ignore_logger(name)


def active() -> bool:
    return sentry_sdk is not None and sentry_sdk.is_initialized()


def capture_mode(options) -> str:
    mode = options.get("SENTRY_CAPTURE") or "dead_letter"
    if mode not in CAPTURE_CHOICES:
        raise ValueError(f"SENTRY_CAPTURE must be one of {CAPTURE_CHOICES}, not {mode!r}")
    return mode


def capture_problems(backend) -> list[str]:
    """What is wrong with the backend's SENTRY_CAPTURE (for `manage.py check`)."""
    try:
        capture_mode(backend.options)
    except ValueError as e:
        return [str(e)]
    return []


def capture_failures(settled, options) -> None:
    """An event per failed attempt in `settled` ((Finish, Claimed) pairs) that OPTIONS ask for."""
    if not active():
        return
    wanted = {JobState.DEAD_LETTER}
    if capture_mode(options) == "every_failure":
        wanted.add(JobState.RETRYING)
    for f, claimed in settled:
        if f.state in wanted and f.error_type:
            sentry_sdk.capture_event(_event(f, claimed))  # type: ignore[arg-type]


def _event(f, claimed) -> dict:
    task = claimed.task_path if claimed else ""
    return {
        "level": "error",
        "logger": "jobs.worker",
        "transaction": task,
        "tags": {
            "job_id": str(f.job_id),
            "task": task,
            "queue": claimed.queue_name if claimed else "",
            "attempt": str(claimed.attempt) if claimed else "",
        },
        "exception": {"values": [{"type": f.error_type, "value": f.error_message}]},
        "extra": {
            "traceback": f.error_traceback,
            "final_state": f.state,
            "dead_letter_reason": f.reason,
        },
        "fingerprint": [task, f.error_type],
    }


def schedules_fired(fired, backend) -> None:
    """A check-in per schedule that fired (schedules.Fired), when OPTIONS["SENTRY_CRONS"]."""
    if not fired or not active() or not backend.sentry_crons:
        return
    from sentry_sdk.crons import capture_checkin

    from . import schedules

    specs = schedules.configured(backend)
    for result in fired:
        if not result.fire_times:
            continue
        spec = specs.get(result.schedule)
        config = None
        if spec is not None and spec.cron:
            config = {
                "schedule": {"type": "crontab", "value": spec.cron},
                "timezone": spec.timezone,
            }
        capture_checkin(
            monitor_slug=result.schedule,
            status="ok",
            monitor_config=config,  # type: ignore[arg-type]
        )
