"""An attempt's log lines: which are kept, and reading them back with the cut marked.

An attempt keeps at most MAX_LINES lines and MAX_BYTES of text: its first lines (the head) and
its last ones (the tail), half of each allowance for either. Every line logged is numbered
(`seq`, from 1), kept or not, so the lines cut are the gap between the head and the tail: the
reader finds the cut, and how many lines it took, without a marker row to keep up to date.
"""

import logging
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple

from .models import LogLine
from .text import storable

MAX_LINES = 1000
MAX_BYTES = 256 * 1024
HEAD_LINES = TAIL_LINES = MAX_LINES // 2
HEAD_BYTES = TAIL_BYTES = MAX_BYTES // 2
# A longer line is cut to this many characters, the cut said at its end.
MAX_LINE_CHARS = 8 * 1024
MAX_LEVEL_CHARS = 32


def clean_text(text: str, limit: int) -> str:
    """`text` as both databases store it: no NUL, no lone surrogate, at most `limit` characters
    (the rest said to be cut)."""
    text = storable(text)
    if len(text) > limit:
        text = f"{text[:limit]} … [{len(text) - limit:,} characters cut]"
    return text


class Line(NamedTuple):  # a tuple: made for every line logged, so made cheaply
    seq: int
    created: float  # seconds since the epoch, as logging records them
    level: str
    message: str

    @property
    def at(self) -> datetime:
        return datetime.fromtimestamp(self.created, UTC)


# Level names taken as they are (any other is cleaned like a message).
_LEVELS = frozenset(logging.getLevelNamesMapping())


@dataclass(frozen=True, slots=True)
class Batch:
    """What one write of a keeper's lines does: insert `lines`, then delete the rows of the
    tail numbered below `delete_below` (None: nothing to delete)."""

    lines: list[Line]
    delete_below: int | None
    head_end: int
    last_seq: int  # the last line logged when the batch was taken


class Keeper:
    """Which lines of one attempt to write, and which written ones to delete, as they come.

    Lines are added as they are logged; `batch()` says what to write now (lines cut before
    they were written are never written); `written()` records that a batch landed. Not
    thread-safe: its owner holds a lock around it.
    """

    def __init__(self):
        self.logged = 0
        self.head_end = 0  # seq of the head's last line
        self._head_open = True
        self._head_lines = self._head_bytes = 0
        self._tail: deque[tuple[int, int]] = deque()  # (seq, size) of the lines kept at the end
        self._tail_bytes = 0
        self._pending: deque[Line] = deque()
        # The lowest tail line written and not deleted since (None: no tail row written).
        self._written_tail_from: int | None = None

    def add(self, created: float, level: str, message: str) -> None:
        self.logged += 1
        if level not in _LEVELS:
            level = clean_text(level, MAX_LEVEL_CHARS)
        if message.isascii():
            if "\x00" in message or len(message) > MAX_LINE_CHARS:
                message = clean_text(message, MAX_LINE_CHARS)
            size = len(message)
        else:
            message = clean_text(message, MAX_LINE_CHARS)
            size = len(message.encode("utf-8"))
        line = Line(self.logged, created, level, message)
        if (
            self._head_open
            and self._head_lines < HEAD_LINES
            and self._head_bytes + size <= HEAD_BYTES
        ):
            self._head_lines += 1
            self._head_bytes += size
            self.head_end = line.seq
        else:
            self._head_open = False
            self._tail.append((line.seq, size))
            self._tail_bytes += size
            while len(self._tail) > TAIL_LINES or self._tail_bytes > TAIL_BYTES:
                self._tail_bytes -= self._tail.popleft()[1]
        self._pending.append(line)
        if len(self._pending) > 2 * MAX_LINES:  # the database has been away a while
            self._pending = deque(self._kept(self._pending))

    def _tail_from(self) -> int:
        return self._tail[0][0] if self._tail else self.logged + 1

    def _kept(self, lines):
        tail_from = self._tail_from()
        return [line for line in lines if line.seq <= self.head_end or line.seq >= tail_from]

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def batch(self) -> Batch:
        tail_from = self._tail_from()
        delete = self._written_tail_from is not None and self._written_tail_from < tail_from
        return Batch(
            lines=self._kept(self._pending),
            delete_below=tail_from if delete else None,
            head_end=self.head_end,
            last_seq=self.logged,
        )

    def written(self, batch: Batch) -> None:
        while self._pending and self._pending[0].seq <= batch.last_seq:
            self._pending.popleft()
        tail = [line.seq for line in batch.lines if line.seq > batch.head_end]
        if batch.delete_below is not None:
            self._written_tail_from = batch.delete_below
        if tail and self._written_tail_from is None:
            self._written_tail_from = tail[0]


# --- reading -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cut:
    """Where lines were cut, and how many."""

    lines: int


@dataclass(frozen=True, slots=True)
class AttemptLog:
    attempt: int
    entries: list  # Line and Cut, in order
    cut: int  # lines cut in all

    @property
    def lines(self) -> int:
        return sum(1 for entry in self.entries if isinstance(entry, Line))


def _log(attempt: int, rows) -> AttemptLog:
    entries: list[Line | Cut] = []
    cut = previous = 0
    for seq, logged_at, level, message in rows:
        if seq > previous + 1:
            entries.append(Cut(seq - previous - 1))
            cut += seq - previous - 1
        entries.append(Line(seq, logged_at.timestamp(), level, message))
        previous = seq
    return AttemptLog(attempt=attempt, entries=entries, cut=cut)


def read(job_id, attempt: int) -> AttemptLog:
    """The kept lines of one attempt of a job, a Cut where lines were cut."""
    rows = (
        LogLine.objects.filter(job_id=job_id, attempt=attempt)
        .order_by("seq")
        .values_list("seq", "logged_at", "level", "message")
    )
    return _log(attempt, rows)


def read_all(job_id) -> dict[int, AttemptLog]:
    """The kept lines of every attempt of a job that logged any, by attempt number."""
    rows = (
        LogLine.objects.filter(job_id=job_id)
        .order_by("attempt", "seq")
        .values_list("attempt", "seq", "logged_at", "level", "message")
    )
    by_attempt: dict[int, list] = {}
    for attempt, *row in rows:
        by_attempt.setdefault(attempt, []).append(row)
    return {attempt: _log(attempt, lines) for attempt, lines in by_attempt.items()}
