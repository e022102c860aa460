"""Where the worker's log lines go when the host project says nothing about them.

A new project's LOGGING configures no handler for the `jobs` loggers, and Python then prints
only warnings and errors (its last-resort handler): the worker's start, claim and shutdown lines
would never show. The worker gives its own loggers a stderr handler in that case only; a
project that routes them anywhere keeps its own set-up.
"""

import logging
import sys

from .errortext import for_log

FORMAT = "%(asctime)s %(levelname)-7s %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class OneLineFormatter(logging.Formatter):
    """The worker's plain lines, one per event: a message's line breaks and control characters
    are escaped (and a long one cut), as the engine does with the job data it quotes; a task's
    own lines (`context.logger`) carry job data too. A logged exception's traceback follows on
    lines of its own, as usual."""

    def formatMessage(self, record):
        record.message = for_log(record.message)
        return super().formatMessage(record)


def configure_worker_logging(level: str | int | None = None) -> None:
    """Log the worker's lines to stderr unless the project already handles them; `level`
    (one of LEVELS) sets how much, default INFO or what the project configured."""
    engine = logging.getLogger("jobs")
    if not engine.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(OneLineFormatter(FORMAT))
        engine.addHandler(handler)
        engine.propagate = False
        if engine.level == logging.NOTSET and level is None:
            engine.setLevel(logging.INFO)
    if level is not None:
        engine.setLevel(level)


def worker_logging() -> tuple[int, bool]:
    """How the worker logs (its `jobs` loggers' level, and whether as JSON lines), for its
    executors to log their lines, a task's `context.logger` included, the same way."""
    from .logformat import JsonFormatter

    engine = logging.getLogger("jobs")
    return engine.level, any(isinstance(h.formatter, JsonFormatter) for h in engine.handlers)


def log_like_the_worker(setup: tuple[int, bool]) -> None:
    """In an executor: set up its `jobs` loggers as `worker_logging()` read the worker's."""
    from .logformat import EXECUTOR_LINE_BYTES, use_json

    level, json_lines = setup
    configure_worker_logging(level or None)
    if json_lines:
        use_json(max_bytes=EXECUTOR_LINE_BYTES)
