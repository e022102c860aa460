"""Flow control with real workers: what ran, read from the ledger the tasks write.

Each test starts real `manage.py worker` processes with LIMITS given through JOBSITE_LIMITS,
on the database the suite runs on (SQLite, or PostgreSQL in CI's other leg).
"""

import json
import signal

import pytest

from jobs.models import Attempt, Job
from jobs.states import AttemptOutcome, DeadLetterReason, JobState
from tests import tasks
from tests.reliability_helpers import (
    all_terminal,
    read_events,
    spans_by_key,
    wait_for,
    wait_started,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def limits_env(env, limits):
    env["JOBSITE_LIMITS"] = json.dumps(limits)
    return env


def spans(env):
    return [s for found in spans_by_key(read_events(env)).values() for s in found]


def most_at_once(found, horizon) -> int:
    """The largest number of spans running at one instant (an end before a start at a tie)."""
    edges = []
    for s in found:
        edges.append((s.start, 1))
        edges.append((s.end if s.end is not None else horizon, -1))
    now = best = 0
    for _, step in sorted(edges):
        now += step
        best = max(best, now)
    return best


def wait_first_start(env, key_prefix, what):
    """Until the ledger shows a ledger_span job whose key starts with `key_prefix` started."""
    wait_for(
        lambda: any(e.name.startswith(f"start:{key_prefix}") for e in read_events(env)),
        timeout=30,
        what=what,
    )


def stop_all(workers):
    for w in workers:
        if w.alive():
            w.signal(signal.SIGTERM)
    for w in workers:
        w.wait(30)


def test_a_queue_limit_of_three_holds_across_three_workers_of_four_slots_and_is_reached(
    subprocess_env, spawn_worker
):
    limits_env(subprocess_env, {"queue:capped": {"concurrency": 3}})
    ids = [tasks.ledger_span.using(queue_name="capped").enqueue(f"c{i}", 0.3).id for i in range(24)]
    workers = [spawn_worker("--concurrency", "4") for _ in range(3)]
    try:
        wait_for(lambda: all_terminal(ids), timeout=90, what="the capped queue to drain")
    finally:
        stop_all(workers)
    found = spans(subprocess_env)
    assert len(found) == 24
    assert most_at_once(found, horizon=float("inf")) == 3
    assert set(Job.objects.filter(id__in=ids).values_list("state", "attempt")) == {
        (JobState.SUCCEEDED, 1)
    }


def test_a_task_rate_limit_holds_in_every_window_across_two_workers(subprocess_env, spawn_worker):
    limits_env(subprocess_env, {"task:tests.tasks.record": {"rate": [10, 2]}})
    ids = [tasks.record.enqueue(f"r{i}").id for i in range(30)]
    workers = [spawn_worker("--concurrency", "4") for _ in range(2)]
    try:
        wait_for(lambda: all_terminal(ids), timeout=60, what="the rate-limited jobs")
    finally:
        stop_all(workers)
    starts = sorted(e.at for e in read_events(subprocess_env))
    assert len(starts) == 30
    busiest = max(sum(1 for t in starts if first <= t < first + 2) for first in starts)
    assert busiest == 10, " ".join(f"{t - starts[0]:.3f}" for t in starts)


def test_a_key_with_a_big_backlog_does_not_make_another_keys_later_jobs_wait(
    subprocess_env, spawn_worker
):
    limits_env(subprocess_env, {"key:tenant-*": {"concurrency": 2}})
    big = tasks.record.using(limit_key="tenant-big")
    small = tasks.record.using(limit_key="tenant-small")
    big_ids = [big.enqueue(f"big-{i}").id for i in range(400)]
    small_ids = [small.enqueue(f"small-{i}").id for i in range(10)]
    worker = spawn_worker("--concurrency", "4")
    try:
        wait_for(lambda: all_terminal(small_ids), timeout=60, what="the small tenant's jobs")
        big_done = Job.objects.filter(id__in=big_ids, state=JobState.SUCCEEDED).count()
    finally:
        stop_all([worker])
    assert big_done < 100, "the small tenant waited behind the big tenant's backlog"
    order = [e.name for e in sorted(read_events(subprocess_env), key=lambda e: e.at)]
    last_small = max(i for i, name in enumerate(order) if name.startswith("small-"))
    assert sum(1 for name in order[:last_small] if name.startswith("big-")) < 60


@pytest.mark.parametrize(
    "limits", [{"key:tenant-*": {"concurrency": 1}}, {}], ids=["a key limit", "no limit"]
)
def test_a_key_that_comes_later_takes_turns_while_every_executor_is_busy_with_another_key(
    subprocess_env, spawn_worker, limits
):
    # One executor, a key with room for it and a backlog: each claim takes one job, and it
    # went to the key with the oldest job every time, so the later key waited for the whole
    # backlog. With no limit in force, keyed jobs take turns all the same.
    limits_env(subprocess_env, limits)
    early = tasks.ledger_span.using(limit_key="tenant-early")
    early.enqueue_many([((f"early-{i}", 0.05), {}) for i in range(150)])
    worker = spawn_worker("--concurrency", "1")
    try:
        wait_first_start(subprocess_env, "early-", "the early key's first job to start")
        later = tasks.ledger_span.using(limit_key="tenant-later")
        later_ids = [later.enqueue(f"later-{i}", 0.05).id for i in range(3)]
        wait_for(lambda: all_terminal(later_ids), timeout=60, what="the later key's jobs")
    finally:
        stop_all([worker])
    order = [e.name for e in sorted(read_events(subprocess_env), key=lambda e: e.at)]
    last_later = max(i for i, name in enumerate(order) if name == "start:later-2")
    early_before = sum(1 for name in order[:last_later] if name.startswith("start:early-"))
    assert early_before < 100, "the later key waited behind the early key's backlog"


def test_jobs_under_no_limit_are_not_delayed_by_held_ones(subprocess_env, spawn_worker):
    limits_env(subprocess_env, {"queue:capped": {"concurrency": 1}})
    capped = [
        tasks.ledger_span.using(queue_name="capped").enqueue(f"held-{i}", 0.5).id for i in range(20)
    ]
    free = [tasks.record.using(queue_name="free").enqueue(f"free-{i}").id for i in range(10)]
    worker = spawn_worker("--concurrency", "3")
    try:
        wait_for(lambda: all_terminal(free), timeout=60, what="the jobs under no limit")
        capped_left = Job.objects.filter(id__in=capped).exclude(state=JobState.SUCCEEDED).count()
    finally:
        stop_all([worker])
    assert capped_left >= 15
    assert not Attempt.objects.filter(job_id__in=capped).exclude(outcome="succeeded").exists()


def test_jobs_under_no_limit_pass_a_held_backlog_longer_than_a_claim_reads(
    subprocess_env, spawn_worker
):
    # More held jobs than a claim reads at once (it reads a quarter more than the 500 it may
    # take), their budget already full when the others come: a claim that stopped at its
    # first read of them came back empty, and the jobs under no limit waited for the one
    # running held job to end.
    limits_env(subprocess_env, {"queue:capped": {"concurrency": 1}})
    capped = tasks.ledger_span.using(queue_name="capped").enqueue_many(
        [((f"held-{i}", 8), {}) for i in range(1000)]
    )
    worker = spawn_worker("--concurrency", "3")
    try:
        wait_first_start(subprocess_env, "held-", "the capped queue's one job to start")
        free = [tasks.record.using(queue_name="free").enqueue(f"free-{i}").id for i in range(10)]
        wait_for(lambda: all_terminal(free), timeout=60, what="the jobs under no limit")
    finally:
        stop_all([worker])
    events = sorted(read_events(subprocess_env), key=lambda e: e.at)
    first_end = next(i for i, e in enumerate(events) if e.name.startswith("end:held-"))
    ran_free = [i for i, e in enumerate(events) if e.name.startswith("free-")]
    assert len(ran_free) == 10
    assert max(ran_free) < first_end, "the jobs under no limit waited for the held job to end"
    assert Attempt.objects.filter(job_id__in=capped).count() <= 2  # the backlog stayed held


def test_a_sigkilled_workers_slots_are_freed_within_the_lease(
    fast_leases, subprocess_env, spawn_worker
):
    limits_env(subprocess_env, {"key:tenant-*": {"concurrency": 2}})
    keyed = tasks.ledger_span.using(limit_key="tenant-1")
    # One attempt each: once recovered they are dead letters, not run again for a minute.
    first = [keyed.using(max_attempts=1).enqueue(f"long-{i}", 60).id for i in range(2)]
    doomed = spawn_worker("--concurrency", "4")
    wait_started(doomed)
    wait_for(
        lambda: Job.objects.filter(id__in=first, state=JobState.RUNNING).count() == 2,
        timeout=30,
        what="the key's two slots to be taken",
    )
    later = [keyed.enqueue(f"short-{i}", 0).id for i in range(2)]
    survivor = spawn_worker("--concurrency", "4")
    wait_started(survivor)
    assert not Job.objects.filter(id__in=later, state=JobState.RUNNING).exists()
    doomed.kill_group()
    try:
        # Lease 3 s, heartbeat 1 s: recovered within a few seconds, then the slots are free.
        wait_for(lambda: all_terminal(later), timeout=30, what="the key's later jobs")
    finally:
        stop_all([survivor])
    lost = Attempt.objects.filter(job_id__in=first, outcome=AttemptOutcome.LOST).count()
    assert lost == 2


def test_a_job_that_snoozes_twenty_times_then_fails_still_gets_all_its_attempts(run_worker):
    job_id = tasks.snoozes_then_fails.enqueue("snoozer", 20).id
    result = run_worker("--concurrency", "1")
    assert result.returncode == 0, result.stderr
    job = Job.objects.get(id=job_id)
    assert (job.state, job.dead_letter_reason) == (JobState.DEAD_LETTER, DeadLetterReason.EXHAUSTED)
    assert (job.attempt, job.max_attempts, job.snoozes) == (3, 3, 20)
    outcomes = list(Attempt.objects.filter(job=job).order_by("number").values_list("outcome"))
    assert [o for (o,) in outcomes] == ["snoozed"] * 20 + ["failed"] * 3


def test_a_job_snoozing_past_max_snoozes_is_dead_lettered(subprocess_env, run_worker):
    subprocess_env["JOBSITE_MAX_SNOOZES"] = "3"
    job_id = tasks.snoozes_then_fails.enqueue("sleeper", 1000).id
    result = run_worker("--concurrency", "1")
    assert result.returncode == 0, result.stderr
    job = Job.objects.get(id=job_id)
    assert (job.state, job.dead_letter_reason) == (
        JobState.DEAD_LETTER,
        DeadLetterReason.SNOOZED_TOO_OFTEN,
    )
    assert (job.attempt, job.snoozes) == (1, 3)


def test_the_worker_refuses_to_start_on_a_negative_max_snoozes(subprocess_env, run_worker):
    subprocess_env["JOBSITE_MAX_SNOOZES"] = "-1"
    result = run_worker("--concurrency", "1", timeout=60)
    assert result.returncode == 1
    assert "(jobs.E003) MAX_SNOOZES must be a whole number >= 0, not -1" in result.stderr


def test_the_circuit_breaker_pauses_its_queue_and_leaves_the_rest_waiting(
    subprocess_env, spawn_worker
):
    from jobs import queues
    from jobs.models import AuditEntry

    limits_env(subprocess_env, {"queue:webhooks": {"pause_after_failures": [3, 60]}})
    failing = tasks.always_fails.using(queue_name="webhooks", max_attempts=1)
    ids = [failing.enqueue(f"hook-{i}").id for i in range(20)]
    worker = spawn_worker("--concurrency", "1")
    try:
        wait_for(lambda: queues.is_paused("webhooks"), timeout=60, what="the breaker to trip")
        other = tasks.record.using(queue_name="other").enqueue("still-runs").id
        wait_for(lambda: all_terminal([other]), timeout=30, what="another queue's job")
    finally:
        stop_all([worker])
    waiting = Job.objects.filter(id__in=ids, state=JobState.PENDING).count()
    assert waiting >= 5
    assert Job.objects.filter(id__in=ids, state=JobState.DEAD_LETTER).count() >= 3
    (audit,) = AuditEntry.objects.filter(subject="webhooks", action="pause queue")
    assert audit.source == "breaker" and "circuit breaker" in audit.outcome


def test_a_burst_worker_waits_for_jobs_a_rate_limit_holds_then_exits(subprocess_env, run_worker):
    limits_env(subprocess_env, {"task:tests.tasks.record": {"rate": [5, 1]}})
    ids = [tasks.record.enqueue(f"b{i}").id for i in range(12)]
    result = run_worker("--concurrency", "2")
    assert result.returncode == 0, result.stderr
    assert all_terminal(ids)
    starts = sorted(e.at for e in read_events(subprocess_env))
    assert len(starts) == 12
    assert max(sum(1 for t in starts if first <= t < first + 1) for first in starts) <= 5
