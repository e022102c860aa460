"""Executor supervision: starting the worker's executors, and stopping and replacing them.

An executor is stopped when it died (a crash), when a job in it ran past its deadline or past
its cancel's grace, when the worker lost a job's lease, or when the worker shuts down. Every
stop settles that executor's jobs the same way (`_stop`): the outcomes it had sent count, the
jobs it had started end from outside, the others were never started and may run elsewhere.
Restarts of an executor that keeps dying before it finishes a job slow down.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from .. import outcome as oc
from ..errors import (
    CANCELLED_BY_OPERATOR,
    ExecutorCrashed,
    JobCancelled,
    WorkerLost,
    WorkerShutdown,
)
from ..errortext import for_log
from ..executor_loop import timed_out, timeout_ends
from ..outcome import RanKind
from .child import LEASE_LAPSED
from .dispatcher import AHEAD_LIMIT, PREFETCH_BUDGET, Dispatcher
from .executor import (
    REPORTS_LOOK,
    REPORTS_TIMEOUT,
    Executor,
    StopFlag,
    StoppedBeforeStart,
    forget_fork_server,
)

if TYPE_CHECKING:
    from ..db.records import Claimed

logger = logging.getLogger(__name__)

# Restarts of an executor that keeps dying before it finishes a job slow down: the first
# CRASH_STREAK_FREE restarts are immediate, then the delay doubles from RESTART_DELAY up to
# MAX_RESTART_DELAY.
CRASH_STREAK_FREE = 2
RESTART_DELAY = 0.25
# Failed executor starts in a row after which the fork server is replaced.
START_FAILURES_BEFORE_NEW_FORK_SERVER = 3
MAX_RESTART_DELAY = 10.0
# While a job with a timeout has not been seen to start, the worker looks at least this often
# (or once per timeout, if longer).
UNSEEN_START_LOOK = 0.01


@dataclass
class Held:
    """A job the worker has claimed and not yet finished."""

    claimed: "Claimed"
    cancel_requested_at: float | None = None  # monotonic
    cancel_sent: bool = False  # a coroutine's cancel went to its executor


@dataclass
class Stopped:
    """The jobs of a stopped executor, sorted out (see `Supervisor._stop`)."""

    # (claimed, Ran) the child had sent before it went: they count, nothing re-runs.
    answered: list = field(default_factory=list)
    # (claimed, Ran) of the jobs it had started, ended from outside.
    cut_short: list = field(default_factory=list)
    # Jobs it never started, in order: they may run elsewhere.
    unstarted: list = field(default_factory=list)


class Supervisor:
    """Keeps `concurrency` executors running for a worker.

    `held` is the worker's own map of the jobs it holds (job id -> Held), read here; `settle`
    is called with the Stopped of each executor stopped.
    """

    def __init__(
        self,
        *,
        worker_id: str,
        settings_module: str | None,
        async_slots: int,
        cancel_grace: float,
        held: dict,
        settle: Callable[[Stopped], None],
    ):
        self.worker_id = worker_id
        self.settings_module = settings_module
        self.async_slots = async_slots
        self.cancel_grace = cancel_grace
        self.held = held
        self.settle = settle
        self.executors: list[Executor] = []
        self.dispatcher = Dispatcher(self.executors)
        # Set when the worker stops; its executors read it before every job.
        self.stop_flag = StopFlag()
        # The worker is stopping: no executor is started or restarted.
        self.stopping = False
        self.leases_hold_until = 0.0
        # executor index -> monotonic time its replacement may start (after crashes)
        self.restarts: dict[int, float] = {}
        self.crash_streaks: dict[int, int] = {}
        # Executor starts that failed in a row (the fork server gone or unreachable).
        self.start_failures = 0

    # --- starting ---------------------------------------------------------------------------

    def start_all(self, concurrency: int):
        for index in range(concurrency):
            self._start(index)

    def _start(self, index):
        """Start executor `index`, unless the worker is stopping (then it stays down)."""
        if self.stopping:
            return
        try:
            executor = Executor(
                index,
                self.worker_id,
                self.stop_flag,
                self.settings_module,
                async_slots=self.async_slots,
            )
        except StoppedBeforeStart:
            return
        except (OSError, EOFError) as exc:
            # The fork server was killed between the check that it runs and the request to
            # fork (an OOM killer picks it: it holds the preloaded Django); the next try finds
            # it gone and starts a new one. One that runs but cannot be reached (its socket
            # removed by a temporary-file cleaner) is replaced after a few tries.
            self.start_failures += 1
            replaced = self.start_failures >= START_FAILURES_BEFORE_NEW_FORK_SERVER
            if replaced:
                self.start_failures = 0
                forget_fork_server()
            logger.warning(
                "could not start executor %d (%s: %s): %s; trying again in %.2fs",
                index,
                type(exc).__name__,
                exc,
                "starting a new fork server" if replaced else "its fork server is gone",
                RESTART_DELAY,
            )
            self.restarts[index] = time.monotonic() + RESTART_DELAY
            return
        self.start_failures = 0
        executor.leases_hold_until(self.leases_hold_until)
        self.executors.append(executor)

    def start_due(self, now):
        """Start the replacements whose crash back-off is over."""
        for index, due in list(self.restarts.items()):
            if self.stopping:
                self.restarts.clear()
                return
            if now >= due:
                del self.restarts[index]
                self._start(index)

    def leases_renewed(self, until: float):
        """Every lease the worker holds is sure to hold until `until` (monotonic)."""
        self.leases_hold_until = until
        for executor in self.executors:
            executor.leases_hold_until(until)

    # --- stopping ---------------------------------------------------------------------------

    def died(self, executor):
        """An executor's process is gone or its pipe broke: its started jobs crashed."""
        # Reap it first, so that its exit code (or signal) is known.
        results = executor.kill()
        how = executor.exit_description()
        started = [executor.inflight[seq] for seq in sorted(executor.started())]
        job = ""
        if len(started) == 1:
            job = f" running job {started[0].id} ({for_log(started[0].task_path)})"
        elif started:
            job = f" running {len(started)} jobs"
        if executor.process.exitcode == LEASE_LAPSED:
            # The worker could not renew in time (its database unreachable, or it stalled):
            # lost with the lease, as if another worker had recovered it; no crash of the task.
            logger.warning(
                "executor process %s stopped%s: the lease lapsed before the worker could renew it",
                executor.pid,
                job,
            )
            self._stop(
                executor,
                failure=WorkerLost(
                    "the worker could not renew the job's lease in time (its database "
                    "unreachable, or the worker stalled); the attempt was stopped"
                ),
                kind=RanKind.LOST,
                results=results,
            )
            return
        logger.error("executor process %s %s%s", executor.pid, how, job)
        self._stop(
            executor,
            failure=ExecutorCrashed(f"the process running the job {how}"),
            kind=RanKind.CRASHED,
            results=results,
            crashed=True,
        )

    def abandon(self, claimed):
        """The worker lost the lease of `claimed`: it must not start or go on with it."""
        if self.dispatcher.withdraw(claimed):
            return
        for executor in list(self.executors):
            for seq, inflight in list(executor.inflight.items()):
                if inflight is claimed:
                    # The job belongs to whoever recovered it. Stop its executor; the other
                    # jobs there go back in line.
                    executor.take(seq)
                    # Its reports are not asked for: writes fenced by the lost lease land nowhere.
                    self._stop(executor, failure=WorkerLost("lease lost"), last_reports=False)
                    return

    def ask_for_last_reports(self):
        """Ask every executor running a job to write its jobs' progress and log lines now, as
        the shutdown timeout is about to end (the shutdown then waits for what is left)."""
        _last_reports(self.executors)

    def shutdown(self, *, hard: bool = False):
        """Stop every executor: each first answers what it was sent, within its close timeout;
        jobs still running then are interrupted, their last lines written first. With `hard`
        (a second signal), at once: each is killed now, and what it had answered still counts."""
        self.stopping = True
        self.stop_flag.set()
        self.restarts.clear()
        if not hard:
            for executor in self.executors:
                executor.close()  # in order: each exits once it has answered what it holds
            _last_reports(self.executors)
            for executor in self.executors:  # they write in parallel: one wait for them all
                executor.wait_for_reports()
                _settled(executor)
        for executor in list(self.executors):
            if not hard and not executor.started():
                executor.process.join(2)
            self._stop(
                executor,
                failure=WorkerShutdown("the worker shut down before the job finished"),
                kind=RanKind.INTERRUPTED,
                last_reports=False,
            )

    def kill_remaining(self):
        """Kill each executor still running: a worker's last step on its way out, whatever
        failed before it (one left running would keep the exiting process waiting for good)."""
        for executor in self.executors:
            executor.end()

    def _stop(
        self,
        executor,
        *,
        failure,
        kind=RanKind.ERROR,
        culprit=None,
        results=None,
        crashed=False,
        last_reports=True,
    ):
        """Stop an executor and settle its jobs: those it had started end with `failure` (only
        the job `culprit` when given: the others it had started fail as what they were asked
        to stop for themselves, if they were, else as ExecutorCrashed), those it never started
        go to `settle` as unstarted; then start a new executor, unless the worker is stopping.
        Unless `results` are given (it is gone already) or `last_reports` is false, it is first
        given a moment to write its jobs' last progress and log lines."""
        if results is None:
            if last_reports:
                _last_reports([executor])
                executor.wait_for_reports()
                _settled(executor)
            results = executor.kill()
        stopped = Stopped()
        for seq, ran in results:
            claimed = executor.take(seq)
            if claimed is not None:
                stopped.answered.append((claimed, ran))
        started = executor.started()  # read once the child is gone: final
        beside = executor.inflight.get(culprit)
        for seq, claimed in sorted(executor.inflight.items()):
            if claimed.id not in self.held:
                continue  # already settled (timed out, abandoned)
            if seq not in started:
                stopped.unstarted.append(claimed)
                continue
            ago = max(0.0, time.monotonic() - started[seq])
            why, how = failure, kind
            if beside is not None and seq != culprit:
                # A job asked to stop itself (its own timeout, a cancel) fails as that; only
                # the others are bystanders of the culprit's stop.
                own = self._asked_of(claimed, started[seq])
                if own is not None:
                    why = own
                else:
                    why = ExecutorCrashed(
                        f"its executor was stopped to stop job {beside.id} beside it ({failure})"
                    )
                    how = RanKind.CRASHED
            ran = oc.failure_from_outside(
                claimed,
                why,
                kind=how,
                worker_id=self.worker_id,
                started_at=oc.now() - timedelta(seconds=ago),
            )
            stopped.cut_short.append((claimed, ran))
        executor.clear()
        self.executors.remove(executor)
        self.settle(stopped)
        if not self.stopping:
            self._restart(executor, crashed)

    def _restart(self, executor, crashed):
        index = executor.index
        streak = 0
        if crashed:
            streak = self.crash_streaks.get(index, 0) + 1 if executor.completed == 0 else 1
        self.crash_streaks[index] = streak
        if streak > CRASH_STREAK_FREE:
            delay = min(MAX_RESTART_DELAY, RESTART_DELAY * 2 ** (streak - CRASH_STREAK_FREE - 1))
            logger.warning(
                "executor %d died %d times in a row before finishing a job; "
                "starting the next one in %.2fs",
                index,
                streak,
                delay,
            )
            self.restarts[index] = time.monotonic() + delay
        else:
            self._start(index)

    # --- deadlines --------------------------------------------------------------------------

    def deadline(self, claimed) -> float | None:
        """When (monotonic) a started job past its timeout is stopped from outside: at its
        timeout for a sync job; a coroutine, cancelled in its executor at its timeout, gets
        the cancel grace on top to unwind."""
        if claimed.began is None or (ends := timeout_ends(claimed, claimed.began)) is None:
            return None
        coroutine = self.dispatcher.is_coroutine(claimed.task_path)
        return ends + (self.cancel_grace if coroutine else 0)

    def enforce_deadlines(self, now):
        """Stop every executor running a job past its deadline or its cancel's grace, each
        once it has written its jobs' last lines (all asked at once, `_last_reports`)."""
        overdue = []  # (executor, seq, failure)
        for executor in list(self.executors):
            executor.unwinding = False
            if executor.coroutines:
                overdue += self._enforce_coroutine_deadlines(executor, now)
                continue
            started = executor.started()
            if not started:
                continue
            seq = min(started)
            if len(executor.inflight) > 1 and now - started[seq] > PREFETCH_BUDGET:
                # A job thought short runs long: the jobs waiting behind it go elsewhere.
                self.dispatcher.put_back(executor.take_back_waiting())
            failure = self._overdue(executor, seq, started[seq], now)
            if failure is not None:
                overdue.append((executor, seq, failure))
        if not overdue:
            return
        # Those due to be stopped before this round is over are asked now too: by their turn
        # they have answered, or are known not to (then they are not waited for).
        stopping = {executor for executor, _, _ in overdue}
        soon = now + REPORTS_TIMEOUT
        _last_reports([e for e in self.executors if e not in stopping and self._due(e, soon)])
        _last_reports(stopping)
        # Each is stopped as soon as it has written (or cannot): one that answers at once does
        # not wait for a stuck one beside it.
        while overdue:
            for item in [item for item in overdue if _reports_settled(item[0])]:
                executor, seq, failure = item
                self._stop(executor, culprit=seq, failure=failure, last_reports=False)
                overdue.remove(item)
            if overdue:
                time.sleep(REPORTS_LOOK)

    def _enforce_coroutine_deadlines(self, executor, now) -> list:
        started = executor.started()
        if executor.waited(now) > AHEAD_LIMIT and len(started) >= executor.async_slots:
            # Its slots free later than expected: what waits there for them goes elsewhere.
            # (With a slot free, the child is only slow to take the next: nothing to gain.)
            self.dispatcher.put_back(executor.take_back_waiting())
        for seq in executor.coroutines:  # started or waiting in the child
            held = self.held.get(executor.inflight[seq].id)
            if held and held.cancel_requested_at is not None and not held.cancel_sent:
                executor.cancel(seq)  # the coroutine alone; it answers as cancelled
                held.cancel_sent = True
        executor.unwinding = any(
            self._asked_to_stop(executor, seq, began, now) for seq, began in started.items()
        )
        if executor.unwinding and executor.waiting():
            # It may be stopped with what runs in it: what has not started goes elsewhere.
            self.dispatcher.put_back(executor.take_back_waiting())
        for seq, began in sorted(started.items()):
            failure = self._overdue(executor, seq, began, now)
            if failure is not None:
                return [(executor, seq, failure)]
        return []

    def _asked_to_stop(self, executor, seq, began, now) -> bool:
        """Whether started coroutine `seq` was cancelled, by its timeout or an operator, and
        is unwinding (within the cancel grace)."""
        claimed = executor.inflight[seq]
        held = self.held.get(claimed.id)
        ends = timeout_ends(claimed, began)
        return bool(held and held.cancel_sent) or (ends is not None and now > ends)

    def _overdue(self, executor, seq, began, now) -> Exception | None:
        """What started job `seq` fails with if it ran past its deadline or past its cancel's
        grace (its executor is then stopped), logged; else None."""
        claimed = executor.inflight[seq]
        claimed.began = began
        failure = self._stopped_for(claimed, now)
        if isinstance(failure, JobCancelled):
            logger.warning(
                "job %s (%s) did not stop within %gs of its cancel: stopping it",
                claimed.id,
                for_log(claimed.task_path),
                self.cancel_grace,
            )
        elif failure is not None:
            logger.warning(
                "job %s (%s) ran past its %gs timeout: stopping it",
                claimed.id,
                for_log(claimed.task_path),
                claimed.timeout,
            )
        return failure

    def _due(self, executor, moment) -> bool:
        """Is a job started in `executor` to be stopped from outside by `moment` (past its
        deadline, or past its cancel's grace)?"""
        for seq, began in executor.started().items():
            claimed = executor.inflight[seq]
            claimed.began = began
            if self._stopped_for(claimed, moment) is not None:
                return True
        return False

    def _asked_of(self, claimed, began) -> Exception | None:
        """What started job `claimed` was asked to stop for, if it was: past its timeout,
        JobTimeout; its cancel requested, JobCancelled."""
        ends = timeout_ends(claimed, began)
        if ends is not None and time.monotonic() > ends:
            return timed_out(claimed)
        held = self.held.get(claimed.id)
        if held is not None and held.cancel_requested_at is not None:
            return JobCancelled(CANCELLED_BY_OPERATOR)
        return None

    def _stopped_for(self, claimed, now) -> Exception | None:
        """Why started job `claimed` is to be stopped now from outside (past its deadline, or
        past its cancel's grace), or None."""
        held = self.held.get(claimed.id)
        deadline = self.deadline(claimed)
        if deadline is not None and now > deadline:
            return timed_out(claimed)
        if (
            held
            and held.cancel_requested_at is not None
            and now - held.cancel_requested_at > self.cancel_grace
        ):
            return JobCancelled(CANCELLED_BY_OPERATOR)
        return None

    def wait_limit(self, now, timeout: float) -> float:
        """`timeout` cut to the next moment something here is due: a deadline, a look at
        prefetched jobs, a restart."""
        for held in self.held.values():
            claimed = held.claimed
            deadline = self.deadline(claimed)
            if deadline is not None:
                timeout = min(timeout, max(0.0, deadline - now))
            elif claimed.timeout:
                # No deadline yet: its start is not seen (it shows in the executor's status,
                # which wakes nobody). Look again within its timeout, or a job shorter than
                # the poll interval could run past its timeout and succeed before anyone looked.
                timeout = min(timeout, max(claimed.timeout, UNSEEN_START_LOOK))
        if self.dispatcher.prefetching():
            timeout = min(timeout, PREFETCH_BUDGET)
        for executor in self.executors:
            if executor.coroutines and executor.waiting():
                left = AHEAD_LIMIT - executor.waited(now)
                # Past the limit, what waits is taken back once the slots are all taken
                # (_enforce_coroutine_deadlines); while one is free the child is only slow to
                # start the next (its loop is busy), so look again a limit later, not at once.
                timeout = min(timeout, left + 0.005 if left > 0 else AHEAD_LIMIT)
        if self.restarts and not self.stopping:
            timeout = min(timeout, max(0.0, min(self.restarts.values()) - now))
        return timeout

    def free_slots(self) -> dict:
        """What the console shows of this worker's room: executors free for a sync job, and
        free coroutine slots (none in an executor held back for a sync job)."""
        live = [e for e in self.executors if not e.broken]
        held = self.dispatcher.held_for_sync()
        return {
            "free_sync_slots": sum(1 for e in live if e.idle),
            "free_async_slots": sum(e.free_async_slots() for e in live if e is not held),
        }


def _last_reports(executors) -> None:
    """Ask each of `executors` running a job to write its jobs' progress and log lines, as it
    is about to be stopped (`Executor.wait_for_reports` waits for the answer)."""
    for executor in executors:
        if executor.started():
            executor.ask_for_reports()


def _reports_settled(executor) -> bool:
    """Has `executor` written what it was asked for, or is it known not to (no answer within
    REPORTS_TIMEOUT of the ask, or gone)? Says so in the log when it did not write."""
    waiting = executor.reports_pending() and executor.alive()
    if waiting and time.monotonic() < executor.reports_asked_at + REPORTS_TIMEOUT:
        return False
    return _settled(executor)


def _settled(executor) -> bool:
    if executor.reports_pending() and executor.alive():
        logger.warning(
            "executor process %s did not write its jobs' last progress and log lines within "
            "%gs (its task holds the interpreter, or the database does not answer): what they "
            "reported since its last write is lost",
            executor.pid,
            REPORTS_TIMEOUT,
        )
    return True
