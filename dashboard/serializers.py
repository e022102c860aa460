"""Jobs and attempts as JSON, and the one shape of every API error and of every page of a list."""

import uuid
from datetime import datetime

from django.http import JsonResponse

from jobs.attempt_log import Cut
from jobs.states import JobState

from .columns import ATTEMPT_FIELDS, JOB_COLUMNS, JOB_FIELDS


def _json(value):
    """A column's value as JSON: times in ISO 8601, ids as text, the rest as stored."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _time(value):
    return value.isoformat() if value is not None else None


def job_json(job, reruns=()) -> dict:
    """The job; `reruns` are the ids of the runs made from it, newest first."""
    columns = zip(JOB_FIELDS, JOB_COLUMNS, strict=True)
    return {
        **{name: _json(getattr(job, column)) for name, column in columns},
        "progress": progress_json(job.progress),
        "reruns": [str(i) for i in reruns],
        "lease_lapsed": job.lease_lapsed,
    }


PROGRESS_KEYS = ("done", "total", "message", "updated_at")


def progress_json(stored) -> dict | None:
    """The progress a job's attempt last reported (the attempt number stays inside)."""
    if not isinstance(stored, dict):
        return None
    return {key: stored.get(key) for key in PROGRESS_KEYS}


def log_json(job, log) -> dict:
    """An attempt's kept log lines (a jobs.attempt_log.AttemptLog); where lines were cut, a line
    of level CUT says how many (timed as the line after it)."""
    lines, cut = [], None
    for entry in log.entries:
        if isinstance(entry, Cut):
            cut = entry
            continue
        if cut is not None:
            lines.append(
                {
                    "time": _time(entry.at),
                    "level": "CUT",
                    "message": f"[{cut.lines:,} line{'s' if cut.lines != 1 else ''} cut]",
                }
            )
            cut = None
        lines.append({"time": _time(entry.at), "level": entry.level, "message": entry.message})
    return {
        "job_id": str(job.id),
        "attempt": log.attempt,
        "running": job.state == JobState.RUNNING and job.attempt == log.attempt,
        "cut": log.cut,
        "lines": lines,
    }


def schedule_json(row) -> dict:
    """A schedule (a dashboard.schedule_rows.ScheduleRow) as the API shows it."""
    state, spec = row.state, row.state.spec
    return {
        "name": spec.name,
        "task_path": spec.task_path,
        "cron": spec.cron,
        "every": spec.every,
        "timezone": spec.timezone,
        "paused": state.paused,
        "next_fire_at": _time(state.next_fire_at),
        "last_job": job_json(row.last_job) if row.last_job is not None else None,
        # Extensions: the fire times in words, the missed-fire policy, the last fire time.
        "description": spec.describe(),
        "missed": spec.missed,
        "last_fire_at": _time(state.last_fire_at),
    }


def attempt_json(attempt) -> dict:
    return {name: _json(getattr(attempt, name)) for name in ATTEMPT_FIELDS}


def job_detail_json(job, attempts, reruns=()) -> dict:
    return {**job_json(job, reruns), "attempts": [attempt_json(a) for a in attempts]}


def queue_json(status) -> dict:
    """A queue (`dashboard.queue_rows.QueueStatus`): counts per state as numbers."""
    return {
        "name": status.name,
        "paused": status.paused,
        "counts": {state: tally.value for state, tally in status.counts.items()},
        "oldest_due_at": _time(status.oldest_due_at),
    }


class BadRequest(Exception):
    """Input the API refuses (a 400), with what to tell the client."""

    def __init__(self, message, **details):
        super().__init__(message)
        self.details = details


def page_response(results: list, page) -> JsonResponse:
    """A page of any list: its rows as `results`, and the next page's cursor (null at the end)."""
    return JsonResponse({"results": results, "next_cursor": page.next_cursor})


def error(status: int, message: str, *, headers=None, **details) -> JsonResponse:
    """Every API error: `{"error": message, ...details}` with its HTTP status."""
    return JsonResponse({"error": message, **details}, status=status, headers=headers)
