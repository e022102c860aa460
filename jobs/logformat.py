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


# An executor's line is at most this many bytes: under a pipe's PIPE_BUF (4,096 on Linux) a
# write lands whole, so the lines of executors writing at once never interleave in the
# worker's output. The attempt keeps a task's lines in full (jobs.attempt_log's own cap).
EXECUTOR_LINE_BYTES = 4000


class JsonFormatter(logging.Formatter):
    def __init__(self, max_bytes: int | None = None):
        super().__init__()
        self.max_bytes = max_bytes

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
        text = json.dumps(line, default=str, ensure_ascii=False)
        if self.max_bytes is None or len(text) * 4 <= self.max_bytes:
            return text
        return self._within(line, text)

    def _within(self, line: dict, text: str) -> str:
        """The line with its message (and traceback) cut until it takes at most max_bytes."""
        assert self.max_bytes is not None
        cut = 0
        while (over := len(text.encode()) - self.max_bytes) > 0:
            key = "traceback" if line.get("traceback") else "message"
            value = str(line.get(key) or "")
            if not value:
                break
            keep = max(0, len(value) - over - 16)
            cut += len(value) - keep
            # A traceback's last lines say what failed; a message's first lines say what it is.
            line[key] = value[len(value) - keep :] if key == "traceback" else value[:keep]
            if key == "traceback" and not keep:
                del line["traceback"]
            line["cut"] = cut
            text = json.dumps(line, default=str, ensure_ascii=False)
        return text


def use_json(logger_name: str = "jobs", max_bytes: int | None = None) -> None:
    """Write `logger_name`'s records as JSON lines: its handlers' formatter is replaced (a
    stderr handler is added where it has none). So is that of every other handler writing to
    this process's standard error or output, Python's last resort included: a log collector
    reading the worker's output gets JSON from Django's own loggers and the tasks' libraries
    too, not a plain line among the objects. `max_bytes`: the longest line, cut to fit."""
    logger = logging.getLogger(logger_name)
    if not logger.handlers:
        logger.addHandler(logging.StreamHandler())
        logger.propagate = False
    for handler in logger.handlers:
        handler.setFormatter(JsonFormatter(max_bytes))
    for handler in _console_handlers():
        handler.setFormatter(JsonFormatter(max_bytes))


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


def job_fields(claimed) -> dict:
    """The fields naming the job of a line about an attempt of `claimed`."""
    return {
        "job_id": str(claimed.id),
        "task": claimed.task_path,
        "queue": claimed.queue_name,
        "attempt": claimed.attempt,
    }


def finish_fields(finish, claimed) -> dict:
    """The `extra` of an attempt's log record (`claimed` None when it is no longer known)."""
    duration = None
    if finish.started_at and finish.finished_at:
        duration = round((finish.finished_at - finish.started_at).total_seconds() * 1000, 1)
    known = job_fields(claimed) if claimed else {"task": None, "queue": None, "attempt": None}
    return {
        "event": FINISH_EVENTS.get(finish.state, "job_finished"),
        **known,
        "job_id": str(finish.job_id),
        "duration_ms": duration,
        "error_type": finish.error_type or None,
    }
