"""An executor's side of the pipe: it takes the jobs it is sent, in order, and runs them.

A sync task runs in the executor's main thread, alone: the dispatcher never sends one beside
coroutines. An `async def` task runs as a coroutine on the executor's one event loop, in a
second thread, beside up to the worker's `--async-concurrency` others. The main thread only
reads the pipe, so a message (a job, a cancel) is taken while coroutines run.

Every job started takes one slot of the shared status array (its seq and its start time)
before it starts, and gives it back only after its outcome is written to the pipe: after a
crash the worker knows from the slots which jobs had started (failed attempts) and hands back
the others. Taking a slot happens under the `taking` lock, the same lock the worker holds
while it takes back jobs not yet started: a job is either started here or taken back.

The worker may send coroutines before a slot is free for them (it claims ahead for slots it
expects to free soon, jobs.pool.dispatcher): they wait here, in order, and the loop thread
starts the next one the moment a slot is given back, with no round trip to the worker between
one coroutine's end and the next one's start. A waiting coroutine has not started: a crash
hands it back, a stop (the worker's stop flag) hands it back at the next loop tick, and a
cancel makes it fail as cancelled when its turn comes, without running its body.
"""

import asyncio
import logging
import os
import pickle
import queue
import sys
import threading
import time
from collections import deque

from . import forked
from .errors import CANCELLED_BY_OPERATOR, JobCancelled, JobTimeout
from .errortext import for_log
from .pool.wire import Inbox

logger = logging.getLogger(__name__)

IDLE = -1.0
# The slots of the status array an executor shares with its worker (all floats):
FIRST_SEQ = 0  # seq of the job in slot 0, or IDLE
FIRST_START = 1  # monotonic time that job started
LEASES = 2  # monotonic time until which the worker's last lease renewal holds
TAKEN = 3  # highest seq the child has taken (started)
RELEASE_UP_TO = 4  # highest seq the child must no longer start
# Before stopping a child from outside, the worker asks it to write its running jobs' progress
# and log lines (jobs.pool.child): it counts REPORTS_ASKED up, the child sets REPORTS_WRITTEN
# to the count it answered.
REPORTS_ASKED = 5
REPORTS_WRITTEN = 6
HEADER = 7  # then (seq, start) of slots 1 .. async_slots - 1, in pairs
# A coroutine that keeps the event loop this long without yielding is logged.
LOOP_BLOCK_THRESHOLD = 0.5
LOOP_TICK = 0.1
# An event loop that stops this many times within LOOP_RESTARTS_WINDOW seconds cannot run (a
# job closed the file descriptors it polls, say): the process ends, as for a closed loop.
LOOP_RESTARTS_AT_MOST = 5
LOOP_RESTARTS_WINDOW = 1.0


def new_status(slots: int) -> list[float]:
    """The initial status array of an executor with `slots` slots (1 for sync jobs only)."""
    header = [0.0] * HEADER
    header[FIRST_SEQ] = IDLE
    return header + [IDLE, 0.0] * (slots - 1)


def slot_count(status) -> int:
    return (len(status) - HEADER) // 2 + 1


def slot_fields(slot: int) -> tuple[int, int]:
    """Indexes of a slot's seq and start time in the status array."""
    return (FIRST_SEQ, FIRST_START) if slot == 0 else (HEADER + 2 * slot - 2, HEADER + 2 * slot - 1)


def started_jobs(status) -> dict[int, float]:
    """seq -> monotonic start of every job started and not yet answered, per the slots."""
    started = {}
    for slot in range(slot_count(status)):
        seq_at, start_at = slot_fields(slot)
        seq = status[seq_at]
        if seq != IDLE:
            started[int(seq)] = status[start_at]
    return started


def timeout_ends(claimed, began: float) -> float | None:
    """When (monotonic) an attempt of `claimed` begun at `began` runs past its timeout; None
    without one. An attempt running then is stopped, and one that ends after it timed out
    whatever it returned or raised: the rule for sync jobs and coroutines alike."""
    return began + claimed.timeout if claimed.timeout else None


def timed_out(claimed) -> JobTimeout:
    return JobTimeout(f"ran longer than its timeout of {claimed.timeout:g}s")


def lease_holds(claimed, status) -> bool:
    """Whether the job's lease is sure to hold now: from its claim, or the last renewal."""
    return time.monotonic() < max(claimed.lease_until, status[LEASES])


class ExecutorLoop:
    """Reads jobs off the pipe and runs them; `serve` returns when the worker says stop."""

    def __init__(self, conn, status, taking, stop_flag, worker_id, *, codecs, dumps, tidy):
        self.conn, self.status, self.taking = conn, status, taking
        self.inbox = Inbox(conn)
        self.stop_flag, self.worker_id = stop_flag, worker_id
        self.job_codec, self.ran_codec = codecs
        self.dumps, self.tidy = dumps, tidy
        forked.owned_here()
        self.free_slots: queue.SimpleQueue = queue.SimpleQueue()
        for slot in range(slot_count(status)):
            self.free_slots.put(slot)
        # seq -> Claimed of each job started whose outcome is not yet sent (the watchdog's).
        self.running: dict[int, object] = {}
        self.send_lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread = None
        self.controls: dict[int, Control] = {}  # seq -> its coroutine's, in the loop only
        # Coroutines handed to the loop and not yet done; all_done is set when there are none.
        self.active = 0
        self.active_lock = threading.Lock()
        self.all_done = threading.Event()
        self.all_done.set()
        self.last_tick = time.monotonic()
        self.blocker = None  # (seq, claimed) of the coroutine seen holding the loop
        # Coroutines sent here and not yet started, in order; and the seqs of those among them
        # cancelled meanwhile. Both belong to the loop thread.
        self.waiting: deque = deque()
        self.cancelled_waiting: set[int] = set()

    # --- the main thread: the pipe -------------------------------------------------------

    def serve(self):
        from .runner import is_coroutine_task, run_attempt

        while True:
            try:
                message = pickle.loads(self.inbox.next())
            except (EOFError, OSError):
                return
            if message is None:
                break
            seq, *values = message
            if seq < 0:
                self._call_in_loop(self._cancel, -seq)
                continue
            claimed = self.job_codec.build(values)
            if is_coroutine_task(claimed.task_path):
                with self.active_lock:
                    self.active += 1
                    self.all_done.clear()
                self._call_in_loop(self._enqueue, seq, claimed)
                continue
            slot = self.free_slots.get()  # one is given back as soon as an outcome is out
            if not self._take(seq, claimed, slot):
                self._send(seq, _released(claimed))
                continue
            began = self.status[slot_fields(slot)[1]]
            ran = run_attempt(claimed, worker_id=self.worker_id, began=began)
            self._answer(seq, slot, ran)
            self.tidy(claimed)
        # Asked to stop: what runs here finishes first (the worker kills us past its timeout).
        self.all_done.wait()

    def _take(self, seq, claimed, slot) -> bool:
        """Start the job in `slot` (True), or not at all (False: the slot stays free)."""
        with self.taking:
            # A job whose lease may be gone belongs to whoever recovers it, and one the worker
            # took back runs elsewhere: never start those.
            start = not (
                self.stop_flag.is_set()
                or seq <= self.status[RELEASE_UP_TO]
                or not lease_holds(claimed, self.status)
            )
            if start:
                seq_at, start_at = slot_fields(slot)
                self.status[start_at] = time.monotonic()
                self.status[seq_at] = float(seq)  # from here on, the job counts as started
                self.status[TAKEN] = float(seq)
                self.running[seq] = claimed
        if not start:
            self.free_slots.put(slot)
        return start

    def _answer(self, seq, slot, ran):
        self._send(seq, ran)  # out before the slot is given back
        self.running.pop(seq, None)
        self.status[slot_fields(slot)[0]] = IDLE
        self.free_slots.put(slot)

    def _send(self, seq, ran):
        forked.leave_if_forked()  # never a forked copy's answer on the worker's pipe
        data = self.dumps((seq, *self.ran_codec.flat(ran)))
        with self.send_lock:
            self.conn.send_bytes(data)

    def _call_in_loop(self, fn, *args):
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            self.loop_thread = threading.Thread(
                target=self._run_loop, name="executor-loop", daemon=True
            )
            self.loop_thread.start()
        self.loop.call_soon_threadsafe(fn, *args)

    # --- the loop thread: coroutines ------------------------------------------------------

    def _run_loop(self):
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._tick)
        stops: deque = deque(maxlen=LOOP_RESTARTS_AT_MOST)
        while True:  # nothing here ever stops the loop: the process ends with it running
            # A job can stop it all the same: loop.stop(), or SystemExit or KeyboardInterrupt
            # raised in a task of its own that nobody awaits, which asyncio lets out of the
            # loop. Left stopped, every coroutine in it would wait in `running` for ever.
            try:
                self.loop.run_forever()
            except BaseException as exc:
                why = f"{type(exc).__name__} raised in a task a job started"
            else:
                why = "a job called loop.stop()"
            if self.loop.is_closed():
                # Nothing left to run its coroutines on: end the process, and the worker
                # settles each of its jobs as for any executor that dies.
                logger.error("this executor's event loop was closed (%s): exiting", why)
                os._exit(70)
            stops.append(time.monotonic())
            if len(stops) == stops.maxlen and stops[-1] - stops[0] < LOOP_RESTARTS_WINDOW:
                logger.error(
                    "this executor's event loop stopped %d times within %gs (%s): exiting",
                    len(stops),
                    LOOP_RESTARTS_WINDOW,
                    why,
                )
                os._exit(70)
            logger.warning("this executor's event loop stopped (%s): started again", why)

    def _tick(self):
        now = time.monotonic()
        held = now - self.last_tick - LOOP_TICK
        blocker, self.blocker = self.blocker, None
        if held > LOOP_BLOCK_THRESHOLD and blocker is not None:
            seq, claimed = blocker
            logger.warning(
                "job %s (%s) held the event loop of its executor for %.1fs without awaiting: "
                "the %d coroutine(s) beside it waited",
                claimed.id,
                for_log(claimed.task_path),
                held,
                max(0, len(self.controls) - 1),
            )
        self.last_tick = now
        if self.waiting and self.stop_flag.is_set():
            self._release_waiting()
        self.loop.call_later(LOOP_TICK, self._tick)

    def watch_loop(self):
        """Called by the watchdog thread: note which coroutine holds the loop too long (the
        one whose frames are on the loop thread's stack)."""
        if self.loop_thread is None or self.blocker is not None:
            return
        if time.monotonic() - self.last_tick - LOOP_TICK <= LOOP_BLOCK_THRESHOLD:
            return
        frame = sys._current_frames().get(self.loop_thread.ident)
        while frame is not None:
            if frame.f_code is ExecutorLoop._attempt.__code__:
                seq = frame.f_locals.get("seq")
                claimed = self.running.get(seq)
                if claimed is not None:
                    self.blocker = (seq, claimed)
                return
            frame = frame.f_back

    def _enqueue(self, seq, claimed):
        self.waiting.append((seq, claimed))
        self._start_waiting()

    def _start_waiting(self):
        """Start waiting coroutines, in order, while a slot is free."""
        while self.waiting:
            try:
                slot = self.free_slots.get_nowait()
            except queue.Empty:
                return
            seq, claimed = self.waiting.popleft()
            if self._take(seq, claimed, slot):
                self._spawn(seq, claimed, slot)
            else:
                self.cancelled_waiting.discard(seq)
                self._send(seq, _released(claimed))
                self._ended()

    def _release_waiting(self):
        """The worker stops: hand back every coroutine not started yet."""
        while self.waiting:
            seq, claimed = self.waiting.popleft()
            self.cancelled_waiting.discard(seq)
            self._send(seq, _released(claimed))
            self._ended()

    def _ended(self):
        with self.active_lock:
            self.active -= 1
            if not self.active:
                self.all_done.set()

    def _spawn(self, seq, claimed, slot):
        control = self.controls[seq] = Control()
        control.task = self.loop.create_task(self._attempt(seq, claimed, slot, control))
        if seq in self.cancelled_waiting:
            self.cancelled_waiting.discard(seq)
            control.stop("cancelled")  # before its body: it fails as cancelled, unrun
        control.deadline = timeout_ends(claimed, self.status[slot_fields(slot)[1]])
        if control.deadline is not None:
            wait = control.deadline - time.monotonic()
            control.timer = self.loop.call_later(wait, control.stop, "timeout")

    def _cancel(self, seq):
        control = self.controls.get(seq)
        if control is not None:
            control.stop("cancelled")
        elif any(waiting == seq for waiting, _ in self.waiting):
            self.cancelled_waiting.add(seq)

    async def _attempt(self, seq, claimed, slot, control):
        ran = None
        try:
            try:
                ran = await run_coroutine(claimed, self.worker_id, control)
            except BaseException as exc:  # never expected: the job is answered all the same
                ran = _broken(claimed, exc)
            self._answer(seq, slot, ran)
            self._start_waiting()  # the next one takes the slot at once
        finally:
            if control.timer is not None:
                control.timer.cancel()
            del self.controls[seq]
            if not self.controls:
                await _release_connections()
            elif ran is None or ran.kind != "ok":
                # A failure may have broken the connection the coroutines share (in Django's
                # sync thread): drop it there if so, so the next job gets a working one.
                await _sync(self.tidy)
            self._ended()


class Control:
    """How a coroutine job may be stopped: its task, its timeout's timer and deadline, and why
    it was stopped. Only the task's own code is ever cancelled, never the steps around it that
    record its outcome (`inside`); a stop that comes before the task's code begins keeps
    that code from running at all."""

    __slots__ = ("task", "timer", "deadline", "reason", "inside", "cancelled")

    def __init__(self):
        self.task = self.timer = self.deadline = self.reason = None
        self.inside = self.cancelled = False

    def code_ended(self):
        """The task's code returned or raised. Past its deadline it timed out, though the timer
        may never have run to cancel it: a coroutine that does not await holds the loop."""
        self.inside = False
        late = self.deadline is not None and time.monotonic() > self.deadline
        if late and self.reason is None:
            self.reason = "timeout"

    def stop(self, reason):
        if self.reason is None:
            self.reason = reason
            if self.inside:
                self.cancelled = True
                self.task.cancel()


def _broken(claimed, exc):
    from .outcome import RanKind
    from .runner import _failed
    from .states import DeadLetterReason

    return _failed(claimed, exc, RanKind.ERROR, None, stop_reason=DeadLetterReason.UNRECOVERABLE)


def _released(claimed):
    from .outcome import Ran, RanKind

    return Ran(claimed.id, RanKind.RELEASED)


async def run_coroutine(claimed, worker_id, control):
    """`runner.run_attempt` for an `async def` task: the coroutine is awaited here, and a
    cancel of it by its timeout or an operator fails the attempt as JobTimeout or
    JobCancelled. Steps that may use the database run in Django's sync thread."""
    from asgiref.sync import sync_to_async

    from .compat import reaches_anyone, task_started
    from .outcome import Ran
    from .runner import prepare

    attempt = prepare(claimed, worker_id=worker_id)
    if isinstance(attempt, Ran):
        return attempt
    try:
        if reaches_anyone(task_started, attempt.sender, logging.INFO):
            call_args = await sync_to_async(attempt.begin)()
        else:
            call_args = attempt.begin()
        try:
            control.inside = True
            try:
                if control.reason is not None:  # stopped before its code began
                    raise asyncio.CancelledError
                value = await attempt.task.func(*call_args, **attempt.kwargs)
            finally:
                forked.leave_if_forked(sys.exc_info()[1])
                control.code_ended()
                if control.cancelled:
                    asyncio.current_task().uncancel()  # the cancel was ours, and is spent
            if control.reason == "timeout":
                raise _stopped(claimed, "timeout")  # it returned anyway, past its timeout
        except BaseException as exc:
            ran = await sync_to_async(attempt.failed)(_failure(claimed, control, exc))
        else:
            ran = attempt.ended(value)
        if attempt.report is not None:  # its writes use the database: not on the loop
            await sync_to_async(attempt.close)()
        if attempt.announces(ran):
            await sync_to_async(attempt.announce)(ran)
        return ran
    except BaseException as exc:
        return attempt.broke(exc)


def _failure(claimed, control, exc) -> BaseException:
    """What an attempt whose code raised `exc` failed with: past its timeout, JobTimeout
    whatever it raised; a CancelledError of ours (an operator's cancel), JobCancelled; else
    `exc` itself, as for one the task's own code raised."""
    if isinstance(exc, JobTimeout) or control.reason is None:
        return exc
    if control.reason != "timeout" and not isinstance(exc, asyncio.CancelledError):
        return exc
    error = _stopped(claimed, control.reason)
    error.__cause__ = exc
    return error


def _stopped(claimed, reason) -> Exception:
    if reason == "timeout":
        return timed_out(claimed)
    return JobCancelled(CANCELLED_BY_OPERATOR)


async def _release_connections():
    """Close the database connections the coroutines used (in Django's sync thread) once
    none runs: an idle executor holds none, and a broken one never reaches the next job."""
    from .task_connections import release_all

    await _sync(release_all)


async def _sync(fn):
    """Run `fn` in Django's sync thread, where the async ORM runs its queries."""
    from asgiref.sync import sync_to_async

    await sync_to_async(fn)()
