"""The worker's handle on one executor process.

The child sends each outcome back the moment the attempt ends, before it gives back the
job's slot, so an outcome is never held where a crash can lose it. An executor runs one sync
job at a time, or up to `async_slots` coroutines of `async def` tasks on one event loop
(jobs.executor_loop), never both at once. Coroutines sent beyond its free slots wait in the
child, in order, and start as slots free (`waiting`).
"""

import multiprocessing
import os
import pickle
import signal
import time
from multiprocessing import forkserver, resource_tracker
from typing import Any

from ..executor_loop import (
    LEASES,
    RELEASE_UP_TO,
    REPORTS_ASKED,
    REPORTS_WRITTEN,
    TAKEN,
    new_status,
    started_jobs,
)
from ..logs import worker_logging
from .child import STOP_SIGNALS, child_main
from .process_tree import kill_tree
from .wire import SEND_EVERY, Channel, _dumps, _job_codec, _ran_codec

# Seconds a closing executor is given to take the rest of what was written to it.
CLOSE_TIMEOUT = 2.0
# Seconds an executor about to be stopped is given to write its jobs' last progress and lines
# (it answers within about 50 ms plus one write over its own connection), counted from the ask:
# the worker's loop waits meanwhile, and the job runs on. An executor whose task holds the
# interpreter, or whose database does not answer, loses them, as in a crash.
REPORTS_TIMEOUT = 0.5
# How often the worker looks whether they are written.
REPORTS_LOOK = 0.005


def mp_context():
    # Executors are forked from a fork server that has Django set up (jobs.forkserver), not
    # spawned: each one shares that memory instead of importing Django again. The fork server
    # is a fresh process, so no database connection or worker thread is ever forked.
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["jobs.forkserver"])
    return ctx


def forget_fork_server() -> None:
    """Stop the fork server and forget it, so that the next executor start makes a new one
    (no public way to do this: multiprocessing's own state, as in jobs.pool.child). The
    executors it forked die with it (they are bound to it), and the worker restarts them."""
    server: Any = forkserver._forkserver
    with server._lock:
        alive = server._forkserver_alive_fd
        pid = server._forkserver_pid
        address = server._forkserver_address
        server._forkserver_alive_fd = None
        server._forkserver_pid = None
        server._forkserver_address = None
    if alive is not None:
        os.close(alive)  # a fork server exits once its "alive" pipe closes
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass  # already gone and reaped
    if isinstance(address, str) and not address.startswith("\0"):
        try:
            os.unlink(address)
        except OSError:
            pass


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
        # Its slots are named in jobs.executor_loop (FIRST_SEQ, LEASES, TAKEN...).
        self.status = ctx.RawArray("d", new_status(async_slots))
        # Held by the child while it takes the next job, and by the worker while it takes
        # back the jobs waiting here: a job is either started by the child or taken back.
        self.taking = ctx.Lock()
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
            server: Any = forkserver._forkserver
            self.process = ctx.Process(
                target=child_main,
                args=(
                    child_conn,
                    self.status,
                    self.taking,
                    stop_flag,
                    worker_id,
                    settings_module,
                    worker_logging(),
                    # The child's parent must be this fork server: one killed right after the
                    # fork leaves the child to init, which must then not run on by itself.
                    server._forkserver_pid,
                ),
                name=f"jobsite-executor-{index}",
                daemon=True,
            )
            self.process.start()
        except BaseException:
            # The fork server died under the start (an OOM kill): nothing is left open.
            child_conn.close()
            self.conn.close()
            raise
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
        # seq -> monotonic time sent, of the jobs in flight here that are coroutines.
        self.coroutines: dict[int, float] = {}
        self._queued = 0.0  # sum of the known estimates
        self._unknown = 0  # jobs here not known to be short
        # The pipe failed: the child is gone or going. The worker replaces it.
        self.broken = False
        # A coroutine here was asked to stop (its timeout, or a cancel) and has not ended:
        # if it outlasts the cancel grace, this process is stopped with whatever runs in it,
        # so no coroutine joins it meanwhile (set by the supervisor each round).
        self.unwinding = False
        # Outcomes received: an executor that dies before its first one counts towards a
        # crash streak, which slows down restarts.
        self.completed = 0
        # When (monotonic) the worker, about to stop it, asked it to write its jobs' reports.
        self.reports_asked_at: float | None = None

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

    def waiting(self) -> list[int]:
        """seqs of the coroutines sent here that the child has not started yet (it starts
        them in order, so they are the ones past the last it took)."""
        taken = self.status[TAKEN]
        return [seq for seq in self.coroutines if seq > taken]

    def waited(self, now) -> float:
        """How long the oldest coroutine waiting here has waited since it was sent."""
        waiting = self.waiting()
        return now - self.coroutines[min(waiting)] if waiting else 0.0

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
            self.coroutines[seq] = time.monotonic()
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
        self.coroutines.pop(seq, None)
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

    def ask_for_reports(self):
        """Ask the child to write what its running jobs reported so far (their progress and log
        lines), as the worker is about to stop it; `wait_for_reports` waits for the answer.
        An ask while an earlier one is unanswered changes nothing (the child is slow, or cannot
        answer: it is not waited for again); one after an answer asks anew for what came since."""
        if self.reports_pending() or not self.process.is_alive():
            return
        self.reports_asked_at = time.monotonic()
        self.status[REPORTS_ASKED] += 1

    def reports_pending(self) -> bool:
        return self.status[REPORTS_WRITTEN] < self.status[REPORTS_ASKED]

    def wait_for_reports(self) -> bool:
        """Until the child has written what `ask_for_reports` asked for, at most until
        REPORTS_TIMEOUT after the ask; whether it did (True also when it was not asked)."""
        if self.reports_asked_at is None:
            return True
        deadline = self.reports_asked_at + REPORTS_TIMEOUT
        while self.reports_pending():
            if time.monotonic() >= deadline or not self.process.is_alive():
                return False
            time.sleep(REPORTS_LOOK)
        return True

    def end(self):
        """Kill the child if it still runs, with the processes its jobs started, and reap it."""
        if self.process.is_alive() and self.process.pid is not None:
            kill_tree(self.process.pid)
        self.process.join(5)

    def kill(self) -> list:
        """Stop the child at once; returns the outcomes it had already sent."""
        self.end()
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
