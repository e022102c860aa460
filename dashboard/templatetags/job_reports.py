"""What a running job reports, in the console: its progress bar and its attempts' log lines.

Everything shown here is the job's own text: the templates escape it, and nothing of it goes
into a style (the CSP allows no inline style): bars are <progress> elements.
"""

from datetime import datetime

from django import template
from django.utils import timezone

from jobs.attempt_log import Cut

register = template.Library()

LEVEL_CLASSES = frozenset({"debug", "info", "warning", "error", "critical"})


def _number(value) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{int(value):,}"


def _plain(value) -> str:
    """A number as an HTML attribute takes it (no grouping, no locale)."""
    return repr(int(value)) if isinstance(value, float) and value.is_integer() else repr(value)


def progress_of(job) -> dict | None:
    stored = job.progress
    if not isinstance(stored, dict) or not isinstance(stored.get("done"), int | float):
        return None
    done, total = stored["done"], stored.get("total")
    if not isinstance(total, int | float):
        total = None
    text = f"{_number(done)} of {_number(total)}" if total is not None else f"{_number(done)} done"
    bar = {}
    if total:  # a bar needs a maximum above 0; without one it is indeterminate
        bar = {"value": _plain(min(done, total)), "max": _plain(total)}
    updated = stored.get("updated_at")
    try:
        updated = datetime.fromisoformat(updated) if isinstance(updated, str) else None
    except ValueError:
        updated = None
    attempt = stored.get("attempt")
    return {
        "text": text,
        "message": stored.get("message") or "",
        "updated_at": updated,
        "attempt": attempt,
        "earlier": isinstance(attempt, int) and attempt != job.attempt,
        **bar,
    }


@register.inclusion_tag("dashboard/includes/progress.html")
def job_progress(job):
    """The job's progress card: a bar, "done of total" and the message."""
    return {"p": progress_of(job)}


@register.inclusion_tag("dashboard/includes/progress_mini.html")
def progress_mini(job):
    """A small bar in a list row, for a running job that reported progress."""
    return {"p": progress_of(job) if job.state == "running" else None}


def _entries(log):
    for entry in log.entries:
        if isinstance(entry, Cut):
            yield {"cut": entry.lines}
            continue
        at = timezone.localtime(entry.at)
        level = entry.level.lower()
        yield {
            "iso": at.isoformat(),
            "clock": at.strftime("%H:%M:%S.%f")[:-3],
            "level": entry.level,
            "css": level if level in LEVEL_CLASSES else "other",
            "message": entry.message,
        }


@register.inclusion_tag("dashboard/includes/attempt_log.html")
def attempt_log(logs, number, live=False):
    """The lines attempt `number` logged (`logs`: jobs.attempt_log.read_all of the job); the
    running attempt's are shown open, a finished one's folded beside its traceback."""
    log = (logs or {}).get(number)
    if log is None:
        return {"log": None, "live": live}
    return {"log": log, "entries": list(_entries(log)), "live": live}
