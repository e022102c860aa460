"""Executor processes and the dispatch of claimed jobs to them.

Jobs run in child processes so that the worker can stop one that ignores its timeout (or an
operator's cancel) by killing that child alone, and so that a crash in task code never takes
the worker down. The worker sends one job per message; the child sends each outcome back the
moment the attempt ends, before it gives back the job's slot, so an outcome is never held where
a crash can lose it. Through the slots of a shared array the child shows which jobs it has
started and since when: deadlines are enforced from outside, and after a crash the worker
knows which jobs were running (failed attempts) and which it never started (handed back
untouched). An executor runs one sync job at a time, or up to `async_slots` coroutines of
`async def` tasks on one event loop (jobs.executor_loop), never both at once.
"""

import dataclasses
import functools
import logging
import multiprocessing
import os
import pickle
import select
import signal
import struct
import threading
import time
import uuid
from collections import deque
from datetime import UTC, datetime, timedelta
from multiprocessing import forkserver, resource_tracker

from .executor_loop import (
    LEASES,
    RELEASE_UP_TO,
    TAKEN,
    ExecutorLoop,
    lease_holds,
    new_status,
    started_jobs,
)
from .limits import RATE_SLACK_TO_WAIT

logger = logging.getLogger(__name__)

# How often the child checks that its worker is alive and its job's lease still holds.
WATCH_INTERVAL = 0.05
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
# Seconds a closing executor is given to take the rest of what was written to it.
CLOSE_TIMEOUT = 2.0

# Dispatch: a job waits behind another in an executor only when both are known short.
SHORT_JOB = 0.005  # seconds: a task whose average attempt is below this is "short"
PREFETCH_BUDGET = 0.02  # seconds of short work that may wait behind an executor's current job
MAX_PREFETCH = 64  # jobs that may wait behind an executor's current job
SEEN_BEFORE_SHORT = 3  # attempts of a task seen before it may count as short


def mp_context():
    # Executors are forked from a fork server that has Django set up (jobs.forkserver), not
    # spawned: each one shares that memory instead of importing Django again. The fork server
    # is a fresh process, so no database connection or worker thread is ever forked.
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["jobs.forkserver"])
    return ctx


class StopFlag:
    """Set once by the worker when it stops; its executors read it before every job.

    Shared memory, not a multiprocessing Event: reading it takes no lock and no system call.
    """

    def __init__(self):
        self._value = mp_context().RawValue("b", 0)

    def set(self):
        self._value.value = 1

    def is_set(self) -> bool:
        return bool(self._value.value)


class StoppedBeforeStart(Exception):
    """The worker was asked to stop before this executor could start; it was not started."""


class Executor:
    """The worker's handle on one child process."""

    def __init__(
        self, index: int, worker_id: str, stop_flag, settings_module: str | None, async_slots=1
    ):
        ctx = mp_context()
        self.index = index
        self.async_slots = async_slots
        self.conn, child_conn = ctx.Pipe()
        # [seq of the job in slot 0 (IDLE when none), monotonic time it started,
        #  monotonic time until which the worker's last lease renewal holds,
        #  highest seq the child has taken (started), highest seq it must no longer start,
        #  then (seq, start) of slots 1 .. async_slots - 1]: see jobs.executor_loop.
        self.status = ctx.RawArray("d", new_status(async_slots))
        # Held by the child while it takes the next job, and by the worker while it takes
        # back the jobs waiting here: a job is either started by the child or taken back.
        self.taking = ctx.Lock()
        self.process = ctx.Process(
            target=child_main,
            args=(child_conn, self.status, self.taking, stop_flag, worker_id, settings_module),
            name=f"jobsite-executor-{index}",
            daemon=True,
        )
        # The child is born with SIGINT and SIGTERM blocked and ignores them before it
        # unblocks them: a signal to the whole process group (Ctrl-C, systemd, docker stop)
        # while it boots stays with the worker, which stops its executors in order.
        # multiprocessing unblocks both signals after starting its resource tracker, so that
        # one is started first. The fork server is started with them blocked too: it keeps
        # that mask for good (a group signal must not take it, and with it its executors,
        # down), and every executor it forks is born with it.
        resource_tracker.ensure_running()
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            if stop_flag.is_set():  # checked with the signals held off: no race
                child_conn.close()
                self.conn.close()
                raise StoppedBeforeStart
            forkserver.ensure_running()
            self.process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        child_conn.close()
        self.channel = Channel(self.conn)
        # Outcomes read while closing, handed over by the next `receive`.
        self._received: list = []
        # seq -> Claimed, in the order sent; the child runs them in this order.
        self.inflight: dict[int, object] = {}
        # seq -> estimated seconds of a known-short job here; None for any other job.
        self.estimates: dict[int, float | None] = {}
        # seqs of the jobs in flight here that are coroutines (async def tasks).
        self.coroutines: set[int] = set()
        self._queued = 0.0  # sum of the known estimates
        self._unknown = 0  # jobs here not known to be short
        # The pipe failed: the child is gone or going. The worker replaces it.
        self.broken = False
        # Outcomes received: an executor that dies before its first one counts towards a
        # crash streak, which slows down restarts.
        self.completed = 0

    def leases_hold_until(self, moment: float):
        self.status[LEASES] = moment

    @property
    def pid(self):
        return self.process.pid

    @property
    def sentinel(self):
        return self.process.sentinel

    @property
    def idle(self) -> bool:
        return not self.inflight

    def only_short(self) -> bool:
        return not self._unknown

    def holds_sync(self) -> bool:
        """Whether a sync job is in flight here (then no coroutine may join it)."""
        return len(self.coroutines) < len(self.inflight)

    def free_async_slots(self) -> int:
        if self.broken or self.holds_sync():
            return 0
        return max(0, self.async_slots - len(self.inflight))

    def queued_seconds(self) -> float:
        return self._queued

    def _forget(self, seq):
        if seq in self.estimates:
            old = self.estimates.pop(seq)
            if old is None:
                self._unknown -= 1
            else:
                self._queued -= old

    def _remember(self, seq, estimate):
        self._forget(seq)
        self.estimates[seq] = estimate
        if estimate is None:
            self._unknown += 1
        else:
            self._queued += estimate

    def send(self, seq: int, claimed, estimate: float | None, coroutine=False):
        """Hand over one job. A job for an idle child goes out at once; jobs queued behind
        another go out SEND_EVERY at a time, and the rest when the dispatch round ends
        (`flush`): one write for several jobs."""
        idle = not self.inflight
        self.inflight[seq] = claimed
        self._remember(seq, estimate)
        if coroutine:
            self.coroutines.add(seq)
        self.channel.queue(_dumps((seq, *_job_codec().flat(claimed))))
        if idle or self.channel.queued >= SEND_EVERY:
            self.flush()

    @property
    def unsent(self) -> bool:
        """Bytes wait for the pipe to take them: the worker's loop waits for it to be writable."""
        return self.channel.unsent

    def flush(self):
        """Write what the pipe takes now of the jobs sent here (the rest waits in `unsent`); a
        broken pipe marks it broken (the jobs in flight here are then settled as for a crash)."""
        try:
            self.channel.flush()
        except OSError:  # BrokenPipeError included
            self.broken = True

    def cancel(self, seq: int):
        """Ask the child to cancel the coroutine of job `seq` (its outcome comes back as for
        any job)."""
        self.channel.queue(_dumps((-seq,)))
        self.flush()

    def take_back_waiting(self) -> list:
        """Take back the jobs sent here that the child has not started, in order; the child
        will answer "released" for them and start none of them."""
        if not self.inflight:
            return []
        with self.taking:
            taken = self.status[TAKEN]
            self.status[RELEASE_UP_TO] = float(max(self.inflight))
        back = [seq for seq in self.inflight if seq > taken]
        running = self.running()
        if running is not None:
            self._remember(running[0], None)  # not short after all: nothing queues behind it
        return [self.take(seq) for seq in sorted(back)]

    def take(self, seq: int):
        """The job `seq` is settled: no longer in flight here."""
        self._forget(seq)
        self.coroutines.discard(seq)
        return self.inflight.pop(seq, None)

    def clear(self):
        self.inflight.clear()
        self.coroutines.clear()
        self.estimates.clear()
        self._queued, self._unknown = 0.0, 0

    def receive(self) -> list:
        """Every (seq, Ran) the child has sent so far; marks the executor broken at EOF."""
        results, self._received = self._received, []
        try:
            for message in self.channel.read():
                seq, *values = pickle.loads(message)
                results.append((seq, _ran_codec().build(values)))
                self.completed += 1
        except pickle.UnpicklingError:
            self.broken = True
        if self.channel.closed:
            self.broken = True
        return results

    def running(self):
        """(seq, started_monotonic) of the job running now, or None (of the oldest of the
        coroutines running here)."""
        started = self.started()
        if not started:
            return None
        seq = min(started)
        return seq, started[seq]

    def started(self) -> dict[int, float]:
        """seq -> started_monotonic of every job in flight here that the child has started."""
        return {seq: at for seq, at in started_jobs(self.status).items() if seq in self.inflight}

    def alive(self):
        return self.process.is_alive()

    def kill(self) -> list:
        """Stop the child at once; returns the outcomes it had already sent."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        results = self.receive()
        self.conn.close()
        return results

    def close(self, timeout: float = CLOSE_TIMEOUT):
        """Ask the child to exit once it has answered what it was sent.

        What the pipe does not take at once is written for up to `timeout` seconds, reading
        the child's outcomes meanwhile (kept for the next `receive`), so that neither side
        waits on the other; a child still not told by then is killed by the caller.
        """
        self.channel.queue(_dumps(None))
        deadline = time.monotonic() + timeout
        while not self.broken:
            self.flush()
            left = deadline - time.monotonic()
            if not self.unsent or left <= 0:
                return
            if self.channel.wait(min(left, 0.05)):
                self._received += self.receive()

    def exit_description(self) -> str:
        """How the child ended, in words: "was killed by SIGSEGV", "exited with code 3"."""
        code = self.process.exitcode
        if code is None:
            return "stopped answering"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"was killed by {name}"
        return f"exited with code {code}"


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


# Jobs queued behind a running one are written to its executor this many at a time.
SEND_EVERY = 8
# Bytes read from an executor's pipe at once: hundreds of outcomes of short jobs.
READ_SIZE = 1 << 16
_SIZE = struct.Struct("!i")
_LARGE_SIZE = struct.Struct("!Q")


def _messages(buffer: bytearray) -> list[bytes]:
    """Take the complete messages off the front of `buffer` (multiprocessing's framing: a
    signed 4-byte big-endian length, or -1 and an 8-byte one, then the bytes)."""
    messages, start, end = [], 0, len(buffer)
    while end - start >= 4:
        (size,) = _SIZE.unpack_from(buffer, start)
        header = 4
        if size == -1:
            if end - start < 12:
                break
            (size,) = _LARGE_SIZE.unpack_from(buffer, start + 4)
            header = 12
        if end - start - header < size:
            break
        messages.append(bytes(buffer[start + header : start + header + size]))
        start += header + size
    del buffer[:start]
    return messages


def _framed(message: bytes) -> bytes:
    """A message as Connection.recv_bytes() reads it."""
    if len(message) < 0x7FFFFFFF:
        return _SIZE.pack(len(message)) + message
    return _SIZE.pack(-1) + _LARGE_SIZE.pack(len(message)) + message


def _dumps(value) -> bytes:
    # Plain pickle over send_bytes: the per-message set-up of multiprocessing's own pickler
    # costs more than the message itself for small jobs.
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class _Flat:
    """A dataclass as a flat list of plain values, for the messages between worker and executor.

    UUIDs travel as their 16 bytes and aware datetimes as microseconds since the epoch:
    pickling the objects themselves (their classes, state dicts and time zones) cost more than
    the rest of a message. Values of any other type (an id kept as text) travel as they are.
    """

    def __init__(self, cls, uuids, moments):
        self.cls = cls
        self.names = tuple(f.name for f in dataclasses.fields(cls))
        self.uuids = tuple(self.names.index(name) for name in uuids)
        self.moments = tuple(self.names.index(name) for name in moments)

    def flat(self, obj) -> list:
        values = [getattr(obj, name) for name in self.names]
        for i in self.uuids:
            if type(values[i]) is uuid.UUID:
                values[i] = values[i].bytes
        for i in self.moments:
            value = values[i]
            if type(value) is datetime and value.tzinfo is not None:
                values[i] = (value - _EPOCH) // _MICROSECOND
        return values

    def build(self, values):
        for i in self.uuids:
            if type(values[i]) is bytes:
                values[i] = uuid.UUID(bytes=values[i])
        for i in self.moments:
            if type(values[i]) is int:
                values[i] = _EPOCH + timedelta(microseconds=values[i])
        return self.cls(*values)


@functools.cache
def _job_codec() -> _Flat:
    from .db import Claimed  # not at import: an executor imports this before Django is set up

    return _Flat(Claimed, ("id", "lease_id"), ("started_at", "enqueued_at"))


@functools.cache
def _ran_codec() -> _Flat:
    from .outcome import Ran

    return _Flat(Ran, ("job_id",), ("started_at", "finished_at"))


def _die_with_parent() -> int:
    """Have the kernel SIGKILL this process when its parent dies (Linux PR_SET_PDEATHSIG).

    An executor that outlived its worker would run on while another worker recovers its jobs:
    the same job twice at the same time. The parent is the fork server, which exits as soon as
    the worker is gone (once no process holds the worker's end of its "alive" pipe: the
    executor closes its copy here). Returns the parent's pid for the fallback check.
    """
    alive = forkserver._forkserver._forkserver_alive_fd
    if alive is not None:
        os.close(alive)
        forkserver._forkserver._forkserver_alive_fd = None
        forkserver._forkserver._forkserver_address = None
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the watchdog's parent check still applies
    if os.getppid() != parent:
        os._exit(70)  # the worker died before the kernel was told
    return parent


def child_main(conn, status, taking, stop_flag, worker_id, settings_module):
    """Entry point of an executor process."""
    # The worker decides when its children stop; a Ctrl-C or a SIGTERM sent to the whole
    # process group must not kill a job half-way. The signals were blocked since birth.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    parent = _die_with_parent()
    if settings_module:
        os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    import django
    from django.apps import apps

    if not apps.ready:  # the fork server could not set Django up; the error shows here
        django.setup()
    from django.db import connections

    from .reports import start_live_writer

    start_live_writer()
    executor = ExecutorLoop(
        conn,
        status,
        taking,
        stop_flag,
        worker_id,
        codecs=(_job_codec(), _ran_codec()),
        dumps=_dumps,
        tidy=functools.partial(_tidy_connections, connections),
    )

    def watchdog():
        while True:
            time.sleep(WATCH_INTERVAL)
            if os.getppid() != parent:
                os._exit(70)  # the worker (or its fork server) is gone; others recover its jobs
            for running in list(executor.running.values()):
                if not lease_holds(running, status):
                    # The worker stalled and could not renew: another worker may recover this
                    # job any moment, and it must not run in two places at once.
                    os._exit(75)
            executor.watch_loop()

    threading.Thread(target=watchdog, name="executor-watchdog", daemon=True).start()
    try:
        executor.serve()
    except (BrokenPipeError, EOFError, OSError):
        return  # the worker is gone
    finally:
        connections.close_all()


def _tidy_connections(connections):
    """Drop connections a task broke, so the next job starts with a working one."""
    for conn in connections.all(initialized_only=True):
        if conn.in_atomic_block:
            # A task left a transaction open; do not let it leak into the next job.
            conn.close()
        elif conn.errors_occurred and conn.connection is not None and not conn.is_usable():
            conn.close()


class Dispatcher:
    """Hands claimed jobs to executors: a sync job to an idle one, or behind known-short sync
    jobs only; a coroutine to an executor holding no sync job and a free async slot.

    A job that can start nowhere now is handed back (see `dispatch`), so a job the database
    shows as running is running, or starts within a dispatch round trip.
    """

    def __init__(self, executors):
        self.executors = executors
        self.ready = deque()
        self.seq = 0
        # task path -> [average attempt seconds (EWMA), attempts seen]
        self.durations: dict[str, list] = {}
        # Average of recent attempts of any sync task: how much to claim ahead.
        self.recent = 0.02
        # task path -> whether it is an async def task (run as a coroutine)
        self.coroutine_tasks: dict[str, bool] = {}
        # Share of coroutines among recent claims (EWMA): which slots a claim can expect to
        # fill, sync or async, before the jobs' tasks are known. It starts at none: claims
        # are sized for sync jobs (never more than can start) until coroutines are seen.
        self.async_share = 0.0

    def is_coroutine(self, task_path: str) -> bool:
        known = self.coroutine_tasks.get(task_path)
        if known is None:
            from .runner import is_coroutine_task

            known = self.coroutine_tasks[task_path] = is_coroutine_task(task_path)
        return known

    def add(self, claimed):
        """A job just claimed: ready to go out."""
        coroutine = 1.0 if self.is_coroutine(claimed.task_path) else 0.0
        self.async_share = 0.8 * self.async_share + 0.2 * coroutine
        self.ready.append(claimed)

    def observe(self, task_path: str, duration: float):
        duration = max(duration, 0.0)
        seen = self.durations.get(task_path)
        if seen is None:
            self.durations[task_path] = [duration, 1]
        else:
            seen[0] = 0.8 * seen[0] + 0.2 * duration
            seen[1] += 1
        if not self.coroutine_tasks.get(task_path):
            self.recent = 0.9 * self.recent + 0.1 * duration

    def short_estimate(self, task_path: str) -> float | None:
        """The expected seconds of an attempt of a task known to be short, else None."""
        seen = self.durations.get(task_path)
        if seen is None or seen[1] < SEEN_BEFORE_SHORT or seen[0] >= SHORT_JOB:
            return None
        return seen[0]

    def _prefetch(self) -> int:
        if self.recent >= SHORT_JOB:
            return 0
        return min(MAX_PREFETCH, int(PREFETCH_BUDGET / max(self.recent, 1e-5)))

    def room(self) -> int:
        """How many more jobs could start now or queue behind known-short ones: the sync and
        async room weighed by the recent share of coroutines."""
        prefetch = self._prefetch()
        free = free_async = 0
        for e in self.executors:
            if e.broken:
                continue
            if e.idle:
                free += 1 + prefetch
            elif prefetch and e.only_short():
                free += max(0, 1 + prefetch - len(e.inflight))
            free_async += e.free_async_slots()
        return self._blend(free, free_async) - len(self.ready)

    def total_capacity(self) -> int:
        return self._blend(
            (1 + self._prefetch()) * len(self.executors),
            sum(e.async_slots for e in self.executors),
        )

    def has_free_place(self) -> bool:
        """Whether a claimed job can start now without waiting for a batch's worth of room:
        an executor is idle, or (when most jobs are coroutines) has a free async slot, since
        coroutines free their slots one by one."""
        coroutines = self.async_share >= 0.5
        return any(
            not e.broken and (e.idle or (coroutines and e.free_async_slots()))
            for e in self.executors
        )

    def _blend(self, sync: int, coroutines: int) -> int:
        return round(self.async_share * coroutines + (1 - self.async_share) * sync)

    def _coroutine_target(self):
        fits = [e for e in self.executors if e.free_async_slots() > 0]
        return min(fits, key=lambda e: len(e.inflight), default=None)

    def _target(self, estimate):
        idle = next((e for e in self.executors if e.idle and not e.broken), None)
        if idle is not None or estimate is None:
            return idle
        fits = [
            e
            for e in self.executors
            if not e.broken
            and e.only_short()
            and len(e.inflight) <= MAX_PREFETCH
            and e.queued_seconds() + estimate <= PREFETCH_BUDGET
        ]
        return min(fits, key=lambda e: len(e.inflight), default=None)

    def dispatch(self) -> list:
        """Send what can start; return the claimed jobs that must be handed back unstarted.

        Jobs go out in claim (priority) order. One that fits nowhere — no executor is idle,
        and no executor runs only known-short jobs that will be done within the prefetch
        budget — is handed back rather than left waiting in `running`.
        """
        waiting = deque()
        sync_full = async_full = False  # a job of that kind found no place: nor will the next
        while self.ready and not (sync_full and async_full):
            claimed = self.ready.popleft()
            coroutine = self.is_coroutine(claimed.task_path)
            estimate = target = None
            if coroutine and not async_full:
                target = self._coroutine_target()
                async_full = target is None
            elif not coroutine and not sync_full:
                # A job under a rate limit with a short slack must begin at once (jobs.limits):
                # never queued behind.
                at_once = claimed.start_by and claimed.rate_slack < RATE_SLACK_TO_WAIT
                estimate = None if at_once else self.short_estimate(claimed.task_path)
                target = self._target(estimate)
                sync_full = target is None
            if target is None:
                waiting.append(claimed)
                continue
            self.seq += 1
            target.send(self.seq, claimed, estimate, coroutine)
        waiting.extend(self.ready)
        self.ready = waiting
        for executor in self.executors:
            executor.flush()
        if not self.ready:
            return []
        now = time.monotonic()
        if any(self._drains_soon(e, now) for e in self.executors):
            # An executor runs only known-short jobs, none of them late: it is free within the
            # prefetch budget, so what waits here starts within the dispatch round trip.
            return []
        give_back = list(self.ready)
        self.ready.clear()
        return give_back

    @staticmethod
    def _drains_soon(executor, now) -> bool:
        if executor.broken or not executor.only_short():
            return False
        running = executor.running()
        return running is None or now - running[1] <= PREFETCH_BUDGET
