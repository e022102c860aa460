"""The worker: claims due jobs, runs them in supervised executor processes, records outcomes.

One thread, one loop: wait for something to happen (a result from an executor, a NOTIFY from
PostgreSQL, a signal, a timer), then react. Writes for an attempt carry the lease of its claim,
so a worker that lost a lease (it stalled and another recovered the job) changes nothing.
"""

import logging
import os
import select
import signal
import socket
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import wait

from django.db import (
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
    connection,
)
from django.db.backends.signals import connection_created
from django.utils import timezone

from . import breaker, db, logformat, maintenance, observers, schedules, startup_signals
from . import outcome as oc
from .compat import task_backends
from .db import pooler
from .errors import ExecutorCrashed, JobCancelled, JobTimeout, WorkerLost, WorkerShutdown
from .errortext import for_log
from .limits import LimitsCache
from .models import Job, PausedQueue, WorkerNode
from .pool import PREFETCH_BUDGET, Dispatcher, Executor, StopFlag, StoppedBeforeStart
from .states import FAILED_ATTEMPT, AttemptOutcome, JobState
from .timing import DEFAULTS as DEFAULT_TIMING

logger = logging.getLogger(__name__)

DB_ERRORS = (OperationalError, InterfaceError, DatabaseError)

# The level each outcome is logged at. A job handed back unstarted is routine while running
# (a prefetched job found no free executor), notable (INFO) only when a stopping worker hands
# its claims back.
FINISH_LOG_LEVELS = {
    JobState.SUCCEEDED: logging.DEBUG,
    JobState.RETRYING: logging.WARNING,
    JobState.DEAD_LETTER: logging.ERROR,
    JobState.CANCELLED: logging.WARNING,
    JobState.PENDING: logging.DEBUG,
}

# Restarts of an executor that keeps dying before it finishes a job slow down: the first
# CRASH_STREAK_FREE restarts are immediate, then the delay doubles from RESTART_DELAY up to
# MAX_RESTART_DELAY.
CRASH_STREAK_FREE = 2
RESTART_DELAY = 0.25
MAX_RESTART_DELAY = 10.0


@dataclass(kw_only=True)
class WorkerConfig:
    queues: list[str] = field(default_factory=list)  # [] = every queue
    concurrency: int = 2
    # Coroutines of async def tasks each executor runs at once (OPTIONS["ASYNC_CONCURRENCY"]).
    async_concurrency: int = 10
    burst: bool = False
    max_jobs: int | None = None
    worker_id: str | None = None
    shutdown_timeout: float = 30.0
    heartbeat_seconds: float = DEFAULT_TIMING.heartbeat_seconds
    lease_seconds: float = DEFAULT_TIMING.lease_seconds
    poll_interval: float | None = None  # seconds between polls; default by database
    # A cancelled running job gets this long to return by itself.
    cancel_grace: float = DEFAULT_TIMING.cancel_grace_seconds
    batch_size: int = 500
    # "json": every finished attempt is logged (successes at INFO), as jobs.logformat writes.
    log_format: str = "text"

    def __post_init__(self):
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.async_concurrency < 1:
            raise ValueError("async-concurrency must be at least 1")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ValueError("max-jobs must be at least 1")
        if self.shutdown_timeout < 0:
            raise ValueError("shutdown-timeout must be >= 0")
        if self.heartbeat_seconds <= 0 or self.lease_seconds <= self.heartbeat_seconds:
            raise ValueError("LEASE_SECONDS must be longer than HEARTBEAT_SECONDS (both > 0)")


def default_worker_id():
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Listener:
    """LISTEN for new-job notifications on PostgreSQL; reconnects when cut off."""

    def __init__(self, url=None):
        self.url = url  # OPTIONS["LISTEN_DATABASE_URL"]; None: the default connection's database
        self.conn = None
        self.retry_at = 0.0

    def connect(self):
        import psycopg

        if self.url:
            self.conn = psycopg.connect(self.url, autocommit=True)
        else:
            self.conn = psycopg.connect(**pooler.raw_params(connection), autocommit=True)
        self.conn.execute(f"LISTEN {db.NOTIFY_CHANNEL}")

    def fileno_or_none(self):
        if self.conn is None:
            if time.monotonic() < self.retry_at:
                return None
            try:
                self.connect()
            except Exception as e:
                logger.warning("cannot listen for new jobs (%s); polling until it works", e)
                self.conn, self.retry_at = None, time.monotonic() + 5
                return None
        return self.conn.fileno()

    def drain(self):
        try:
            for _ in self.conn.notifies(timeout=0):
                pass
        except Exception:
            self.close()
            self.retry_at = time.monotonic() + 1

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None


@dataclass
class Held:
    """A job this worker has claimed and not yet finished."""

    claimed: object
    executor: Executor | None = None
    seq: int | None = None
    cancel_requested_at: float | None = None  # monotonic
    cancel_sent: bool = False  # a coroutine's cancel went to its executor


class Worker:
    def __init__(self, config: WorkerConfig, backend_alias="default"):
        self.config = config
        self.backend = task_backends[backend_alias]
        self.worker_id = config.worker_id or default_worker_id()
        self.held: dict[uuid.UUID, Held] = {}
        # The flow-control limits in force, re-read every few seconds.
        self.limits = LimitsCache(backend_alias)
        self.finishes: list = []  # db.Finish waiting to be written
        self.claimed_total = 0
        self.processed_total = 0
        self.stopping = False
        self.stop_requested_at = None
        self.hard_stop = False
        self.signals_seen = 0
        self.executors: list[Executor] = []
        self.listener = self._listener()
        self.poll_interval = config.poll_interval or (1.0 if self.listener else 0.1)
        self.next_heartbeat = 0.0
        self.next_schedule_tick = 0.0
        self.heartbeats = 0
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.exit_code = 0
        self.last_claim_full = False
        self.leases_hold_until = 0.0
        # Slack for the executors: they must have stopped before another worker may recover.
        self.lease_margin = min(1.0, config.heartbeat_seconds / 2)
        self.unlogged_claims = 0
        self.last_claim_log = 0.0
        self.settings_module = os.environ.get("DJANGO_SETTINGS_MODULE")
        # executor index -> monotonic time its replacement may start (after crashes)
        self.restarts: dict[int, float] = {}
        self.crash_streaks: dict[int, int] = {}

    # --- lifecycle --------------------------------------------------------------------------

    def run(self) -> int:
        connection_created.connect(self._session_limits, weak=False)
        if connection.connection is not None:
            self._session_limits(None, connection)
        self.stop_event = StopFlag()
        self._install_signal_handlers()
        self.executors = []
        self.dispatcher = Dispatcher(self.executors)
        for index in range(self.config.concurrency):
            self._start_executor(index)
        self._with_db(self._register)
        queues = ", ".join(self.config.queues) or "all queues"
        logger.info(
            "worker %s started: %s, concurrency %d (async %d each), %s database, pid %d%s",
            self.worker_id,
            queues,
            self.config.concurrency,
            self.config.async_concurrency,
            connection.vendor,
            os.getpid(),
            " (burst)" if self.config.burst else "",
            extra={"event": "worker_started"},
        )
        try:
            self._loop()
        finally:
            self._shutdown()
        return self.exit_code

    def _loop(self):
        while True:
            now = time.monotonic()
            if self.stopping:
                if not self.held:
                    return
                if self.hard_stop or now - self.stop_requested_at > self.config.shutdown_timeout:
                    return
            if now >= self.next_schedule_tick and not self.stopping:
                ticked = self._with_db(schedules.tick, self.backend)
                wait = ticked.next_in if ticked else schedules.TICK_SECONDS
                observers.schedules_fired(ticked.fired if ticked else [], self.backend)
                self.next_schedule_tick = time.monotonic() + wait
            if now >= self.next_heartbeat:
                self._with_db(self._heartbeat)
                self.next_heartbeat = now + self.config.heartbeat_seconds
            self._enforce_deadlines(now)
            self._start_due_executors(now)
            claimed = self._sync()
            self._dispatch()
            if not self.held and not self.finishes and not claimed:
                if self.config.burst and not self._with_db(self._limits_hold_due_jobs):
                    logger.info("no job is due and none is running: burst done")
                    self.stopping = True
                    self.stop_requested_at = now
                    continue
                if self._max_jobs_reached():
                    logger.info("processed --max-jobs %d jobs", self.config.max_jobs)
                    self.stopping = True
                    self.stop_requested_at = now
                    continue
            self._wait(0 if claimed and self.last_claim_full else self._wait_time(now))

    def _listener(self):
        """Wake-ups by LISTEN on PostgreSQL: never through a transaction-mode pooler."""
        if connection.vendor != "postgresql":
            return None
        url = self.backend.options.get("LISTEN_DATABASE_URL")
        if url:
            return Listener(pooler.direct_listen_url(url))
        if pooler.is_pooled(connection):
            logger.warning(
                "the database is reached through a transaction-mode pooler: polling for new "
                "jobs (set OPTIONS['LISTEN_DATABASE_URL'] to a direct connection to be woken)"
            )
            return None
        return Listener()

    def _limits_hold_due_jobs(self) -> bool:
        """Are due jobs held back by a limit (a burst worker waits for them)?"""
        if not self.limits.current().limits_claims:
            return False
        due = Job.objects.ready().exclude(queue_name__in=PausedQueue.objects.values("name"))
        if self.config.queues:
            due = due.filter(queue_name__in=self.config.queues)
        return due.exists()

    def _session_limits(self, sender, connection, **kwargs):
        db.configure_worker_session(
            connection,
            lease_seconds=self.config.lease_seconds,
            heartbeat_seconds=self.config.heartbeat_seconds,
        )

    def _max_jobs_reached(self):
        return self.config.max_jobs is not None and self.claimed_total >= self.config.max_jobs

    def _wait_time(self, now):
        timeout = min(self.poll_interval, max(0.0, self.next_heartbeat - now))
        timeout = min(timeout, max(0.0, self.next_schedule_tick - now))
        timeout = min(timeout, max(0.0, self.limits.room_at() - now))  # a full rate budget
        for held in self.held.values():
            deadline = self._deadline(held.claimed)
            if deadline is not None:
                timeout = min(timeout, max(0.0, deadline - now))
        if any(len(e.inflight) > 1 and not e.coroutines for e in self.executors):
            timeout = min(timeout, PREFETCH_BUDGET)
        if self.restarts and not self.stopping:
            timeout = min(timeout, max(0.0, min(self.restarts.values()) - now))
        if self.stopping:
            timeout = min(timeout, 0.05)
        return timeout

    def _wait(self, timeout):
        """Wait up to `timeout` seconds for an outcome, a dead executor, a pipe that takes
        the rest of a job written to it, a wake-up (signal) or a NOTIFY; then serve them."""
        poller = select.poll()
        poller.register(self.wake_r.fileno(), select.POLLIN)
        pipes, sentinels = {}, {}
        for e in self.executors:
            pipes[e.conn.fileno()] = e
            poller.register(e.conn.fileno(), select.POLLIN | (select.POLLOUT if e.unsent else 0))
            sentinels[e.sentinel] = e
            poller.register(e.sentinel, select.POLLIN)
        listen_fd = self.listener.fileno_or_none() if self.listener and not self.stopping else None
        if listen_fd is not None:
            poller.register(listen_fd, select.POLLIN)
        for fd, events in poller.poll(max(0.0, timeout) * 1000):
            if fd == self.wake_r.fileno():
                self._drain_wakeups()
            elif fd == listen_fd:
                self.listener.drain()
            elif fd in pipes:
                executor = pipes[fd]
                if events & select.POLLOUT and executor in self.executors:
                    executor.flush()
                if events & ~select.POLLOUT:
                    self._from_executor(executor)
            elif fd in sentinels:
                self._from_executor(sentinels[fd], exited=True)
        # Outcomes that arrived meanwhile from the others go into the same write.
        for executor in list(self.executors):
            if executor in self.executors:
                self._drain(executor)

    # --- signals ----------------------------------------------------------------------------

    def _install_signal_handlers(self):
        signal.set_wakeup_fd(self.wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        for signum in startup_signals.release():
            self._on_signal(signum, None)

    def _on_signal(self, signum, frame):
        self.signals_seen += 1
        name = signal.Signals(signum).name
        if self.signals_seen == 1:
            self.stopping = True
            self.stop_requested_at = time.monotonic()
            self.stop_event.set()
            running = sum(1 for h in self.held.values() if h.claimed.began is not None)
            logger.info(
                "received %s: no new claims; %d running job(s) get up to %gs to finish "
                "(signal again to exit at once)",
                name,
                running,
                self.config.shutdown_timeout,
            )
        else:
            logger.warning("received %s again: stopping at once", name)
            self.hard_stop = True

    def _drain_wakeups(self):
        try:
            while self.wake_r.recv(512):
                pass
        except BlockingIOError:
            pass

    # --- claiming and results ---------------------------------------------------------------

    def _claim_limit(self):
        room = self.dispatcher.room()
        # Claim in batches: wait until half the room is free, unless a job can start now.
        if room <= 0 or (
            self.held
            and room < self.dispatcher.total_capacity() // 2
            and not self.dispatcher.has_free_place()
        ):
            return 0
        limit = min(room, self.config.batch_size)
        if self.config.max_jobs is not None:
            limit = min(limit, self.config.max_jobs - self.claimed_total)
        return max(limit, 0)

    def _sync(self, claim=True):
        """Record finished outcomes and claim the next batch, in one transaction."""
        limit = self._claim_limit() if claim and not self.stopping else 0
        if not self.finishes and not limit:
            return 0
        pending = self.finishes
        sent = time.monotonic()
        result = self._with_db(
            db.finish_and_claim,
            pending,
            worker_id=self.worker_id,
            queues=self.config.queues or None,
            limit=limit,
            lease_seconds=self.config.lease_seconds,
            limits=self.limits,
            can_begin=sum(1 for e in self.executors if e.idle and not e.broken)
            - len(self.dispatcher.ready),
        )
        if result is None:
            return 0  # the database is away; the outcomes are kept and written later
        applied, claimed = result
        self.finishes = []
        self._settle(pending, applied)
        lease_until = sent + self.config.lease_seconds - self.lease_margin
        for c in claimed:
            c.lease_until = lease_until
            if c.rate_slack:
                c.start_by = sent + c.rate_slack
            self.held[c.id] = Held(c)
            self.dispatcher.add(c)
        self.claimed_total += len(claimed)
        self._log_claims(claimed)
        self.last_claim_full = bool(limit) and len(claimed) == limit
        return len(claimed)

    def _log_claims(self, claimed):
        """One line per claim, or one summary a second when claims come thick and fast."""
        now = time.monotonic()
        self.unlogged_claims += len(claimed)
        if not self.unlogged_claims or now - self.last_claim_log < 1.0:
            return
        if self.unlogged_claims == 1 and claimed:
            c = claimed[0]
            logger.info(
                "claimed %s (job %s, attempt %d/%d)",
                for_log(c.task_path),
                c.id,
                c.attempt,
                c.max_attempts,
            )
        else:
            logger.info("claimed %d jobs", self.unlogged_claims)
        self.unlogged_claims, self.last_claim_log = 0, now

    def _from_executor(self, executor, exited=False):
        if executor not in self.executors:
            return  # replaced while this round's events were served
        self._drain(executor)
        if executor in self.executors and exited and not executor.alive():
            self._on_executor_died(executor)

    def _drain(self, executor):
        for seq, ran in executor.receive():
            self._on_result(executor, seq, ran)
        if executor.broken:
            self._on_executor_died(executor)

    def _collect(self, executor, results):
        """Outcomes a stopped executor had sent before it went: they count, nothing re-runs."""
        for seq, ran in results:
            self._on_result(executor, seq, ran)

    def _on_result(self, executor, seq, ran):
        claimed = executor.take(seq)
        if claimed is None:
            return
        held = self.held.get(claimed.id)
        if held is None:
            return  # already settled (timed out, abandoned)
        if ran.started_at and ran.finished_at:
            duration = (ran.finished_at - ran.started_at).total_seconds()
            self.dispatcher.observe(claimed.task_path, duration)
        finish = oc.decide(
            claimed,
            ran,
            worker_id=self.worker_id,
            cancel_requested=held.cancel_requested_at is not None,
        )
        self.finishes.append(finish)

    def _dispatch(self):
        for claimed in self.dispatcher.dispatch():
            self.finishes.append(oc.Outcome.released(claimed, self.worker_id))
        for executor in [e for e in self.executors if e.broken]:
            self._drain(executor)

    def _start_executor(self, index):
        """Start executor `index`, unless the worker is stopping (then it stays down)."""
        if self.stopping:
            return
        try:
            executor = Executor(
                index,
                self.worker_id,
                self.stop_event,
                self.settings_module,
                async_slots=self.config.async_concurrency,
            )
        except StoppedBeforeStart:
            return
        executor.leases_hold_until(self.leases_hold_until)
        self.executors.append(executor)

    def _start_due_executors(self, now):
        for index, due in list(self.restarts.items()):
            if self.stopping:
                self.restarts.clear()
                return
            if now >= due:
                del self.restarts[index]
                self._start_executor(index)

    def _on_executor_died(self, executor):
        # Reap it first, so that its exit code (or signal) is known.
        results = executor.kill()
        how = executor.exit_description()
        started = [executor.inflight[seq] for seq in sorted(executor.started())]
        job = ""
        if len(started) == 1:
            job = f" running job {started[0].id} ({for_log(started[0].task_path)})"
        elif started:
            job = f" running {len(started)} jobs"
        logger.error("executor process %s %s%s", executor.pid, how, job)
        self._replace_executor(
            executor,
            failure=ExecutorCrashed(f"the process running the job {how}"),
            kind="crashed",
            results=results,
            crashed=True,
        )

    def _replace_executor(
        self, executor, *, culprit=None, failure, kind="error", results=None, crashed=False
    ):
        """Stop an executor; settle the jobs it had started with `failure` (only the job
        `culprit` when given: the others it had started fail as ExecutorCrashed); hand the
        jobs it never started back to the dispatcher; start a new executor unless stopping."""
        if results is None:
            results = executor.kill()
        self._collect(executor, results)
        started = executor.started()  # read once the child is gone: final
        requeue = []
        for seq, claimed in sorted(executor.inflight.items()):
            if claimed.id not in self.held:
                continue
            if seq in started:
                began = started[seq]
                started_at = oc.now() - timedelta(seconds=max(0.0, time.monotonic() - began))
                why, how = failure, kind
                if culprit is not None and seq != culprit:
                    why = ExecutorCrashed(
                        f"its executor was stopped to stop job {executor.inflight[culprit].id} "
                        f"beside it ({failure})"
                    )
                    how = "crashed"
                ran = oc.failure_from_outside(
                    claimed, why, kind=how, worker_id=self.worker_id, started_at=started_at
                )
                held = self.held[claimed.id]
                cancel = held.cancel_requested_at is not None
                self.finishes.append(
                    oc.decide(claimed, ran, worker_id=self.worker_id, cancel_requested=cancel)
                )
            else:
                requeue.append(claimed)
        executor.clear()
        self.executors.remove(executor)
        if self.stopping:
            for claimed in requeue:
                self.finishes.append(oc.Outcome.released(claimed, self.worker_id))
            return
        self.dispatcher.ready.extendleft(reversed(requeue))
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
            self._start_executor(index)

    def _deadline(self, claimed) -> float | None:
        """When (monotonic) a started job past its timeout is stopped from outside: at its
        timeout for a sync job; a coroutine, cancelled in its executor at its timeout, gets
        the cancel grace on top to unwind."""
        if not claimed.timeout or claimed.began is None:
            return None
        grace = self.config.cancel_grace if self.dispatcher.is_coroutine(claimed.task_path) else 0
        return claimed.began + claimed.timeout + grace

    def _enforce_deadlines(self, now):
        for executor in list(self.executors):
            started = executor.started()
            if not started:
                continue
            if executor.coroutines:
                self._enforce_coroutine_deadlines(executor, started, now)
                continue
            seq = min(started)
            if len(executor.inflight) > 1 and now - started[seq] > PREFETCH_BUDGET:
                # A job thought short runs long: the jobs waiting behind it go elsewhere.
                back = executor.take_back_waiting()
                self.dispatcher.ready.extendleft(reversed(back))
            self._stop_if_overdue(executor, seq, started[seq], now)

    def _enforce_coroutine_deadlines(self, executor, started, now):
        for seq, began in sorted(started.items()):
            held = self.held.get(executor.inflight[seq].id)
            if held and held.cancel_requested_at is not None and not held.cancel_sent:
                executor.cancel(seq)  # the coroutine alone; it answers as cancelled
                held.cancel_sent = True
            if self._stop_if_overdue(executor, seq, began, now):
                return

    def _stop_if_overdue(self, executor, seq, began, now) -> bool:
        """Stop the executor of job `seq` if that job ran past its deadline or past its
        cancel's grace; True if it did."""
        claimed = executor.inflight[seq]
        claimed.began = began
        held = self.held.get(claimed.id)
        deadline = self._deadline(claimed)
        if deadline is not None and now > deadline:
            logger.warning(
                "job %s (%s) ran past its %gs timeout: stopping it",
                claimed.id,
                for_log(claimed.task_path),
                claimed.timeout,
            )
            failure = JobTimeout(f"ran longer than its timeout of {claimed.timeout:g}s")
        elif (
            held
            and held.cancel_requested_at is not None
            and now - held.cancel_requested_at > self.config.cancel_grace
        ):
            logger.warning(
                "job %s (%s) did not stop within %gs of its cancel: stopping it",
                claimed.id,
                for_log(claimed.task_path),
                self.config.cancel_grace,
            )
            failure = JobCancelled("cancelled by an operator")
        else:
            return False
        self._replace_executor(executor, culprit=seq, failure=failure)
        return True

    def _flush_finishes(self):
        self._sync(claim=False)

    def _settle(self, pending, applied):
        applied_ids = {f.job_id for f in applied}
        settled = []
        failed_queues = set()
        for f in pending:
            held = self.held.pop(f.job_id, None)
            if f.job_id not in applied_ids:
                logger.warning(
                    "job %s: lease lost to another worker; its outcome was discarded", f.job_id
                )
                continue
            if f.outcome is not None:
                self.processed_total += 1
            claimed = held.claimed if held else None
            self._log_finish(f, claimed)
            oc.announce(f, claimed)
            settled.append((f, claimed))
            if claimed is not None and f.outcome in FAILED_ATTEMPT:
                failed_queues.add(claimed.queue_name)
        observers.attempts_settled(settled, self.backend)
        if failed_queues:
            self._trip_breakers(failed_queues)

    def _trip_breakers(self, failed_queues):
        try:
            breaker.trip(failed_queues, self.limits.current())
        except DB_ERRORS as e:  # checked again on the next failures
            logger.warning("circuit breaker check failed: %s", for_log(str(e)))

    def _log_finish(self, f, claimed):
        level = FINISH_LOG_LEVELS.get(f.state, logging.DEBUG)
        if f.state == JobState.PENDING and self.stopping:
            level = logging.INFO
        if f.state == JobState.SUCCEEDED and self.config.log_format == "json":
            level = logging.INFO
        if not logger.isEnabledFor(level):
            return  # the usual success: nothing to escape or format
        path = for_log(claimed.task_path) if claimed else "?"
        attempt = f"{claimed.attempt}/{claimed.max_attempts}" if claimed else "?"
        error = for_log(f"{f.error_type}: {f.error_message}".strip(": "))
        extra = logformat.finish_fields(f, claimed)
        if f.state == JobState.SUCCEEDED:
            logger.log(
                level, "job %s (%s) succeeded on attempt %s", f.job_id, path, attempt, extra=extra
            )
        elif f.state == JobState.RETRYING and f.outcome == AttemptOutcome.INTERRUPTED:
            logger.info(
                "job %s (%s) interrupted by the worker's shutdown on attempt %s; back in line, "
                "the attempt given back",
                f.job_id,
                path,
                attempt,
                extra=extra,
            )
        elif f.state == JobState.RETRYING:
            logger.warning(
                "job %s (%s) failed attempt %s: %s; retrying in %.1fs",
                f.job_id,
                path,
                attempt,
                error,
                f.delay,
                extra=extra,
            )
        elif f.state == JobState.DEAD_LETTER:
            logger.error(
                "job %s (%s) dead-lettered (%s) after attempt %s: %s",
                f.job_id,
                path,
                f.reason,
                attempt,
                error,
                extra=extra,
            )
        elif f.state == JobState.CANCELLED:
            logger.warning("job %s (%s) cancelled while running", f.job_id, path, extra=extra)
        elif f.state == JobState.PENDING and f.snoozed:
            logger.log(level, "job %s (%s) snoozed for %.1fs", f.job_id, path, f.delay, extra=extra)
        elif f.state == JobState.PENDING:
            logger.log(level, "job %s (%s) handed back unstarted", f.job_id, path, extra=extra)

    # --- heartbeat and maintenance ----------------------------------------------------------

    def _register(self):
        WorkerNode.objects.update_or_create(
            id=self.worker_id,
            defaults={
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "queues": list(self.config.queues),
                "concurrency": self.config.concurrency,
                "async_concurrency": self.config.async_concurrency,
                **self._free_slots(),
                "started_at": timezone.now(),
                "last_heartbeat_at": timezone.now(),
                "stopped_at": None,
            },
        )

    def _heartbeat(self):
        self.heartbeats += 1
        WorkerNode.objects.filter(id=self.worker_id).update(
            last_heartbeat_at=timezone.now(),
            jobs_processed=self.processed_total,
            **self._free_slots(),
        )
        now = time.monotonic()
        renewable = [
            (job_id, h.claimed.lease_id)
            for job_id, h in self.held.items()
            # A job past its own deadline is being stopped; its lease is not renewed.
            if (deadline := self._deadline(h.claimed)) is None or now <= deadline
        ]
        sent = time.monotonic()
        held_ids = db.renew_leases(renewable, self.config.lease_seconds)
        # Every lease still held runs at least until sent + lease (by the database's clock,
        # which started counting after `sent`); executors start nothing past that.
        self.leases_hold_until = sent + self.config.lease_seconds - self.lease_margin
        for executor in self.executors:
            executor.leases_hold_until(self.leases_hold_until)
        for job_id, _ in renewable:
            if job_id not in held_ids and not any(f.job_id == job_id for f in self.finishes):
                self._abandon(job_id)
        self._check_cancels()
        self._maintenance()

    def _free_slots(self) -> dict:
        """What the console shows of this worker's room: executors free for a sync job, and
        free coroutine slots."""
        live = [e for e in self.executors if not e.broken]
        return {
            "free_sync_slots": sum(1 for e in live if e.idle),
            "free_async_slots": sum(e.free_async_slots() for e in live),
        }

    def _abandon(self, job_id):
        held = self.held.pop(job_id, None)
        if held is None:
            return
        logger.warning(
            "job %s: lease lost (this worker stalled or was cut off); abandoning it", job_id
        )
        if held.claimed in self.dispatcher.ready:
            self.dispatcher.ready.remove(held.claimed)
        for executor in list(self.executors):
            for seq, claimed in list(executor.inflight.items()):
                if claimed is held.claimed:
                    # Its executor may not start or go on with it: the job belongs to whoever
                    # recovered it. Stop that executor; its other jobs go back in line.
                    executor.take(seq)
                    self._replace_executor(executor, failure=WorkerLost("lease lost"))
                    return

    def _check_cancels(self):
        if not self.held:
            return
        ids = list(self.held)
        requested = set()
        for start in range(0, len(ids), 500):
            requested.update(
                Job.objects.filter(
                    id__in=ids[start : start + 500],
                    state=JobState.RUNNING,
                    cancel_requested_at__isnull=False,
                ).values_list("id", flat=True)
            )
        now = time.monotonic()
        for job_id in requested:
            held = self.held[job_id]
            if held.cancel_requested_at is None:
                held.cancel_requested_at = now
                logger.info(
                    "job %s: cancel requested; it has %gs to stop by itself",
                    job_id,
                    self.config.cancel_grace,
                )
                if held.claimed in self.dispatcher.ready:
                    self.dispatcher.ready.remove(held.claimed)
                    self.finishes.append(
                        oc.decide(
                            held.claimed,
                            oc.failure_from_outside(
                                held.claimed, JobCancelled("cancelled"), worker_id=self.worker_id
                            ),
                            worker_id=self.worker_id,
                            cancel_requested=True,
                        )
                    )

    def _maintenance(self):
        maintenance.run_due(self.worker_id, round=self.heartbeats, backend=self.backend)

    # --- shutdown ---------------------------------------------------------------------------

    def _shutdown(self):
        self.stop_event.set()
        self.restarts.clear()
        # Jobs never started are handed back; jobs still running are interrupted.
        for claimed in list(self.dispatcher.ready):
            self.finishes.append(oc.Outcome.released(claimed, self.worker_id))
        self.dispatcher.ready.clear()
        for executor in self.executors:
            executor.close()  # in order: each exits once it has answered what it holds
        for executor in list(self.executors):
            if not executor.started():
                executor.process.join(2)
            self._collect(executor, executor.kill())
            started = executor.started()  # read once the child is gone: final
            for seq, claimed in sorted(executor.inflight.items()):
                if claimed.id not in self.held:
                    continue
                if seq in started:
                    ran = oc.failure_from_outside(
                        claimed,
                        WorkerShutdown("the worker shut down before the job finished"),
                        kind=AttemptOutcome.INTERRUPTED,
                        worker_id=self.worker_id,
                    )
                    self.finishes.append(oc.decide(claimed, ran, worker_id=self.worker_id))
                else:
                    self.finishes.append(oc.Outcome.released(claimed, self.worker_id))
            executor.clear()
        attempts = 1 if self.hard_stop else 5
        for _ in range(attempts):
            self._flush_finishes()
            if not self.finishes:
                break
        if self.finishes:
            logger.error(
                "could not record %d outcome(s); their leases expire and other workers "
                "recover them",
                len(self.finishes),
            )
            self.exit_code = 1
        for _ in range(1 if self.hard_stop else 3):
            try:
                WorkerNode.objects.filter(id=self.worker_id).update(
                    stopped_at=timezone.now(),
                    last_heartbeat_at=timezone.now(),
                    jobs_processed=self.processed_total,
                )
                break
            except DB_ERRORS:
                _reset_connection()  # a connection cut while idle fails on first use
        if self.listener:
            self.listener.close()
        signal.set_wakeup_fd(-1)
        logger.info(
            "worker %s stopped: %d job(s) processed",
            self.worker_id,
            self.processed_total,
            extra={"event": "worker_stopped"},
        )
        if self.hard_stop:
            self.exit_code = 130

    # --- database resilience ----------------------------------------------------------------

    def _with_db(self, fn, *args, **kwargs):
        """Run fn; on a database error, reconnect with backoff until it works or we stop."""
        delay = 0.1
        while True:
            try:
                return fn(*args, **kwargs)
            except DB_ERRORS as e:
                if not _is_transient(e):
                    raise
                logger.warning(
                    "database unavailable (%s); retrying in %.1fs",
                    str(e).strip().splitlines()[0] if str(e) else type(e).__name__,
                    delay,
                )
                _reset_connection()
                if self.hard_stop:
                    return None
                self._sleep(delay)
                delay = min(delay * 2, 5.0)
                if self.stopping and time.monotonic() - self.stop_requested_at > (
                    self.config.shutdown_timeout + 5
                ):
                    return None

    def _sleep(self, seconds):
        ready = wait([self.wake_r], seconds)
        if ready:
            self._drain_wakeups()


def _is_transient(error) -> bool:
    if isinstance(error, OperationalError | InterfaceError):
        return True
    if isinstance(error, IntegrityError | DataError | ProgrammingError):
        return False  # a statement that is wrong stays wrong; retrying it would wedge us
    # Only the first line: DETAIL lines quote row data (tracebacks, messages).
    text = str(error).strip().splitlines()[0].lower() if str(error).strip() else ""
    # "received 2 results from command 'COMMIT'": a pooler (PgBouncer) passing on the error of
    # a server session killed under a transaction; the connection is unusable, and the retry
    # is fenced by the lease like any other.
    return any(
        word in text
        for word in (
            "locked",
            "connection",
            "terminat",
            "server closed",
            "shutdown",
            "could not",
            "results from command",
        )
    )


def _reset_connection():
    try:
        connection.close()
    except Exception:
        connection.connection = None
