"""What a running attempt reports as it goes: its progress, and the lines it logs.

A task with takes_context=True calls `context.progress(done, total, message)` and logs through
`context.logger`. Both land in the attempt's `AttemptReport`, a small buffer behind a lock (any
thread or event loop may report), and go from the executor straight to the database: written by
a thread over a connection of its own at most once a second per attempt however chatty the task
is, and a last time as the attempt ends, before its outcome goes back to the worker. The worker
holds none of it, so an executor that crashes loses at most its last second; one the worker
stops (a timeout, a cancel, the shutdown timeout) is first asked to write what it holds. Every
write is fenced by the attempt's lease (jobs.db.reports): once the lease is taken over, nothing
more is written.

Outside an executor (eager mode) nothing is written until the attempt ends, then over the
caller's connection, inside its transaction if it has one.
"""

import logging
import math
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import DEFAULT_DB_ALIAS

from . import attempt_log
from .db import reports as db_reports
from .db.unpooled import unpooled_connection
from .reconnect import first_line

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0
MAX_MESSAGE_CHARS = 1000
# A writer with nothing to write closes its connection after this long.
IDLE_SECONDS = 30.0
# The logger an attempt's logger hands its lines on to, as context.logger did before.
TASK_LOGGER = "jobs.task"
_ONWARD = logging.getLogger(TASK_LOGGER)
_LARGEST = sys.float_info.max


def _number(value, name):
    if type(value) is int and 0 <= value <= _LARGEST:  # the common case, checked first
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"progress: {name} must be a number, not {type(value).__name__}")
    if isinstance(value, int) and abs(value) > _LARGEST:
        # No larger than a float can be: past that, JSON cannot carry it (nor repr show it).
        raise ValueError(f"progress: {name} must be a finite number >= 0, at most {_LARGEST:.1e}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"progress: {name} must be a finite number >= 0, not {value!r}")
    return value


def checked_progress(done, total=None, message="") -> tuple:
    """(done, total, message, now): a clear TypeError or ValueError for what is not progress."""
    _number(done, "done")
    if total is not None:
        _number(total, "total")
    if type(message) is not str:
        raise TypeError(f"progress: message must be a str, not {type(message).__name__}")
    return done, total, message, time.time()


def progress_value(reported: tuple, *, attempt: int) -> dict:
    """Progress as the job row keeps it (built when written, not at each report)."""
    done, total, message, at = reported
    return {
        "done": done,
        "total": total,
        "message": attempt_log.clean_text(message, MAX_MESSAGE_CHARS),
        "updated_at": datetime.fromtimestamp(at, UTC).isoformat(),
        "attempt": attempt,
    }


@dataclass(frozen=True, slots=True)
class Written:
    """One write of a report: its progress (None: unchanged since the last) and lines."""

    job_id: object
    lease_id: object
    attempt: int
    progress: dict | None
    batch: attempt_log.Batch
    reported: tuple | None  # the progress as reported, kept again if the write fails


class AttemptReport:
    """Progress and log lines of one attempt, buffered until its writer writes them."""

    def __init__(self, job_id, lease_id, attempt: int, writer=None, *, log_fields=None):
        self.job_id, self.lease_id, self.attempt = job_id, lease_id, attempt
        # What the lines handed on to the project's handlers carry (jobs.logformat.job_fields).
        self.log_fields: dict = log_fields or {}
        self._writer = writer or current_writer()
        self._lock = threading.Lock()
        self._keeper = attempt_log.Keeper()
        self._progress: tuple | None = None
        self._watched = False
        # Ended: the attempt is over, or its lease was taken over. Later reports are dropped.
        self._ended = False
        self.logger = _AttemptLogger(self)

    def progress(self, done, total=None, message=""):
        value = checked_progress(done, total, message)
        with self._lock:
            if self._ended:
                return
            self._progress = value
            first, self._watched = not self._watched, True
        if first:
            self._writer.watch(self)

    def add_line(self, created: float, level: str, message: str):
        with self._lock:
            if self._ended:
                return
            self._keeper.add(created, level, message)
            first, self._watched = not self._watched, True
        if first:
            self._writer.watch(self)

    def take(self) -> Written | None:
        """What to write now, or None; the writer calls `written` or `unwritten` after."""
        with self._lock:
            if self._progress is None and not self._keeper.pending:
                return None
            reported, self._progress = self._progress, None
            batch = self._keeper.batch()
        progress = None if reported is None else progress_value(reported, attempt=self.attempt)
        return Written(self.job_id, self.lease_id, self.attempt, progress, batch, reported)

    def written(self, write: Written, held: bool):
        with self._lock:
            if held:
                self._keeper.written(write.batch)
            else:  # the lease was taken over: this attempt reports no more
                self._ended = True
                self._progress, self._keeper = None, attempt_log.Keeper()

    def unwritten(self, write: Written):
        """The write failed: keep its progress for the next one, unless a newer one came."""
        with self._lock:
            if self._progress is None:
                self._progress = write.reported

    def close(self):
        """The attempt is over: write what is left, now. Never raises."""
        with self._lock:
            self._ended, watched = True, self._watched
        self.logger.report = None  # lines logged later go nowhere; and no cycle to collect
        if watched:
            try:
                self._writer.finish(self)
            except Exception:
                logger.exception("writing the last progress and log lines of job %s", self.job_id)


class _AttemptLogger(logging.Logger):
    """`context.logger`: keeps each line with the attempt, then hands it on to the task logger.

    Not registered with logging (it goes away with its attempt); every level is kept. The line
    is kept here, not by a handler: a handler's lock and filters cost more than keeping it.
    """

    def __init__(self, report: AttemptReport):
        super().__init__(TASK_LOGGER, logging.DEBUG)
        self.propagate = False
        self.report: AttemptReport | None = report
        self.onward = _ONWARD

    def _log(self, level, msg, args, exc_info=None, extra=None, stack_info=False, stacklevel=1):
        # Most lines go nowhere but the attempt's log: keep those without building a record
        # (where it was logged from, which thread and process), which costs more than the rest.
        report = self.report
        if (
            report is None
            or exc_info
            or stack_info
            or self.handlers
            or self.filters
            or _ONWARD.isEnabledFor(level)
        ):
            super()._log(level, msg, args, exc_info, extra, stack_info, stacklevel + 1)
            return
        if args and len(args) == 1 and isinstance(args[0], Mapping) and args[0]:
            args = args[0]  # as LogRecord takes it
        try:
            message = str(msg) % args if args else str(msg)
        except Exception:
            message = f"(a line that could not be formatted: {msg!r})"
        report.add_line(time.time(), logging.getLevelName(level), message)

    def callHandlers(self, record):
        try:
            if record.exc_info or record.stack_info:
                message = _FORMATTER.format(record)
            else:
                message = record.getMessage()
        except Exception:
            message = f"(a line that could not be formatted: {record.msg!r})"
        report = self.report
        if report is not None:
            report.add_line(record.created, record.levelname, message)
        if self.handlers:  # added by the task itself
            super().callHandlers(record)
        # As context.logger did before: the project's handlers see what its levels let through,
        # each line naming its job (a field the task gave in `extra` stays as it gave it).
        if self.onward.isEnabledFor(record.levelno):
            for name, value in (report.log_fields if report is not None else {}).items():
                if not hasattr(record, name):
                    setattr(record, name, value)
            self.onward.handle(record)


_FORMATTER = logging.Formatter()


class InlineWriter:
    """Writes an attempt's report when it ends, over the caller's connection (eager mode)."""

    def watch(self, report):
        pass

    def finish(self, report):
        write = report.take()
        if write is not None:
            report.written(write, db_reports.write_here(write))


class LiveWriter:
    """An executor's writer: a thread writing every watched report about once a second, over
    a connection of its own (never the task's, whose transaction it must stay out of)."""

    def __init__(self, interval: float = FLUSH_SECONDS):
        self.interval = interval
        self._reports: set[AttemptReport] = set()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()  # one connection: one write at a time
        self._conn = None
        self._last_write = time.monotonic()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._asked: list = []  # called once the writes asked for by `write_all_now` are done
        self._failing = False  # the last write failed (said once until one succeeds)

    def watch(self, report):
        with self._lock:
            self._reports.add(report)
            if self._thread is None:  # started by the first attempt that reports anything
                self._thread = threading.Thread(
                    target=self._run, name="executor-reports", daemon=True
                )
                self._thread.start()

    def finish(self, report):
        with self._lock:
            self._reports.discard(report)
        self.flush(report, tries=2)

    def write_all_now(self, done):
        """Write every running attempt's report at once, on the writer's thread, then call
        `done()` (at once when nothing was ever reported here). Never waits itself."""
        with self._lock:
            idle = self._thread is None
            if not idle:
                self._asked.append(done)
        if idle:
            done()
        else:
            self._wake.set()

    def flush(self, report, *, tries=1):
        with self._write_lock:
            write = report.take()
            if write is None:
                return
            for _ in range(tries):
                try:
                    held = db_reports.write_on(self._connection(), write)
                except Exception as e:
                    self._failed(report, e)
                    self._drop_connection()
                    continue
                if self._failing:
                    self._failing = False
                    logger.info("progress and log lines are written again")
                report.written(write, held)
                self._last_write = time.monotonic()
                return
            report.unwritten(write)

    def _failed(self, report, error):
        # Once per outage, in one line: a write is tried every second for every running job.
        if self._failing:
            logger.debug("could not write the progress and log lines of job %s", report.job_id)
            return
        self._failing = True
        logger.warning(
            "could not write the progress and log lines of job %s (%s); will retry, quietly "
            "until a write succeeds",
            report.job_id,
            first_line(error),
        )

    def close(self):
        """Close the writer's connection (a later write opens a new one)."""
        with self._write_lock:
            self._drop_connection()

    def _connection(self):
        if self._conn is None:
            # Never from a pool: in an outage the attempt's outcome waits behind these writes,
            # and a pool would hold them until the lease had lapsed.
            conn = unpooled_connection(DEFAULT_DB_ALIAS)
            conn.inc_thread_sharing()  # used by this thread, and by the attempt's at its end
            self._conn = conn
        return self._conn

    def _drop_connection(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _run(self):
        while True:
            self._wake.wait(self.interval)
            self._wake.clear()
            with self._lock:
                reports = list(self._reports)
                asked, self._asked = self._asked, []
            for report in reports:
                self.flush(report)
            for done in asked:
                done()
            if not reports and time.monotonic() - self._last_write > IDLE_SECONDS:
                with self._write_lock:
                    self._drop_connection()


_INLINE = InlineWriter()
_live: LiveWriter | None = None


def start_live_writer() -> None:
    """From now on, this process's attempts report live (called once by an executor)."""
    global _live
    if _live is None:
        _live = LiveWriter()


def current_writer():
    return _live or _INLINE


def write_all_now(done) -> None:
    """Write what this process's running attempts reported so far, then call `done()`: an
    executor about to be stopped from outside keeps its jobs' last lines (jobs.pool.child)."""
    if _live is None:
        done()
    else:
        _live.write_all_now(done)
