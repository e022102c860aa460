"""The worker: claims due jobs, runs them in supervised executor processes, records outcomes.

One thread, one loop: wait for something to happen (a result from an executor, a NOTIFY from
PostgreSQL, a signal, a timer), then react. Writes for an attempt carry the lease of its claim,
so a worker that lost a lease (it stalled and another recovered the job) changes nothing.
"""

import logging
import math
import os
import select
import signal
import time
import uuid
from collections import deque
from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, DataError, connection, connections
from django.db.backends.signals import connection_created
from django.utils import timezone

from . import (
    breaker,
    db,
    maintenance,
    observers,
    schedules,
    schema,
    startup_signals,
    worker_node,
)
from . import outcome as oc
from .compat import task_backends
from .db.pooler import is_pooled
from .db.unpooled import unpooled_connection
from .errors import JobCancelled
from .errortext import for_log
from .limits import LimitsCache
from .models import Job, PausedQueue
from .pool.executor import REPORTS_TIMEOUT
from .pool.supervisor import Held, Stopped, Supervisor
from .reconnect import DB_ERRORS, first_line, is_transient, reset_connection
from .signal_pipe import SignalPipe
from .statement_thread import StatementThread
from .states import BREAKER_FAILURE, JobState
from .worker_config import WorkerConfig, default_worker_id
from .worker_log import WorkerLog

# What the database refuses as data, or the driver cannot send at all (a lone surrogate to
# SQLite): the fault of one outcome in the batch, not of the database.
UNSTORABLE = (DataError, ValueError)

__all__ = ["Worker", "WorkerConfig"]

# Finish-and-claim transactions a worker may have in flight at once on PostgreSQL, each on a
# thread and a connection of its own: with a backlog the database works on two (two server
# processes) while the loop feeds executors (bench/README.md, "Two transactions in flight").
STATEMENT_THREADS = 2

# The longest wait between a worker's attempts to reach its database again; no longer than a
# heartbeat (down to a second), so that it renews its leases soon after an outage ends.
RECONNECT_DELAY_MAX = 5.0

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Flight:
    """A finish-and-claim transaction sent to a statement thread and not yet taken."""

    thread: StatementThread
    pending: list  # the outcomes it writes
    limit: int  # how many jobs it claims at most
    sent: float  # time.monotonic()


class Worker:
    def __init__(self, config: WorkerConfig, backend_alias="default"):
        self.config = config
        self.backend = task_backends[backend_alias]
        self.worker_id = config.worker_id or default_worker_id()
        self.held: dict[uuid.UUID, Held] = {}
        # The flow-control limits in force, re-read every few seconds.
        self.limits = LimitsCache(backend_alias)
        self.finishes: list = []  # db.Finish waiting to be written
        # PostgreSQL: the finish-and-claim transactions' own threads (set once started), and the
        # transactions in flight there, oldest first: they are taken in the order sent.
        self.statements: list[StatementThread] = []
        self.flights: deque[Flight] = deque()
        # A job claimed again before the outcome of its last attempt was taken: that attempt's
        # hold, until then (Worker._release).
        self.superseded: dict[uuid.UUID, Held] = {}
        self.notified = False  # a NOTIFY came since the last claim was sent
        self.claimed_total = 0
        self.processed_total = 0
        self.stopping = False
        self.stop_requested_at = None
        self.hard_stop = False
        # The executors were asked for their jobs' last lines as the shutdown timeout ends.
        self.reports_asked = False
        self.signals_seen = 0
        self.supervisor = Supervisor(
            worker_id=self.worker_id,
            settings_module=os.environ.get("DJANGO_SETTINGS_MODULE"),
            async_slots=config.async_concurrency,
            cancel_grace=config.cancel_grace,
            held=self.held,
            settle=self._settle_stopped,
        )
        self.dispatcher = self.supervisor.dispatcher
        # Both set once the database answers (_database_ready).
        self.listener: db.Listener | None = None
        self.poll_interval = 0.0
        self.started = False  # executors started: from then on a stop hands work back
        self.next_heartbeat = 0.0
        self.next_schedule_tick = 0.0
        self.heartbeats = 0
        self.signals = SignalPipe()
        self.exit_code = 0
        self.last_claim_full = False
        # A database call failed since the last maintenance; when (monotonic clock) this
        # worker last came back to its database after being without it; when its last
        # heartbeat ended; whether the recovery of expired leases waits meanwhile for the other
        # workers of an outage (_maintenance).
        self.db_failed = False
        self.back_at = -math.inf
        self.last_beat_end: float | None = None
        self.recovery_held = False
        self.reconnect_delay_max = min(RECONNECT_DELAY_MAX, max(1.0, config.heartbeat_seconds))
        # Slack for the executors: they must have stopped before another worker may recover.
        self.lease_margin = min(1.0, config.heartbeat_seconds / 2)
        self.log = WorkerLog(config.log_format)
        self.pooled_connection = None  # Django's, put aside while run() works on its own

    # --- lifecycle --------------------------------------------------------------------------

    def run(self) -> int:
        self._own_connection()
        connection_created.connect(self._session_limits, weak=False)
        if connection.connection is not None:
            self._session_limits(None, connection)
        self._install_signal_handlers()
        # A worker may start before its database does (a reboot, a compose file): it waits,
        # as it does for an outage later, and starts nothing until the tables are there.
        try:
            ready = not self.stopping and self._with_db(self._database_ready)
        except BaseException:
            self._restore_process()
            raise
        if not ready:
            self._restore_process()
            logger.info("worker %s stopped before it started", self.worker_id)
            return 130 if self.hard_stop else 0
        self.started = True
        try:
            if connection.vendor == "postgresql":
                # Behind a transaction pooler every connection in a transaction takes one of its
                # few server connections: one transaction in flight there.
                threads = 1 if is_pooled(connection) else STATEMENT_THREADS
                unpooled = self.pooled_connection is not None
                self.statements = [StatementThread(unpooled=unpooled) for _ in range(threads)]
            # Inside the try: whatever fails from here on, the executors are stopped.
            self.supervisor.start_all(self.config.concurrency)
            self._with_db(self._register)
            names = self.config.queues
            if any("," in name or name != name.strip() for name in names):
                names = [repr(name) for name in names]  # "a, b" is one queue, not two
            queues = ", ".join(names) or "all queues"
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
            for name in self.config.queues:
                if "," in name:
                    # Valid as one name, but most likely meant as a list (as other tools take).
                    logger.warning(
                        "--queue %r is one queue, whose name has a comma in it; for several "
                        "queues repeat --queue (--queue %s)",
                        name,
                        " --queue ".join(part.strip() for part in name.split(",")),
                    )
            self._loop()
        finally:
            try:
                self._shutdown()
            finally:
                self.supervisor.kill_remaining()
                for thread in self.statements:
                    thread.close()
        return self.exit_code

    def _database_ready(self) -> bool:
        """The database answers and holds every migration this code needs (else
        schema.SchemaNotReady); then the connection that wakes this worker for new jobs."""
        schema.check_ready()
        with connection.wrap_database_errors:  # the driver's own errors, as Django's
            self.listener = db.listener(self.backend.options)
        self.poll_interval = self.config.poll_interval or (1.0 if self.listener else 0.1)
        return True

    def _own_connection(self):
        """With Django's connection pool (OPTIONS["pool"]), work on one connection of its own
        outside it. A pool gives one long-lived thread nothing, and in an outage a call waits
        inside it (psycopg_pool's timeout, 30 s, and its reconnect back-off) rather than
        failing: a worker back late that way found its jobs recovered by another worker,
        which returned sooner and had waited its hold (reconnect delay + heartbeat), and a job
        that had finished during the outage ran again."""
        if connection.settings_dict.get("OPTIONS", {}).get("pool"):
            self.pooled_connection = connections[DEFAULT_DB_ALIAS]
            connections[DEFAULT_DB_ALIAS] = unpooled_connection(DEFAULT_DB_ALIAS)

    def _restore_process(self):
        """Put back what run() changed in the process: signal handlers, connection hooks, the
        pooled connection."""
        self.signals.restore()
        connection_created.disconnect(self._session_limits)
        if self.pooled_connection is not None:
            reset_connection()
            connections[DEFAULT_DB_ALIAS] = self.pooled_connection
            self.pooled_connection = None

    def _loop(self):
        while True:
            now = time.monotonic()
            if self.stopping:
                if not self.held:
                    return
                waited = now - self.stop_requested_at
                if self.hard_stop or waited > self.config.shutdown_timeout:
                    return
                ending = waited > self.config.shutdown_timeout - REPORTS_TIMEOUT
                if ending and not self.reports_asked:
                    # So that an executor that cannot write what its jobs reported is known by
                    # the end of the shutdown timeout, and not waited for after it (the others
                    # are asked again then, for what came since: a moment's write).
                    self.supervisor.ask_for_last_reports()
                    self.reports_asked = True
            if now >= self.next_schedule_tick and not self.stopping:
                ticked = self._with_db(schedules.tick, self.backend)
                wait = ticked.next_in if ticked else schedules.TICK_SECONDS
                observers.schedules_fired(ticked.fired if ticked else [], self.backend)
                self.next_schedule_tick = time.monotonic() + wait
            if now >= self.next_heartbeat:
                self._land_all()  # its claims' leases are renewed too
                self._with_db(self._heartbeat)
                self.next_heartbeat = now + self.config.heartbeat_seconds
            self.supervisor.enforce_deadlines(now)
            self.supervisor.start_due(now)
            claimed = self._sync()
            self._dispatch()
            if not self.held and not self.finishes and not claimed and not self.flights:
                if self.config.burst and not self._with_db(self._limits_hold_due_jobs):
                    self._begin_stopping(now)  # writes the claims not logged yet first
                    logger.info("no job is due and none is running: burst done")
                    continue
                if self._max_jobs_reached():
                    self._begin_stopping(now)
                    logger.info("processed --max-jobs %d jobs", self.config.max_jobs)
                    continue
            # The clock read again: stopping executors above may have taken a moment.
            self._wait(0 if claimed and self.last_claim_full else self._wait_time(time.monotonic()))

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
        timeout = self.supervisor.wait_limit(now, timeout)
        if self.stopping:
            timeout = min(timeout, 0.05)
        return timeout

    def _wait(self, timeout):
        """Wait up to `timeout` seconds for an outcome, a dead executor, a pipe that takes
        the rest of a job written to it, a wake-up (signal) or a NOTIFY; then serve them."""
        poller = select.poll()
        poller.register(self.signals.fileno(), select.POLLIN)
        pipes, sentinels = {}, {}
        for e in self.supervisor.executors:
            pipes[e.conn.fileno()] = e
            poller.register(e.conn.fileno(), select.POLLIN | (select.POLLOUT if e.unsent else 0))
            sentinels[e.sentinel] = e
            poller.register(e.sentinel, select.POLLIN)
        listen_fd = self.listener.fileno_or_none() if self.listener and not self.stopping else None
        if listen_fd is not None:
            poller.register(listen_fd, select.POLLIN)
        if self.flights:  # the oldest: they are taken in order
            poller.register(self.flights[0].thread.fileno(), select.POLLIN)
        for fd, events in poller.poll(max(0.0, timeout) * 1000):
            if fd == self.signals.fileno():
                self.signals.drain()
            elif fd == listen_fd:
                self.listener.drain()
                self.notified = True
            elif fd in pipes:
                executor = pipes[fd]
                if events & select.POLLOUT and executor in self.supervisor.executors:
                    executor.flush()
                if events & ~select.POLLOUT:
                    self._from_executor(executor)
            elif fd in sentinels:
                self._from_executor(sentinels[fd], exited=True)
        # Outcomes that arrived meanwhile from the others go into the same write.
        for executor in list(self.supervisor.executors):
            if executor in self.supervisor.executors:
                self._drain(executor)

    # --- signals ----------------------------------------------------------------------------

    def _install_signal_handlers(self):
        self.signals.install(self._on_signal)
        for signum in startup_signals.release():
            self._on_signal(signum, None)

    def _on_signal(self, signum, frame):
        self.signals_seen += 1
        name = signal.Signals(signum).name
        if self.signals_seen == 1 and not self.started:
            self._begin_stopping(time.monotonic())
            logger.info("received %s before the worker started: stopping", name)
        elif self.signals_seen == 1:
            self._begin_stopping(time.monotonic())
            self.supervisor.stop_flag.set()
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

    def _begin_stopping(self, now):
        """No new claims, no executor started; held jobs get the shutdown timeout."""
        self.log.flush_claims()
        self.stopping = self.supervisor.stopping = True
        self.stop_requested_at = now

    # --- claiming and results ---------------------------------------------------------------

    def _claim_limit(self):
        # Jobs asked for by claims still in flight are not held yet: their room is taken, and
        # they count towards --max-jobs.
        asked = sum(f.limit for f in self.flights)
        room = self.dispatcher.room() - asked
        # Claim in batches: wait until half the room is free, unless a job can start now.
        if room <= 0 or (
            self.held
            and room < self.dispatcher.total_capacity() // 2
            and not self.dispatcher.has_free_place()
        ):
            return 0
        limit = min(room, self.config.batch_size)
        if self.config.max_jobs is not None:
            limit = min(limit, self.config.max_jobs - self.claimed_total - asked)
        return max(limit, 0)

    def _sync(self, claim=True):
        """Record finished outcomes and claim the next batch, in one transaction.

        On PostgreSQL the transaction runs on a statement thread while the loop goes on; its
        result is taken here, on a later turn, in the order sent. With a backlog (the last claim
        came back full) a second one is sent while the first is in flight. Stopping, or with a
        limit that counts at claim time in force, it runs here and is waited for."""
        if not self.statements:
            return self._sync_here(claim)
        claimed, landed, failed, emptied = 0, [], False, False
        while self.flights and (self.stopping or self.flights[0].thread.done()):
            asked = self.flights[0].limit
            took, one, failed_now = self._land()
            claimed += took
            failed = failed or failed_now
            if one is not None:
                landed.append(one)
                emptied = bool(asked) and not took
        # A claim that came back empty is made again after a wake-up (a NOTIFY since it was
        # sent, or the poll interval), as without the thread: a burst sees that nothing is due
        # and stops, an idle worker does not claim in a loop. One that did not land (its
        # transaction refused or failed) is made now, or a burst would stop early.
        if emptied and not self.notified:
            claim = False
        free = self._free_statement_thread()
        if free is None and not (failed or self.stopping):
            self._report_landed(landed)
            return claimed  # nothing can be sent before a transaction in flight lands
        limit = self._claim_limit() if claim and not self.stopping else 0
        in_force = self._with_db(self.limits.current) if limit else None
        # After a failed one, the next is written here, where an outage is ridden out.
        if failed or self.stopping or (in_force is not None and in_force.shape_claims):
            claimed += self._land_all(landed)
            return claimed + self._sync_here(claim)
        # A second transaction only carries a claim, for a backlog, and where no circuit breaker
        # may trip: a claim in flight cannot be called back.
        second = in_force is not None and self.last_claim_full and not in_force.breakers
        if free is not None and (self.finishes or limit) and (not self.flights or second):
            if limit:
                self.notified = False
            pending, self.finishes = self.finishes, []
            sent = time.monotonic()
            free.send(db.finish_and_claim, pending, **self._claim_args(limit, None))
            self.flights.append(Flight(free, pending, limit, sent))
        self._report_landed(landed)  # while the next transaction runs
        return claimed

    def _free_statement_thread(self) -> StatementThread | None:
        busy = {id(f.thread) for f in self.flights}
        return next((t for t in self.statements if id(t) not in busy), None)

    def _land(self):
        """Take the oldest transaction in flight (waited for): its claimed jobs are held from
        here on. Returns how many, what it wrote and claimed for _report_landed (None if
        nothing), and whether the database failed it (its outcomes are then written again)."""
        flight = self.flights.popleft()
        pending = flight.pending
        try:
            applied, claimed = flight.thread.take()
        except UNSTORABLE as e:
            if not pending:
                raise
            self._finish_one_by_one(pending, e)
            return 0, None, False
        except DB_ERRORS as e:
            if not is_transient(e):
                raise
            logger.warning("database unavailable (%s); writing the outcomes again", first_line(e))
            self.db_failed = True
            self.finishes = pending + self.finishes
            return 0, None, True
        # Released before the claimed jobs are held: a retry may be claimed in the same
        # transaction that wrote its failure.
        settled = self._release(pending, applied)
        # Before the next claim is sent, as without the thread: none after a breaker trips.
        self._trip_breakers(settled)
        return self._took(claimed, flight.limit, flight.sent), (settled, claimed), False

    def _land_all(self, landed=()) -> int:
        """Report `landed`, then take every transaction still in flight, in order, and report
        each; returns how many jobs they claimed."""
        self._report_landed(landed)
        claimed = 0
        while self.flights:
            took, one, _ = self._land()
            claimed += took
            self._report_landed([one] if one is not None else [])
        return claimed

    def _report_landed(self, landed):
        """What transactions taken from the statement threads wrote and claimed, logged."""
        for settled, claimed in landed:
            self._report(settled, trip=False)  # tripped in _land
            self.log.claims(claimed)

    def _sync_here(self, claim=True):
        limit = self._claim_limit() if claim and not self.stopping else 0
        if not self.finishes and not limit:
            return 0
        pending = self.finishes
        sent = time.monotonic()
        try:
            result = self._with_db(
                db.finish_and_claim, pending, **self._claim_args(limit, self.limits)
            )
        except UNSTORABLE as e:
            if not pending:
                raise
            self.finishes = []
            self._finish_one_by_one(pending, e)
            # The claim went with the refused batch: made now, or a burst would stop early.
            return 0 if self.finishes else self._sync_here(claim=claim)
        if result is None:
            return 0  # the database is away; the outcomes are kept and written later
        applied, claimed = result
        self.finishes = []
        self._settle(pending, applied)
        self.log.claims(claimed)
        return self._took(claimed, limit, sent)

    def _claim_args(self, limit, limits) -> dict:
        """db.finish_and_claim's claim arguments; `limits` None claims without them."""
        return {
            "worker_id": self.worker_id,
            "queues": self.config.queues or None,
            "limit": limit,
            "lease_seconds": self.config.lease_seconds,
            "limits": limits,
            "can_begin": self.dispatcher.can_begin(),
        }

    def _took(self, claimed, limit, sent) -> int:
        """Hold the jobs a claim sent at `sent` (time.monotonic()) took."""
        if limit:
            self.dispatcher.claim_took(time.monotonic() - sent)
        lease_until = sent + self.config.lease_seconds - self.lease_margin
        for c in claimed:
            c.lease_until = lease_until
            if c.rate_slack:
                c.start_by = sent + c.rate_slack
            if c.id in self.held:  # its last attempt's outcome is in a transaction not taken yet
                self.superseded[c.id] = self.held[c.id]
            self.held[c.id] = Held(c)
            self.dispatcher.add(c)
        self.claimed_total += len(claimed)
        self.last_claim_full = bool(limit) and len(claimed) == limit
        return len(claimed)

    def _finish_one_by_one(self, pending, error):
        """A batch of outcomes the database refused as data: record each on its own, so that
        one job's outcome cannot take the others, or the worker, down with it."""
        logger.error(
            "the database refused a batch of %d outcome(s) (%s); recording them one by one",
            len(pending),
            for_log(first_line(error)),
        )
        for finish in pending:
            for tried in (finish, oc.storable_finish(finish)):
                try:
                    result = self._with_db(db.finish_and_claim, [tried], limit=0)
                except UNSTORABLE as e:
                    error = e
                    continue
                if result is None:  # the database is away: kept, and written later
                    self.finishes.append(finish)
                else:
                    self._settle([tried], result[0])
                break
            else:
                # Not renewed from here on: its lease expires and a worker recovers the job.
                self.held.pop(finish.job_id, None)
                logger.error(
                    "job %s: its outcome cannot be stored (%s); its lease will expire and the "
                    "job is recovered as for a lost worker",
                    finish.job_id,
                    for_log(first_line(error)),
                )

    def _from_executor(self, executor, exited=False):
        if executor not in self.supervisor.executors:
            return  # replaced while this round's events were served
        self._drain(executor)
        if executor in self.supervisor.executors and exited and not executor.alive():
            self.supervisor.died(executor)

    def _drain(self, executor):
        for seq, ran in executor.receive():
            self._on_ran(executor.take(seq), ran)
        if executor.broken:
            self.supervisor.died(executor)

    def _on_ran(self, claimed, ran, observe=True):
        """An attempt ended (or was ended from outside): decide what becomes of its job."""
        held = self.held.get(claimed.id) if claimed is not None else None
        if held is None:
            return  # already settled (timed out, abandoned)
        if observe and ran.started_at and ran.finished_at:
            duration = (ran.finished_at - ran.started_at).total_seconds()
            self.dispatcher.observe(claimed.task_path, duration)
        finish = oc.decide(
            claimed,
            ran,
            worker_id=self.worker_id,
            cancel_requested=held.cancel_requested_at is not None,
        )
        self.finishes.append(finish)

    def _settle_stopped(self, stopped: Stopped):
        """The jobs of an executor the supervisor stopped: what it answered counts, what it
        had started ended as the supervisor says, what it never started runs elsewhere (or
        goes back to the database when the worker stops)."""
        for claimed, ran in stopped.answered:
            self._on_ran(claimed, ran)
        for claimed, ran in stopped.cut_short:
            self._on_ran(claimed, ran, observe=False)
        if self.stopping:
            for claimed in stopped.unstarted:
                self.finishes.append(oc.Outcome.released(claimed, self.worker_id))
        else:
            self.dispatcher.put_back(stopped.unstarted)

    def _dispatch(self):
        for claimed in self.dispatcher.dispatch():
            self.finishes.append(oc.Outcome.released(claimed, self.worker_id))
        for executor in [e for e in self.supervisor.executors if e.broken]:
            self._drain(executor)

    def _flush_finishes(self):
        self._sync(claim=False)

    def _settle(self, pending, applied):
        self._report(self._release(pending, applied))

    def _release(self, pending, applied) -> list:
        """The written outcomes' jobs are no longer held; returns (outcome, its claim) of each
        that took effect, for _report."""
        applied_ids = {f.job_id for f in applied}
        settled = []
        for f in pending:
            held = self.held.get(f.job_id)
            if held is not None and held.claimed.lease_id != f.lease_id:
                # Claimed again by a transaction taken before this one (a retry the other
                # statement thread claimed once this one committed): that hold stays.
                held = self.superseded.pop(f.job_id, None)
            else:
                self.held.pop(f.job_id, None)
            if f.job_id not in applied_ids:
                logger.warning(
                    "job %s: lease lost to another worker; its outcome was discarded", f.job_id
                )
                continue
            if f.outcome is not None:
                self.processed_total += 1
            settled.append((f, held.claimed if held else None))
        return settled

    def _report(self, settled, trip=True):
        """Log, signal and observe the written outcomes; trip the circuit breakers (unless
        done already)."""
        for f, claimed in settled:
            self.log.finish(f, claimed, stopping=self.stopping)
            oc.announce(f, claimed)
        observers.attempts_settled(settled, self.backend)
        if trip:
            self._trip_breakers(settled)

    def _trip_breakers(self, settled):
        failed_queues = {
            claimed.queue_name
            for f, claimed in settled
            if claimed is not None and f.outcome in BREAKER_FAILURE
        }
        if not failed_queues:
            return
        try:
            breaker.trip(failed_queues, self.limits.current())
        except DB_ERRORS as e:  # checked again on the next failures
            logger.warning("circuit breaker check failed: %s", for_log(str(e)))

    # --- heartbeat and maintenance ----------------------------------------------------------

    def _register(self):
        namesake = worker_node.live_namesake(self.worker_id, self.config.lease_seconds)
        if namesake is not None:
            logger.warning(
                "another worker runs with the id %s (pid %d on %s, its last heartbeat %.0fs "
                "ago): give each worker its own --worker-id; the console shows the two as one",
                for_log(self.worker_id),
                namesake.pid,
                for_log(namesake.hostname),
                (timezone.now() - namesake.last_heartbeat_at).total_seconds(),
            )
        worker_node.register(self.worker_id, self.config, self.supervisor.free_slots())

    def _heartbeat(self):
        self.heartbeats += 1
        worker_node.beat(self.worker_id, self.processed_total, self.supervisor.free_slots())
        now = time.monotonic()
        renewable = [
            (job_id, h.claimed.lease_id)
            for job_id, h in self.held.items()
            # A job past its own deadline is being stopped; its lease is not renewed.
            if (deadline := self.supervisor.deadline(h.claimed)) is None or now <= deadline
        ]
        sent = time.monotonic()
        held_ids = db.renew_leases(renewable, self.config.lease_seconds)
        # Every lease still held runs at least until sent + lease (by the database's clock,
        # which started counting after `sent`); executors start nothing past that.
        self.supervisor.leases_renewed(sent + self.config.lease_seconds - self.lease_margin)
        for job_id, _ in renewable:
            if job_id not in held_ids and not any(f.job_id == job_id for f in self.finishes):
                self._abandon(job_id)
        self._check_cancels()
        self._maintenance()

    def _abandon(self, job_id):
        held = self.held.pop(job_id, None)
        if held is None:
            return
        logger.warning(
            "job %s: lease lost (this worker stalled or was cut off); abandoning it", job_id
        )
        self.supervisor.abandon(held.claimed)

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
                if self.dispatcher.withdraw(held.claimed):
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
        # After this worker lost the database, so may have the others: their leases ran out
        # meanwhile, but they still hold their jobs (running, or finished with the outcome not
        # yet written) and renew them once they reconnect, within a reconnect delay and a
        # heartbeat. Recovering first would stop those jobs and run the finished ones again.
        # Without the database means a failed call, or a heartbeat far later than due (a call
        # that waited out the outage inside a connection pool, or this worker stalled).
        now = time.monotonic()
        overdue = 2 * self.config.heartbeat_seconds + 1
        if self.db_failed or (
            self.last_beat_end is not None and now - self.last_beat_end > overdue
        ):
            self.back_at = now
            self.db_failed = False
        hold = self.reconnect_delay_max + self.config.heartbeat_seconds + 1
        recover = now - self.back_at > hold
        if not recover and not self.recovery_held:
            logger.info(
                "database reachable again: other workers' expired leases are recovered from "
                "the first heartbeat %.0fs from now, once they have had the time to reconnect "
                "and renew them",
                hold,
            )
        self.recovery_held = not recover
        maintenance.run_due(
            self.worker_id, round=self.heartbeats, backend=self.backend, recover=recover
        )
        self.last_beat_end = time.monotonic()

    # --- shutdown ---------------------------------------------------------------------------

    def _shutdown(self):
        self.stopping = True
        self._land_all()
        # Jobs never started are handed back; jobs still running are interrupted.
        for claimed in self.dispatcher.take_all():
            self.finishes.append(oc.Outcome.released(claimed, self.worker_id))
        self.supervisor.shutdown(hard=self.hard_stop)
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
                worker_node.stopped(self.worker_id, self.processed_total)
                break
            except DB_ERRORS:
                reset_connection()  # a connection cut while idle fails on first use
        if self.listener:
            self.listener.close()
        self._restore_process()
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
                if not is_transient(e):
                    raise
                self.db_failed = True
                reset_connection()
                if self.hard_stop or (self.stopping and not self.started):
                    logger.warning(
                        "database unavailable (%s); not waiting: stopping", first_line(e)
                    )
                    return None
                logger.warning("database unavailable (%s); retrying in %.1fs", first_line(e), delay)
                self.signals.sleep(delay)
                delay = min(delay * 2, self.reconnect_delay_max)
                if self.stopping and time.monotonic() - self.stop_requested_at > (
                    self.config.shutdown_timeout + 5
                ):
                    return None
