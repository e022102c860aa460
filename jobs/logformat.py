"""`worker --log-format json`: one JSON object per line, for log collectors.

Every line has the keys time (ISO 8601, UTC), level, event, job_id, task, queue, attempt,
duration_ms and error_type (null where they do not apply), and message (the text line the
plain format would have written). `event` names what happened: job_succeeded, job_retrying,
job_dead_lettered, job_cancelled, job_handed_back, worker_started, worker_stopped; other lines
have the event "log". An exception's traceback comes as `traceback`.
"""

import json
import logging
import sys
from datetime import UTC, datetime

from .states import JobState

FIELDS = ("job_id", "task", "queue", "attempt", "duration_ms", "error_type")

FINISH_EVENTS = {
    JobState.SUCCEEDED: "job_succeeded",
    JobState.RETRYING: "job_retrying",
    JobState.DEAD_LETTER: "job_dead_lettered",
    JobState.CANCELLED: "job_cancelled",
    JobState.PENDING: "job_handed_back",
}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "event": getattr(record, "event", None) or "log",
        }
        for name in FIELDS:
            line[name] = getattr(record, name, None)
        line["message"] = record.getMessage()
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def use_json(logger_name: str = "jobs") -> None:
    """Write `logger_name`'s records as JSON lines: its handlers' formatter is replaced (a
    stderr handler is added where it has none). So is that of every other handler writing to
    this process's standard error or output, Python's last resort included: a log collector
    reading the worker's output gets JSON from Django's own loggers and the tasks' libraries
    too, not a plain line among the objects."""
    logger = logging.getLogger(logger_name)
    if not logger.handlers:
        logger.addHandler(logging.StreamHandler())
        logger.propagate = False
    for handler in logger.handlers:
        handler.setFormatter(JsonFormatter())
    for handler in _console_handlers():
        handler.setFormatter(JsonFormatter())


def _console_handlers() -> list[logging.Handler]:
    console = (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    loggers = [logging.getLogger()] + [
        x for x in logging.Logger.manager.loggerDict.values() if isinstance(x, logging.Logger)
    ]
    found = [h for x in loggers for h in x.handlers]
    if logging.lastResort is not None:
        found.append(logging.lastResort)
    return [
        h
        for h in found
        if isinstance(h, logging.StreamHandler) and any(h.stream is c for c in console if c)
    ]


def finish_fields(finish, claimed) -> dict:
    """The `extra` of an attempt's log record (`claimed` None when it is no longer known)."""
    duration = None
    if finish.started_at and finish.finished_at:
        duration = round((finish.finished_at - finish.started_at).total_seconds() * 1000, 1)
    return {
        "event": FINISH_EVENTS.get(finish.state, "job_finished"),
        "job_id": str(finish.job_id),
        "task": claimed.task_path if claimed else None,
        "queue": claimed.queue_name if claimed else None,
        "attempt": claimed.attempt if claimed else None,
        "duration_ms": duration,
        "error_type": finish.error_type or None,
    }
