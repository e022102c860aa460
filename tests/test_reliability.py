"""Issue 4: leases with fencing, heartbeats, hard timeouts, crash recovery, graceful shutdown,
proven by real fault injection on real `manage.py worker` processes.

Faults are real: SIGKILL / SIGSTOP / SIGTERM on workers and their process groups, a child killed
under the worker, pg_terminate_backend on the workers' connections, SQLite write-lock contention.
Each test task writes to a ledger file (tests/tasks.py), so executions are observed from outside
the database as well. Leases are 3 s and heartbeats 1 s here (see `fast_leases`).
"""

import random
import signal
import time
import uuid

import pytest
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from jobs.actions import cancel
from jobs.models import Attempt, Job, WorkerNode
from jobs.states import AttemptOutcome, DeadLetterReason, JobState
from tests import tasks
from tests.reliability_helpers import (
    CANCEL_GRACE_SECONDS,
    LEASE_SECONDS,
    all_terminal,
    another_session,
    assert_attempt_history_consistent,
    assert_node_stopped,
    assert_nothing_running,
    attempts_of,
    is_postgres,
    read_events,
    skip_unless_postgres,
    skip_unless_sqlite,
    spans_by_key,
    states_of,
    terminate_worker_connections,
    wait_for,
    wait_started,
)

pytestmark = pytest.mark.django_db(transaction=True)


def job_id(result):
    return uuid.UUID(str(getattr(result, "id", result)))


def started(env, *keys):
    """Every key has a start: line in the ledger."""
    seen = {e.key for e in read_events(env) if e.kind == "start"}
    return set(keys) <= seen


def stop_cleanly(worker, *, timeout=15):
    """SIGTERM; the worker exits 0, leaves nothing running and marks its node stopped."""
    if worker.alive():
        worker.signal(signal.SIGTERM)
    code = worker.wait(timeout)
    assert code == 0, f"worker {worker.worker_id} exited with {code}:\n{worker.output()}"
    assert_node_stopped(worker.worker_id)


# --- kill -9 chaos -----------------------------------------------------------------------------


@pytest.mark.slow
def test_kill_9_chaos_loses_no_job_and_never_runs_one_twice_at_once(
    fast_leases, spawn_worker, subprocess_env
):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    # Lost attempts count (a killed worker's claimed jobs are recovered through the retry flow),
    # and one job may be on several killed workers in a row: leave room for that.
    task = tasks.ledger_span.using(max_attempts=10)
    keys = [f"chaos{i}" for i in range(300)]
    batches = [keys[i : i + 30] for i in range(0, len(keys), 30)]
    ids: list[uuid.UUID] = []
    workers = [spawn_worker("--concurrency", "2") for _ in range(3)]
    pid_of_worker = {w.worker_id: w.pid for w in workers}
    killed_ids, killed_pgids = set(), set()

    began = time.monotonic()
    next_kill, next_batch = began + 1.0, began
    while time.monotonic() < began + 10:
        now = time.monotonic()
        if now >= next_batch and batches:
            batch = batches.pop(0)
            ids += task.enqueue_many([((k, rng.uniform(0.01, 0.05)), {}) for k in batch])
            next_batch = now + 0.9
        holding = []
        if now >= next_kill:
            busy = set(Job.objects.running().values_list("worker_id", flat=True))
            holding = [w for w in workers if w.worker_id in busy]
        if holding:
            # Only a live worker that holds jobs right now, so that kills hit work in progress;
            # with none, look again on the next turn (the next batch comes within 0.9 s).
            victim = rng.choice(holding)
            victim.kill_group()
            killed_ids.add(victim.worker_id)
            killed_pgids.add(victim.pid)
            replacement = spawn_worker("--concurrency", "2")
            pid_of_worker[replacement.worker_id] = replacement.pid
            workers[workers.index(victim)] = replacement
            next_kill = now + rng.uniform(0.8, 1.2)
        time.sleep(0.02)  # pacing of the chaos loop
    for batch in batches:
        ids += task.enqueue_many([((k, rng.uniform(0.01, 0.05)), {}) for k in batch])

    wait_for(lambda: all_terminal(ids), timeout=120, what=f"all 300 jobs terminal (seed {seed})")
    for w in workers:
        assert w.alive(), f"survivor {w.worker_id} died:\n{w.output()}"
        stop_cleanly(w)

    jobs = {j.id: j for j in Job.objects.filter(id__in=ids)}
    assert len(jobs) == 300
    assert {j.state for j in jobs.values()} == {JobState.SUCCEEDED}, f"seed {seed}"
    assert_attempt_history_consistent(ids)
    assert_nothing_running()

    lost = 0
    for job in jobs.values():
        history = attempts_of(job.id)
        *earlier, last = history
        assert last.outcome == AttemptOutcome.SUCCEEDED, (job.id, history)
        for a in earlier:
            # The only failures are recoveries of jobs held by killed workers.
            assert a.outcome == AttemptOutcome.LOST, (job.id, a.outcome, a.error_message)
            assert a.error_type == "WorkerLost"
            assert a.worker_id in killed_ids, (job.id, a.worker_id)
        lost += len(earlier)
    assert lost >= 1, f"no kill hit a job in progress (seed {seed}); the test proved nothing"

    spans = spans_by_key(read_events(subprocess_env))
    key_of = {j.id: j.args[0] for j in jobs.values()}
    for job in jobs.values():
        runs = sorted(spans[key_of[job.id]], key=lambda s: s.start)
        assert runs, f"{key_of[job.id]} succeeded but never ran"
        *before, final = runs
        # A job runs again only when its earlier run was on a killed worker: never two runs
        # on live workers, so never two at once on live workers.
        for s in before:
            assert s.pgid in killed_pgids, (key_of[job.id], runs, f"seed {seed}")
        assert final.end is not None, (key_of[job.id], runs)
        succeeded_on = attempts_of(job.id)[-1].worker_id
        assert final.pgid == pid_of_worker[succeeded_on], (key_of[job.id], runs, succeeded_on)


@pytest.mark.slow
def test_executors_do_not_outlive_a_worker_killed_alone(fast_leases, spawn_worker, subprocess_env):
    """kill -9 of the worker process only (the OOM killer's choice, or `kill -9 PID`): its
    executors must not keep running jobs that other workers are about to recover."""
    jid = job_id(tasks.ledger_span.enqueue("orphaned", 8))
    first = spawn_worker("--concurrency", "1")
    wait_for(lambda: started(subprocess_env, "orphaned"), timeout=30, what="the job to start")
    first.signal(signal.SIGKILL)
    first.wait(10)
    second = spawn_worker("--concurrency", "1")
    wait_for(
        lambda: Job.objects.filter(id=jid, state=JobState.SUCCEEDED).exists(),
        timeout=LEASE_SECONDS + 30,
        what="the job to be recovered and run again",
    )
    runs = sorted(spans_by_key(read_events(subprocess_env))["orphaned"], key=lambda s: s.start)
    assert [s.pgid for s in runs] == [first.pid, second.pid], runs
    orphan, rerun = runs
    # The first run died with its worker: it did not go on beside the rerun.
    assert orphan.end is None or orphan.end < rerun.start, (orphan, rerun)
    assert not first.group_members(), "executors of the killed worker are still running"
    stop_cleanly(second)


@pytest.mark.slow
def test_heartbeats_keep_the_lease_of_a_job_longer_than_the_lease(
    fast_leases, spawn_worker, subprocess_env
):
    jid = job_id(tasks.ledger_span.enqueue("marathon", LEASE_SECONDS * 2.5))
    runner = spawn_worker("--concurrency", "1")
    wait_for(lambda: started(subprocess_env, "marathon"), timeout=30, what="the job to start")
    # Another worker runs maintenance every second and would recover an expired lease.
    watcher = spawn_worker("--concurrency", "1")
    wait_for(lambda: all_terminal([jid]), timeout=LEASE_SECONDS * 2.5 + 30, what="the job")
    assert [(a.outcome, a.worker_id) for a in attempts_of(jid)] == [
        (AttemptOutcome.SUCCEEDED, runner.worker_id)
    ]
    runs = spans_by_key(read_events(subprocess_env))["marathon"]
    assert [s.pgid for s in runs] == [runner.pid], runs
    stop_cleanly(runner)
    stop_cleanly(watcher)


# --- a stalled worker is fenced off --------------------------------------------------------------


def _sqlite_writable():
    """True when no process holds the SQLite write lock (a stopped one would hold it forever)."""
    import sqlite3

    from django.db import connection

    probe = sqlite3.connect(connection.settings_dict["NAME"], timeout=0.2)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()


def stop_group(worker, *, only_the_worker=False):
    """SIGSTOP the worker and its executors (or the worker process alone). On SQLite, never
    while it holds the write lock: a stopped process holding it would block every other process
    (SQLite's design, not the engine's), so resume and stop again until the lock is free."""
    send = worker.signal if only_the_worker else worker.signal_group
    for _ in range(50):
        send(signal.SIGSTOP)
        if is_postgres() or _sqlite_writable():
            return
        send(signal.SIGCONT)
    raise AssertionError("could not stop the worker outside a write transaction")


@pytest.mark.slow
def test_stalled_worker_is_fenced_off_after_its_lease_is_recovered(
    fast_leases, spawn_worker, subprocess_env
):
    result = tasks.ledger_span.enqueue("stalled", 2)
    jid = job_id(result)
    first = spawn_worker("--concurrency", "1")
    wait_for(lambda: started(subprocess_env, "stalled"), timeout=30, what="the job to start")
    assert Job.objects.get(id=jid).worker_id == first.worker_id
    stop_group(first)
    try:
        second = spawn_worker("--concurrency", "1")
        # The second worker recovers the expired lease (lost attempt) and runs attempt 2.
        wait_for(
            lambda: Job.objects.filter(id=jid, state=JobState.SUCCEEDED).exists(),
            timeout=LEASE_SECONDS + 30,
            what="the second worker to recover and finish the job",
        )
    finally:
        first.signal_group(signal.SIGCONT)
    done = Job.objects.get(id=jid)
    assert done.worker_id == second.worker_id

    # The first worker wakes up and finds its lease gone: it abandons the job (stopping the
    # stale run if it is still going, so it never runs beside the new owner) or, if the run
    # ended first, its write is refused. Either way it says so and changes nothing.
    wait_for(lambda: first.logged("lease lost"), timeout=15, what="the first worker to notice")
    after = Job.objects.get(id=jid)
    assert after.state == JobState.SUCCEEDED
    assert after.worker_id == second.worker_id
    assert after.finished_at == done.finished_at
    assert after.attempt == 2
    history = attempts_of(jid)
    assert [(a.number, a.outcome) for a in history] == [
        (1, AttemptOutcome.LOST),
        (2, AttemptOutcome.SUCCEEDED),
    ]
    assert history[0].error_type == "WorkerLost"
    assert history[0].worker_id == first.worker_id
    assert history[1].worker_id == second.worker_id

    assert first.alive(), first.output()
    stop_cleanly(first)
    stop_cleanly(second)
    assert Attempt.objects.filter(job_id=jid).count() == 2
    assert_nothing_running()


def holds_within(predicate, seconds):
    """Whether `predicate` becomes true within `seconds` (polling; for asserting absence)."""
    try:
        wait_for(predicate, timeout=seconds, what="")
        return True
    except AssertionError:
        return False


@pytest.mark.slow
def test_executor_does_not_start_a_job_whose_lease_its_stalled_worker_lost(
    fast_leases, spawn_worker, subprocess_env
):
    """The worker process stalls (GC pause, blocked on a lock, swapped out) while its executor
    still has claimed jobs in hand. Once the leases are recovered elsewhere, the executor must
    not start them: they belong to another worker now."""
    first = spawn_worker("--concurrency", "1")
    # Short jobs first, so that the worker sends its executor several jobs per chunk.
    warmup = tasks.ledger_span.enqueue_many([((f"w{i}", 0), {}) for i in range(30)])
    wait_for(lambda: all_terminal(warmup), timeout=30, what="the warm-up jobs")
    with transaction.atomic():  # claimed together, sent in one chunk: long, then queued
        long = job_id(tasks.ledger_span.using(priority=10).enqueue("long", LEASE_SECONDS * 2))
        queued = job_id(tasks.ledger_span.enqueue("queued", 0))
    wait_for(lambda: started(subprocess_env, "long"), timeout=30, what="the long job to start")
    assert Job.objects.get(id=queued).worker_id == first.worker_id  # claimed with it
    stop_group(first, only_the_worker=True)
    try:
        second = spawn_worker("--concurrency", "1")
        wait_for(
            lambda: Job.objects.filter(id=queued, state=JobState.SUCCEEDED).exists(),
            timeout=LEASE_SECONDS + 30,
            what="the second worker to recover and run the queued job",
        )
        recovered = attempts_of(queued)[0]
        assert (recovered.outcome, recovered.worker_id) == (AttemptOutcome.LOST, first.worker_id)
        # The executor does not run the long job past its lease either: it stops itself, so
        # the job never runs in two places at once once the second worker recovers it.
        wait_for(
            lambda: Job.objects.filter(id=long, state=JobState.SUCCEEDED).exists(),
            timeout=LEASE_SECONDS * 4 + 30,
            what="the second worker to recover and finish the long job",
        )
        assert not any(
            e.name == "end:long" and e.pgid == first.pid for e in read_events(subprocess_env)
        ), "the stalled worker's executor ran the long job past its lease"
        restarted = holds_within(
            lambda: any(
                e.name == "start:queued" and e.pgid == first.pid
                for e in read_events(subprocess_env)
            ),
            2,
        )
    finally:
        first.signal(signal.SIGCONT)
    assert not restarted, "the stalled worker's executor started a job recovered elsewhere"
    stop_cleanly(first)
    stop_cleanly(second)
    assert Job.objects.get(id=queued).worker_id == second.worker_id
    assert [(a.outcome, a.worker_id) for a in attempts_of(long)] == [
        (AttemptOutcome.LOST, first.worker_id),
        (AttemptOutcome.SUCCEEDED, second.worker_id),
    ]


@pytest.mark.slow
def test_a_job_stopped_because_its_stalled_worker_let_the_lease_lapse_is_lost_not_crashed(
    fast_leases, spawn_worker, subprocess_env
):
    """The worker cannot renew (it stalls, or its database is unreachable) and no other worker
    recovers the job: the executor stops the job once the lease lapsed. The task did not crash:
    the attempt is lost, and a task that dead-letters on a crash is retried."""
    key = "lapsed"
    jid = job_id(tasks.long_first_attempt_no_crash_retry.enqueue(key, LEASE_SECONDS * 4))
    worker = spawn_worker("--concurrency", "1")
    wait_for(lambda: started(subprocess_env, key), timeout=30, what="the job to start")
    stop_group(worker, only_the_worker=True)
    try:
        # The executor runs on alone and stops itself once the lease has lapsed.
        time.sleep(LEASE_SECONDS * 1.5)
    finally:
        worker.signal(signal.SIGCONT)
    wait_for(lambda: all_terminal([jid]), timeout=LEASE_SECONDS * 4 + 30, what="the job")
    assert Job.objects.get(id=jid).state == JobState.SUCCEEDED, worker.output()
    first = attempts_of(jid)[0]
    assert (first.outcome, first.error_type) == (AttemptOutcome.LOST, "WorkerLost")
    names = [e.name for e in read_events(subprocess_env)]
    assert (names.count(f"start:{key}"), names.count(f"end:{key}")) == (2, 1)
    assert worker.alive(), worker.output()
    stop_cleanly(worker)
    assert_nothing_running()


# --- graceful shutdown ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("to_group", [False, True], ids=["worker-pid", "process-group"])
def test_sigterm_lets_short_job_finish_and_hands_back_long_one(
    fast_leases, spawn_worker, subprocess_env, to_group
):
    shutdown_timeout = 3
    long = job_id(tasks.slow_first_attempt.enqueue("long", 60))
    short = job_id(tasks.ledger_span.enqueue("short", 1.0))
    worker = spawn_worker("--concurrency", "2", "--shutdown-timeout", str(shutdown_timeout))
    wait_for(lambda: started(subprocess_env, "long", "short"), timeout=30, what="both to start")

    signalled = time.monotonic()
    if to_group:
        worker.signal_group(signal.SIGTERM)  # as systemd (KillMode=control-group) or Ctrl-C do
    else:
        worker.signal(signal.SIGTERM)
    code = worker.wait(shutdown_timeout + 10)
    elapsed = time.monotonic() - signalled
    assert code == 0, worker.output()
    assert elapsed <= shutdown_timeout + 2, f"exit took {elapsed:.1f}s"
    assert_nothing_running()
    assert_node_stopped(worker.worker_id)

    assert Job.objects.get(id=short).state == JobState.SUCCEEDED
    handed_back = Job.objects.get(id=long)
    assert handed_back.state in (JobState.RETRYING, JobState.PENDING)
    assert handed_back.attempt == 1  # the interrupted attempt counts
    (interrupted,) = attempts_of(long)
    assert interrupted.outcome == AttemptOutcome.INTERRUPTED
    assert interrupted.error_type == "WorkerShutdown"
    assert worker.logged(f"job {long} (tests.tasks.slow_first_attempt) interrupted by the worker")
    assert not worker.logged(f"job {long} (tests.tasks.slow_first_attempt) failed attempt")

    # The job goes back in line and its next attempt succeeds.
    again = spawn_worker("--concurrency", "1", "--burst")
    assert again.wait(60) == 0, again.output()
    finished = Job.objects.get(id=long)
    assert finished.state == JobState.SUCCEEDED
    assert finished.return_value == 2
    assert [a.outcome for a in attempts_of(long)] == [
        AttemptOutcome.INTERRUPTED,
        AttemptOutcome.SUCCEEDED,
    ]
    assert_attempt_history_consistent([long, short])


@pytest.mark.slow
def test_repeated_sigterm_mid_drain_never_runs_a_job_twice_or_loses_one(
    fast_leases, spawn_worker, subprocess_env
):
    """Workers stopped over and over while draining many short jobs: the jobs they had claimed
    but not started are handed back uncounted, and no job runs twice."""
    calls = [((f"d{i}", 0.01), {}) for i in range(300)]
    ids = tasks.ledger_span.enqueue_many(calls)
    for cycle in range(4):
        worker = spawn_worker("--concurrency", "2", "--shutdown-timeout", "5")
        done_before = Job.objects.filter(id__in=ids, state=JobState.SUCCEEDED).count()
        wait_for(
            lambda n=done_before: (
                Job.objects.filter(id__in=ids, state=JobState.SUCCEEDED).count() >= n + 30
            ),
            timeout=30,
            what=f"progress in cycle {cycle}",
        )
        if cycle % 2:
            worker.signal_group(signal.SIGTERM)
        else:
            worker.signal(signal.SIGTERM)
        assert worker.wait(15) == 0, worker.output()
        assert_nothing_running()
        assert_attempt_history_consistent(ids)
    last = spawn_worker("--concurrency", "2", "--burst")
    assert last.wait(120) == 0, last.output()

    assert set(states_of(ids).values()) == {JobState.SUCCEEDED}
    assert_attempt_history_consistent(ids)
    outcomes = set(Attempt.objects.filter(job_id__in=ids).values_list("outcome", flat=True))
    assert outcomes == {AttemptOutcome.SUCCEEDED}, outcomes  # 10 ms jobs finish in the drain
    spans = spans_by_key(read_events(subprocess_env))
    twice = {k: v for k, v in spans.items() if len(v) != 1}
    assert not twice, twice
    assert len(spans) == 300


@pytest.mark.slow
def test_second_signal_exits_at_once_and_still_records_the_interrupted_job(
    fast_leases, spawn_worker, subprocess_env
):
    long = job_id(tasks.slow_first_attempt.enqueue("long", 60))
    worker = spawn_worker("--concurrency", "1", "--shutdown-timeout", "60")
    wait_for(lambda: started(subprocess_env, "long"), timeout=30, what="the job to start")
    worker.signal(signal.SIGTERM)
    wait_for(lambda: worker.logged("received SIGTERM"), timeout=10, what="the first signal")
    assert worker.alive()  # draining: the job has 60 s
    worker.signal(signal.SIGINT)
    signalled = time.monotonic()
    code = worker.wait(15)
    assert code is not None, "a second signal did not stop the worker"
    assert time.monotonic() - signalled < 5
    assert code != 0 or worker.logged("again")  # an interrupted exit, reported as such
    assert_nothing_running()
    assert_node_stopped(worker.worker_id)
    (attempt,) = attempts_of(long)
    assert attempt.outcome == AttemptOutcome.INTERRUPTED
    assert Job.objects.get(id=long).state in (JobState.RETRYING, JobState.PENDING)


def test_burst_and_max_jobs_exits_leave_nothing_running(run_worker):
    ids = [job_id(tasks.record.enqueue(f"b{i}")) for i in range(12)]
    limited = run_worker("--concurrency", "2", "--max-jobs", "5", "--worker-id", "limited")
    assert limited.returncode == 0, limited.stdout + limited.stderr
    assert_nothing_running()
    assert_node_stopped("limited")
    states = states_of(ids)
    assert sum(1 for s in states.values() if s == JobState.SUCCEEDED) == 5
    untouched = Job.objects.filter(id__in=ids, state=JobState.PENDING)
    assert untouched.count() == 7
    assert not untouched.exclude(attempt=0).exists()  # handed back unclaimed jobs cost nothing

    burst = run_worker("--concurrency", "2", "--worker-id", "burst")
    assert burst.returncode == 0, burst.stdout + burst.stderr
    assert set(states_of(ids).values()) == {JobState.SUCCEEDED}
    assert_nothing_running()
    assert_node_stopped("burst")
    assert_attempt_history_consistent(ids)


# --- hard timeouts and crashing executors --------------------------------------------------------


@pytest.mark.slow
def test_job_ignoring_its_timeout_is_stopped_and_dead_lettered_while_neighbour_succeeds(
    fast_leases, spawn_worker, subprocess_env
):
    spin = job_id(tasks.ignores_timeout.enqueue("spin"))
    neighbours = [job_id(tasks.ledger_span.enqueue(f"n{i}", 0.4)) for i in range(3)]
    worker = spawn_worker("--concurrency", "2")
    wait_for(lambda: all_terminal([spin, *neighbours]), timeout=60, what="all jobs to end")

    job = Job.objects.get(id=spin)
    assert job.state == JobState.DEAD_LETTER
    assert job.dead_letter_reason == DeadLetterReason.EXHAUSTED
    history = attempts_of(spin)
    assert [a.outcome for a in history] == [AttemptOutcome.FAILED] * 2
    assert {a.error_type for a in history} == {"JobTimeout"}
    assert job.error_type == "JobTimeout"
    assert sum(1 for e in read_events(subprocess_env) if e.name == "spin") == 2

    assert set(states_of(neighbours).values()) == {JobState.SUCCEEDED}
    spans = spans_by_key(read_events(subprocess_env))
    first_spin = history[0]
    # One neighbour ran beside the spinning job, in the same worker.
    beside = [
        s
        for i in range(3)
        for s in spans[f"n{i}"]
        if s.pgid == worker.pid and s.start < first_spin.finished_at.timestamp()
    ]
    assert beside, (spans, first_spin.started_at, first_spin.finished_at)
    assert worker.alive(), worker.output()
    stop_cleanly(worker)
    assert_nothing_running()


def test_executor_killed_under_the_worker_is_a_failed_attempt_and_the_worker_survives(
    run_worker, subprocess_env
):
    jid = job_id(tasks.dies_first_attempt.enqueue("dies"))
    other = job_id(tasks.record.enqueue("bystander"))
    done = run_worker("--concurrency", "1", "--worker-id", "survivor")
    assert done.returncode == 0, done.stdout + done.stderr
    job = Job.objects.get(id=jid)
    assert job.state == JobState.SUCCEEDED
    assert job.return_value == 2
    assert [a.outcome for a in attempts_of(jid)] == [
        AttemptOutcome.FAILED,
        AttemptOutcome.SUCCEEDED,
    ]
    assert Job.objects.get(id=other).state == JobState.SUCCEEDED
    assert_node_stopped("survivor")
    assert_nothing_running()


# --- database faults ---------------------------------------------------------------------------


@pytest.mark.slow
def test_pg_terminate_backend_storm_fails_no_job_and_kills_no_worker(
    fast_leases, spawn_worker, subprocess_env
):
    skip_unless_postgres()
    rng = random.Random()
    calls = [((f"pg{i}", rng.uniform(0.05, 0.1)), {}) for i in range(300)]
    ids = tasks.ledger_span.enqueue_many(calls)
    workers = [spawn_worker("--concurrency", "2") for _ in range(2)]
    for w in workers:
        wait_started(w)

    terminated, rounds = 0, 0
    storm_began = time.monotonic()
    while not all_terminal(ids):
        assert time.monotonic() - storm_began < 120, "jobs did not drain under the storm"
        terminated += terminate_worker_connections()
        rounds += 1
        for w in workers:
            assert w.alive(), f"{w.worker_id} died under the storm:\n{w.output()}"
        time.sleep(rng.uniform(0.1, 0.3))  # pacing of the storm
    assert rounds >= 10 and terminated >= 10, (rounds, terminated)
    assert any(w.logged("database unavailable") for w in workers)
    # Once the storm is over, every worker is back: its heartbeat lands again.
    calm = timezone.now()
    wait_for(
        lambda: (
            WorkerNode.objects.filter(
                id__in=[w.worker_id for w in workers], last_heartbeat_at__gt=calm
            ).count()
            == len(workers)
        ),
        timeout=30,
        what="heartbeats after the storm",
    )

    assert set(states_of(ids).values()) == {JobState.SUCCEEDED}
    assert_attempt_history_consistent(ids)
    for w in workers:
        assert w.alive(), w.output()
        stop_cleanly(w)
    assert_nothing_running()


def cut_off(refused: bool):
    """New connections to the test database refused (or allowed again), as in an outage; the
    test's own connection stays."""
    with another_session("postgres", autocommit=True) as other:
        name = connection.ops.quote_name(connection.settings_dict["NAME"])
        other.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS {'false' if refused else 'true'}")


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["", "4"], ids=["connections", "connection-pool"])
@pytest.mark.parametrize("reports", [False, True], ids=["quiet", "reporting"])
def test_an_outage_longer_than_the_lease_runs_no_job_that_finished_during_it_again(
    fast_leases, spawn_worker, subprocess_env, pool, reports
):
    skip_unless_postgres()
    from jobs.db.pooler import is_pooled

    if is_pooled(connection):
        pytest.skip("a transaction pooler keeps its server sessions through the cut-off")
    # With Django's pool a call waits out the outage inside the pool instead of failing.
    subprocess_env["JOBSITE_DB_POOL"] = pool
    busy = spawn_worker("--concurrency", "1", "--queue", "outage")
    idle = spawn_worker("--concurrency", "1", "--queue", "elsewhere")
    for w in (busy, idle):
        wait_started(w)
    # A job that reports progress and logs lines writes its last ones as it ends, before its
    # outcome goes back: an outage must not hold that outcome back past the lease.
    task = tasks.ledger_span_reporting if reports else tasks.ledger_span
    jid = job_id(task.using(queue_name="outage").enqueue("outage", 1))
    wait_for(lambda: started(subprocess_env, "outage"), timeout=30, what="the job to start")
    cut_off(True)
    try:
        terminate_worker_connections()
        assert Job.objects.get(id=jid).state == JobState.RUNNING
        # The job ends during the outage, its lease runs out; its worker holds the outcome.
        wait_for(
            lambda: any(e.kind == "end" and e.key == "outage" for e in read_events(subprocess_env)),
            timeout=10,
            what="the job to end",
        )
        time.sleep(LEASE_SECONDS + 1)
        # The other worker gets the database back first.
        busy.signal(signal.SIGSTOP)
    finally:
        cut_off(False)
    try:
        # Its first maintenance after the outage: where it would recover the busy one's job.
        wait_for(
            lambda: idle.logged("database reachable again") or idle.logged("recovered job"),
            timeout=20,
            what="the idle worker's first maintenance after the outage",
        )
    finally:
        busy.signal(signal.SIGCONT)
    wait_for(
        lambda: Job.objects.filter(id=jid, state=JobState.SUCCEEDED).exists(),
        timeout=30,
        what="the busy worker to record its outcome",
    )
    assert [(a.number, a.outcome) for a in attempts_of(jid)] == [(1, AttemptOutcome.SUCCEEDED)]
    assert [e.kind for e in read_events(subprocess_env) if e.key == "outage"] == ["start", "end"]
    assert not idle.logged("recovered job"), idle.output()
    assert idle.logged("other workers' expired leases are recovered from"), idle.output()
    stop_cleanly(busy)
    stop_cleanly(idle)
    assert_nothing_running()


@pytest.mark.slow
def test_a_worker_on_djangos_pool_tries_the_database_again_without_waiting_in_the_pool(
    fast_leases, spawn_worker, subprocess_env
):
    skip_unless_postgres()
    from jobs.db.pooler import is_pooled

    if is_pooled(connection):
        pytest.skip("a transaction pooler keeps its server sessions through the cut-off")
    subprocess_env["JOBSITE_DB_POOL"] = "3"
    worker = spawn_worker("--concurrency", "1")
    wait_started(worker)
    cut_off(True)
    try:
        terminate_worker_connections()
        # Each try fails at once and the next follows within its reconnect delay (at most
        # 5 s); a pooled connection would wait psycopg_pool's 30 s inside the pool each time.
        wait_for(
            lambda: worker.output().count("database unavailable") >= 3,
            timeout=20,
            what="three tries of the database",
        )
    finally:
        cut_off(False)
    wait_for(lambda: worker.logged("database reachable again"), timeout=30, what="the worker back")
    stop_cleanly(worker)
    assert_nothing_running()


def test_worker_whose_idle_connection_was_cut_still_marks_its_node_stopped(spawn_worker):
    skip_unless_postgres()
    from jobs.db.pooler import is_pooled

    if is_pooled(connection):
        pytest.skip("through a transaction pooler a waiting worker holds no session to cut")
    for _ in range(5):
        worker = spawn_worker("--concurrency", "1")
        wait_started(worker)
        wait_for(lambda w=worker: w.logged("started"), timeout=30, what="the start-up log")
        # Cut the connection while the worker waits for work, then ask it to stop at once.
        assert terminate_worker_connections() >= 1
        worker.signal(signal.SIGTERM)
        assert worker.wait(15) == 0, worker.output()
        if not worker.logged("database unavailable"):
            break  # it did not touch the database in between: the case under test
    else:
        pytest.skip("the worker kept reconnecting before the signal; case not reached")
    assert_node_stopped(worker.worker_id)


@pytest.mark.slow
def test_sqlite_lock_contention_never_surfaces_as_a_job_failure(
    fast_leases, spawn_worker, subprocess_env
):
    skip_unless_sqlite()
    workers = [spawn_worker("--concurrency", "2") for _ in range(3)]
    ids = []
    # The enqueuer races the workers' claims, heartbeats and finishes for the write lock, and
    # half the jobs write to the database themselves.
    for i in range(300):
        if i % 2:
            ids.append(job_id(tasks.writes_db.enqueue(f"w{i}")))
        else:
            ids.append(job_id(tasks.ledger_span.enqueue(f"s{i}", 0.005)))
    wait_for(lambda: all_terminal(ids), timeout=120, what="all jobs to end")
    assert set(states_of(ids).values()) == {JobState.SUCCEEDED}
    locked = Attempt.objects.filter(job_id__in=ids).filter(
        Q(error_type__icontains="locked")
        | Q(error_message__icontains="locked")
        | Q(error_traceback__icontains="locked")
    )
    assert not locked.exists(), list(locked.values_list("error_message", flat=True)[:5])
    assert Attempt.objects.filter(job_id__in=ids, outcome=AttemptOutcome.SUCCEEDED).count() == 300
    for w in workers:
        assert w.alive(), w.output()
        stop_cleanly(w)
    assert_nothing_running()


# --- cancelling a running job --------------------------------------------------------------------


@pytest.mark.slow
def test_cooperative_cancel_of_running_job_ends_cancelled(
    fast_leases, spawn_worker, subprocess_env
):
    jid = job_id(tasks.cooperative.enqueue("coop"))
    worker = spawn_worker("--concurrency", "1")
    wait_for(lambda: started(subprocess_env, "coop"), timeout=30, what="the job to start")
    assert cancel(jid) is True
    wait_for(lambda: all_terminal([jid]), timeout=30, what="the cancelled job to end")
    assert any(e.name == "noticed:coop" for e in read_events(subprocess_env))
    job = Job.objects.get(id=jid)
    assert job.state == JobState.CANCELLED, (job.state, attempts_of(jid))
    assert [a.outcome for a in attempts_of(jid)] == [AttemptOutcome.CANCELLED]
    stop_cleanly(worker)
    assert_nothing_running()


@pytest.mark.slow
def test_cancel_ignored_by_the_job_is_enforced_after_the_grace_period(
    fast_leases, spawn_worker, subprocess_env
):
    jid = job_id(tasks.ignores_cancel.enqueue("stubborn"))
    worker = spawn_worker("--concurrency", "1")
    wait_for(lambda: started(subprocess_env, "stubborn"), timeout=30, what="the job to start")
    assert cancel(jid) is True
    wait_for(
        lambda: all_terminal([jid]),
        timeout=CANCEL_GRACE_SECONDS + LEASE_SECONDS + 20,
        what="the cancelled job to be stopped",
    )
    job = Job.objects.get(id=jid)
    assert job.state == JobState.CANCELLED
    (attempt,) = attempts_of(jid)
    assert attempt.outcome == AttemptOutcome.CANCELLED
    assert attempt.error_type == "JobCancelled"
    assert worker.logged("did not stop within")
    assert not any(e.name == "end:stubborn" for e in read_events(subprocess_env))

    # The executor was replaced: the worker still runs jobs.
    after = job_id(tasks.ledger_span.enqueue("after-cancel", 0.01))
    wait_for(lambda: all_terminal([after]), timeout=30, what="a job after the cancel")
    assert Job.objects.get(id=after).state == JobState.SUCCEEDED
    stop_cleanly(worker)
    assert_nothing_running()


# --- the contract's names, and rows that must not take workers down -----------------------------


def test_error_types_of_engine_failures_are_the_contract_names(run_worker):
    spin = job_id(tasks.ignores_timeout.using(max_attempts=1).enqueue("named"))
    done = run_worker("--concurrency", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    (attempt,) = attempts_of(spin)
    # CONTRACT.md section 5: "counted as a failed attempt (`error_type` `JobTimeout`)".
    assert attempt.error_type == "JobTimeout"
    assert Job.objects.get(id=spin).error_type == "JobTimeout"


@pytest.mark.slow
def test_job_interrupted_on_its_100th_attempt_does_not_crash_workers(
    fast_leases, spawn_worker, subprocess_env, run_worker
):
    jid = job_id(tasks.ignores_cancel.using(max_attempts=100).enqueue("hundredth"))
    # As if 99 attempts had failed: the worker below runs the 100th and last one.
    Job.objects.filter(id=jid).update(attempt=99)
    worker = spawn_worker("--concurrency", "1", "--shutdown-timeout", "0.5")
    wait_for(lambda: started(subprocess_env, "hundredth"), timeout=30, what="the job to start")
    assert Job.objects.get(id=jid).attempt == 100
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.output()

    after = run_worker("--concurrency", "1", timeout=60)
    assert after.returncode == 0, after.stdout + after.stderr
    job = Job.objects.get(id=jid)
    assert job.state in (JobState.DEAD_LETTER, JobState.SUCCEEDED), job.state
    assert job.attempt <= job.max_attempts <= 100


def test_unbounded_exponential_backoff_late_in_a_job_does_not_wedge_or_crash_the_worker(
    run_worker, subprocess_env
):
    jid = job_id(tasks.fails_with_unbounded_backoff.enqueue("late"))
    Job.objects.filter(id=jid).update(attempt=79)  # as if 79 attempts had failed
    done = run_worker("--concurrency", "1", timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    job = Job.objects.get(id=jid)
    assert job.state == JobState.RETRYING
    assert [a.number for a in attempts_of(jid)] == [80]
    assert WorkerNode.objects.exclude(stopped_at=None).exists()
