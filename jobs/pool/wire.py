"""The messages between the worker and an executor: framing, the pipe, the flat codecs.

The worker sends one job per message; the child sends each outcome back the moment the
attempt ends. Both travel as flat lists of plain values (`_Flat`), pickled.
"""

import collections
import dataclasses
import enum
import functools
import os
import pickle
import select
import struct
import uuid
from datetime import datetime

from ..moments import from_micros, to_micros


class Channel:
    """The worker's end of an executor's pipe: framed messages out, framed messages in, and
    never a blocking call.

    The worker must not block writing: the child may itself be blocked writing a large outcome,
    which only the worker's loop can read. What the pipe does not take at once waits here
    (`unsent`) until the loop sees the pipe writable again. Messages coming back are read in
    bulk, and the bytes of one not yet complete wait for the rest.
    """

    def __init__(self, conn):
        self.fd = conn.fileno()
        os.set_blocking(self.fd, False)
        self._outbox: list[bytes] = []
        self._unsent = bytearray()
        self._inbox = bytearray()
        self.closed = False
        self._readable = select.poll()
        self._readable.register(self.fd, select.POLLIN)
        self._both = select.poll()
        self._both.register(self.fd, select.POLLIN | select.POLLOUT)

    def queue(self, message: bytes):
        """Add a message to the next `flush`."""
        self._outbox.append(_framed(message))

    @property
    def queued(self) -> int:
        return len(self._outbox)

    @property
    def unsent(self) -> bool:
        return bool(self._unsent or self._outbox)

    def flush(self):
        """Write what the pipe takes now; raises OSError (BrokenPipeError) once it is broken."""
        if self._outbox:
            self._unsent += b"".join(self._outbox)
            self._outbox.clear()
        try:
            while self._unsent:
                del self._unsent[: os.write(self.fd, self._unsent)]
        except BlockingIOError:
            pass  # full: the rest goes out once the other side has read some

    def read(self) -> list[bytes]:
        """Every complete message that has arrived; `closed` is set once the other end closed
        (the messages it sent before that still come out)."""
        while not self.closed and self._readable.poll(0):
            try:
                data = os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                self.closed = True
            self._inbox += data
        return _messages(self._inbox)

    def wait(self, timeout: float) -> bool:
        """Wait until the pipe is writable or readable; True when there is something to read."""
        ready = self._both.poll(timeout * 1000)
        return any(
            events & (select.POLLIN | select.POLLHUP | select.POLLERR) for _, events in ready
        )


class Inbox:
    """The executor's end of the pipe, reading: one message at a time, in the order sent.

    Read in bulk: one read takes every message that has arrived (the worker writes the jobs
    queued behind a running one together), where reading each message's length and then its
    bytes took two system calls a message. A message read here is no nearer to running than
    one still in the pipe: whether it starts is decided when its turn comes, as before.
    """

    def __init__(self, conn):
        self.fd = conn.fileno()
        self._buffer = bytearray()
        self._messages: collections.deque[bytes] = collections.deque()

    def next(self) -> bytes:
        """The next message, waiting for it; EOFError once the other end closed."""
        while not self._messages:
            data = os.read(self.fd, max(READ_SIZE, _missing(self._buffer)))
            if not data:
                raise EOFError
            self._buffer += data
            self._messages.extend(_messages(self._buffer))
        return self._messages.popleft()


# Jobs queued behind a running one are written to its executor this many at a time.
SEND_EVERY = 8
# Bytes read from an executor's pipe at once: hundreds of outcomes of short jobs.
READ_SIZE = 1 << 16
_SIZE = struct.Struct("!i")
_LARGE_SIZE = struct.Struct("!Q")


def _frame(buffer: bytearray, start: int) -> tuple[int, int] | None:
    """(header length, message length) of the message at `start`, None while its header is
    incomplete (multiprocessing's framing: a signed 4-byte big-endian length, or -1 and an
    8-byte one, then the bytes)."""
    if len(buffer) - start < 4:
        return None
    (size,) = _SIZE.unpack_from(buffer, start)
    if size != -1:
        return 4, size
    if len(buffer) - start < 12:
        return None
    return 12, _LARGE_SIZE.unpack_from(buffer, start + 4)[0]


def _messages(buffer: bytearray) -> list[bytes]:
    """Take the complete messages off the front of `buffer`."""
    messages, start, end = [], 0, len(buffer)
    while frame := _frame(buffer, start):
        header, size = frame
        if end - start - header < size:
            break
        messages.append(bytes(buffer[start + header : start + header + size]))
        start += header + size
    del buffer[:start]
    return messages


def _missing(buffer: bytearray) -> int:
    """How many bytes the first message in `buffer` still lacks (0 while unknown): the rest of
    a large message is asked for at once, and comes in as large pieces as the pipe holds."""
    frame = _frame(buffer, 0)
    return max(0, sum(frame) - len(buffer)) if frame else 0


def _framed(message: bytes) -> bytes:
    """A message as Connection.recv_bytes() reads it."""
    if len(message) < 0x7FFFFFFF:
        return _SIZE.pack(len(message)) + message
    return _SIZE.pack(-1) + _LARGE_SIZE.pack(len(message)) + message


def _dumps(value) -> bytes:
    # Plain pickle over send_bytes: the per-message set-up of multiprocessing's own pickler
    # costs more than the message itself for small jobs.
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


class _Flat:
    """A dataclass as a flat list of plain values, for the messages between worker and executor.

    UUIDs travel as their 16 bytes and aware datetimes as microseconds since the epoch:
    pickling the objects themselves (their classes, state dicts and time zones) cost more than
    the rest of a message. Enum members travel as their plain value (text, for a StrEnum) and
    come back as members of the field's enum. Values of any other type (an id kept as text)
    travel as they are.
    """

    def __init__(self, cls, uuids, moments, enums=None):
        self.cls = cls
        self.names = tuple(f.name for f in dataclasses.fields(cls))
        self.uuids = tuple(self.names.index(name) for name in uuids)
        self.moments = tuple(self.names.index(name) for name in moments)
        self.enums = tuple((self.names.index(name), kind) for name, kind in (enums or {}).items())

    def flat(self, obj) -> list:
        values = [getattr(obj, name) for name in self.names]
        for i in self.uuids:
            if type(values[i]) is uuid.UUID:
                values[i] = values[i].bytes
        for i in self.moments:
            value = values[i]
            if type(value) is datetime and value.tzinfo is not None:
                values[i] = to_micros(value)
        for i, _ in self.enums:
            if isinstance(values[i], enum.Enum):
                values[i] = values[i].value
        return values

    def build(self, values):
        for i in self.uuids:
            if type(values[i]) is bytes:
                values[i] = uuid.UUID(bytes=values[i])
        for i in self.moments:
            if type(values[i]) is int:
                values[i] = from_micros(values[i])
        for i, kind in self.enums:
            values[i] = kind(values[i])
        return self.cls(*values)


@functools.cache
def _job_codec() -> _Flat:
    from ..db import Claimed  # not at import: an executor imports this before Django is set up

    return _Flat(Claimed, ("id", "lease_id"), ("started_at", "enqueued_at"))


@functools.cache
def _ran_codec() -> _Flat:
    from ..outcome import Ran, RanKind

    return _Flat(Ran, ("job_id",), ("started_at", "finished_at"), {"kind": RanKind})
