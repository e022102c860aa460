"""Wake-ups for workers on SQLite: a datagram socket per idle worker, beside the database file.

SQLite has no LISTEN/NOTIFY, and polling the file is either slow (every 100 ms) or costly. So
each worker binds a Unix datagram socket in a folder next to the database file
(`<file>-wake/`), and whoever commits a job that is due now sends one byte to every socket
there. Nothing rides on the byte: a worker that misses one (its buffer full, the folder
unwritable) still finds the job at its next poll, as before.

The folder sits beside the database because every process that writes the database can
already write that folder (SQLite keeps its -wal and -shm files there), whatever user each
runs as. A path too long for a Unix socket falls back to a folder in the system's temporary
directory named after the database file.
"""

import contextlib
import errno
import hashlib
import logging
import os
import secrets
import socket
import tempfile
from functools import cache
from pathlib import Path

logger = logging.getLogger(__name__)

SUFFIX = ".sock"
# Linux allows 108 bytes in sun_path and macOS 104, the terminating NUL included.
MAX_SOCKET_PATH = 100
# "/<pid>-<8 hex digits>.sock", the largest pid Linux gives included.
NAME_LENGTH = len(f"/{2**22}-{'0' * 8}{SUFFIX}")


# Every enqueue asks: the path is resolved once per database name, not once per job.
@cache
def folder_for(database: str) -> Path | None:
    """Where the wake-up sockets of the SQLite file `database` live; None for a database
    that is not a file (in memory), which no other process can share."""
    if not database or database == ":memory:" or str(database).startswith("file:"):
        return None
    path = Path(database).resolve()
    beside = path.with_name(path.name + "-wake")
    if len(str(beside)) + NAME_LENGTH <= MAX_SOCKET_PATH:
        return beside
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"jobsite-wake-{digest}"


class Waker:
    """The sending side: one byte to every worker's socket in the folder, after a commit."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)

    def __call__(self) -> None:
        self.wake()

    def wake(self) -> int:
        """Send to every socket in the folder; return how many took it. Stale sockets (their
        worker gone without tidying up) are removed."""
        try:
            names = os.listdir(self.folder)
        except OSError:
            return 0
        woken = 0
        for name in names:
            if not name.endswith(SUFFIX):
                continue
            address = os.path.join(self.folder, name)
            try:
                self.sock.sendto(b"\0", address)
                woken += 1
            except BlockingIOError:
                woken += 1  # its buffer is full of wake-ups it has not read yet: it is awake
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(OSError):
                    os.unlink(address)
            except OSError:
                pass  # not ours to send to (another user's socket): it polls
        return woken


class Wakeups:
    """The receiving side, for a worker's wait loop: a socket to poll, `drain` after it fires,
    `close` at the end. The same three methods as the PostgreSQL listener."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.sock: socket.socket | None = None
        self.path: str | None = None

    def fileno_or_none(self) -> int | None:
        if self.sock is None:
            try:
                self.sock = self._bind()
            except OSError as e:
                logger.warning(
                    "cannot make a wake-up socket in %s (%s): polling for new jobs", self.folder, e
                )
                return None
        return self.sock.fileno()

    def _bind(self) -> socket.socket:
        self.folder.mkdir(mode=0o777, exist_ok=True)
        path = os.path.join(self.folder, f"{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(path)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.path = path
        return sock

    def drain(self) -> None:
        while self.sock is not None:
            try:
                if not self.sock.recv(4096):
                    return
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno != errno.EINTR:
                    return

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            self.path = None


_wakers: dict[Path, Waker] = {}


def waker_for(database: str) -> Waker | None:
    folder = folder_for(database)
    if folder is None:
        return None
    waker = _wakers.get(folder)
    if waker is None:
        waker = _wakers[folder] = Waker(folder)
    return waker
