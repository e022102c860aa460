"""Executor processes: each runs claimed jobs one after another, supervised by the worker.

Jobs run in child processes so that the worker can stop one that ignores its timeout (or an
operator's cancel) by killing that child alone, and so that a crash in task code never takes
the worker down. The worker sends chunks of claimed jobs; the child reports results in small
batches. Through a shared array it always shows which job it is running and since when, so
deadlines are enforced from outside without a message per job start.
"""

import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections import deque

logger = logging.getLogger("jobs.worker")

IDLE = -1.0
FLUSH_INTERVAL = 0.002


def mp_context():
    return multiprocessing.get_context("spawn")


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


class Executor:
    """The worker's handle on one child process."""

    def __init__(self, index: int, worker_id: str, stop_event):
        ctx = mp_context()
        self.index = index
        self.conn, child_conn = ctx.Pipe()
        # [seq of the job running now (IDLE when none), monotonic time it started,
        #  monotonic time until which the worker's last lease renewal holds]
        self.status = ctx.RawArray("d", [IDLE, 0.0, 0.0])
        self.process = ctx.Process(
            target=child_main,
            args=(child_conn, self.status, stop_event, worker_id),
            name=f"jobsite-executor-{index}",
            daemon=True,
        )
        self.process.start()
        child_conn.close()
        # seq -> Claimed, in the order sent; the child runs them in this order.
        self.inflight: dict[int, object] = {}

    def leases_hold_until(self, moment: float):
        self.status[2] = moment

    @property
    def pid(self):
        return self.process.pid

    @property
    def sentinel(self):
        return self.process.sentinel

    def send(self, items):
        """items: [(seq, Claimed)]"""
        for seq, claimed in items:
            self.inflight[seq] = claimed
        self.conn.send_bytes(_dumps(items))

    def receive(self):
        """The next batch of [(seq, Ran)] from the child; EOFError once it is gone."""
        return pickle.loads(self.conn.recv_bytes())

    def running(self):
        """(seq, started_monotonic) of the job running now, or None."""
        seq = self.status[0]
        if seq == IDLE:
            return None
        started = self.status[1]
        seq = int(seq)
        return (seq, started) if seq in self.inflight else None

    def alive(self):
        return self.process.is_alive()

    def kill(self):
        """Stop the child at once; returns the result batches it had already sent."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        batches = []
        try:
            while self.conn.poll():
                batches.append(self.receive())
        except (EOFError, OSError):
            pass
        self.conn.close()
        return batches

    def close(self):
        """Ask the child to exit after its current chunk."""
        try:
            self.conn.send_bytes(_dumps(None))
        except (BrokenPipeError, OSError):
            pass


def _dumps(value) -> bytes:
    # Plain pickle over send_bytes: the per-message set-up of multiprocessing's own pickler
    # costs more than the message itself for small jobs.
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _die_with_parent() -> int:
    """Have the kernel SIGKILL this process when the worker dies (Linux PR_SET_PDEATHSIG).

    An executor that outlived its worker would run on while another worker recovers its jobs:
    the same job twice at the same time. Returns the worker's pid for the fallback check.
    """
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the flusher's parent check still applies
    if os.getppid() != parent:
        os._exit(70)  # the worker died before the kernel was told
    return parent


def _lease_holds(claimed, status) -> bool:
    """Whether the job's lease is sure to hold now: from its claim, or the last renewal."""
    return time.monotonic() < max(claimed.lease_until, status[2])


def child_main(conn, status, stop_event, worker_id):
    """Entry point of an executor process."""
    parent = _die_with_parent()
    # The worker decides when its children stop; a Ctrl-C or a SIGTERM sent to the whole
    # process group must not kill a job half-way.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
    import django

    django.setup()
    from django.db import connections

    from .executor import Ran, run_attempt

    lock = threading.Lock()
    buffer = []
    done = threading.Event()

    def flush():
        with lock:
            if buffer:
                conn.send_bytes(_dumps(buffer))
                buffer.clear()

    current = [None]

    def flusher():
        # Results of jobs that finished before a long one must not wait for it.
        while not done.wait(FLUSH_INTERVAL):
            if os.getppid() != parent:
                os._exit(70)  # the worker is gone; others will recover its jobs
            running = current[0]
            if running is not None and not _lease_holds(running, status):
                # The worker stalled and could not renew: another worker may recover this job
                # any moment, and it must not run in two places at once.
                os._exit(75)
            try:
                flush()
            except (BrokenPipeError, OSError):
                return

    threading.Thread(target=flusher, name="result-flusher", daemon=True).start()
    try:
        while True:
            try:
                message = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                return
            if message is None:
                return
            for seq, claimed in message:
                # A job whose lease may be gone belongs to whoever recovers it: never start it.
                if stop_event.is_set() or not _lease_holds(claimed, status):
                    with lock:
                        buffer.append((seq, Ran(claimed.id, "released")))
                    continue
                if claimed.timeout:
                    flush()  # nothing may be lost if the worker kills us for this one
                status[1] = time.monotonic()
                status[0] = float(seq)
                current[0] = claimed
                ran = run_attempt(claimed, worker_id=worker_id)
                current[0] = None
                status[0] = IDLE
                with lock:
                    buffer.append((seq, ran))
                # Batching only pays for tiny jobs; and once the worker is stopping, a result
                # must be out before the worker's deadline may kill us.
                if stop_event.is_set() or time.monotonic() - status[1] > FLUSH_INTERVAL:
                    flush()
                _tidy_connections(connections)
            flush()
    finally:
        done.set()
        try:
            flush()
        except (BrokenPipeError, OSError):
            pass
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
    """Hands claimed jobs to executors, least loaded first, a chunk at a time."""

    def __init__(self, executors):
        self.executors = executors
        self.ready = deque()
        self.seq = 0
        # Average job duration in seconds (EWMA): short jobs are sent in larger chunks.
        self.avg_duration = 0.05

    def capacity_per_executor(self):
        prefetch = int(0.01 / max(self.avg_duration, 1e-5))
        return 1 + max(0, min(prefetch, 255))

    def total_capacity(self):
        return self.capacity_per_executor() * len(self.executors)

    def room(self):
        cap = self.capacity_per_executor()
        return sum(max(0, cap - len(e.inflight)) for e in self.executors) - len(self.ready)

    def observe(self, duration):
        self.avg_duration = 0.8 * self.avg_duration + 0.2 * max(duration, 0.0)

    def dispatch(self):
        cap = self.capacity_per_executor()
        while self.ready:
            executor = min(self.executors, key=lambda e: len(e.inflight))
            free = cap - len(executor.inflight)
            if free <= 0:
                return
            # Spread a batch over the executors rather than filling the first one.
            share = max(1, min(free, -(-len(self.ready) // len(self.executors))))
            items = []
            for _ in range(min(share, len(self.ready))):
                self.seq += 1
                items.append((self.seq, self.ready.popleft()))
            executor.send(items)
