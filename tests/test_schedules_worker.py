"""Schedules fired by real workers in subprocesses: crashes, restarts, downtime, pause."""

import json
import os
import signal
import statistics
from datetime import timedelta
from itertools import pairwise

import pytest

from jobs import schedules
from jobs.models import Job, Schedule
from jobs.states import JobState
from tests.reliability_helpers import wait_for
from tests.test_schedules import with_schedules

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EVERY = 2
TICK = {"tick": {"task": "tests.tasks.record", "args": ["tick"], "every": EVERY}}
STEP = timedelta(seconds=EVERY)


def fired(**filters):
    return list(
        Job.objects.filter(schedule="tick", scheduled_at__isnull=False, **filters).order_by(
            "scheduled_at"
        )
    )


def lateness(job) -> float:
    return (job.enqueued_at - job.scheduled_at).total_seconds()


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, proc.stdout.read()[-3000:]


def kill(proc):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def test_three_workers_killed_and_restarted_fire_each_fire_time_once_and_on_time(
    start_worker, subprocess_env
):
    subprocess_env["JOBSITE_SCHEDULES"] = json.dumps(TICK)
    workers = [start_worker("--concurrency", "1") for _ in range(3)]
    wait_for(lambda: fired(), timeout=60, what="the first fire")
    # Kill one worker at a time (SIGKILL, no clean-up) and start a new one in its place.
    for round_ in range(6):
        seen = len(fired())
        wait_for(lambda seen=seen: len(fired()) > seen, timeout=30, what="the next fire")
        victim = round_ % 3
        kill(workers[victim])
        workers[victim] = start_worker("--concurrency", "1")
    seen = len(fired())
    wait_for(lambda: len(fired()) >= seen + 2, timeout=30, what="fires after the last restart")
    for proc in workers:
        stop(proc)

    jobs = fired()
    times = [job.scheduled_at for job in jobs]
    assert len(times) >= 8
    # One job per fire time (the database allows no other), and no fire time skipped.
    assert all(b - a == STEP for a, b in pairwise(times)), times
    grace = schedules.DEFAULT_GRACE_SECONDS
    late = sorted(lateness(job) for job in jobs)
    assert late[-1] <= grace, late
    row = Schedule.objects.get(name="tick")
    assert (row.fires, row.missed) == (len(jobs), 0)
    print(
        f"\nlateness over {len(late)} fires, 3 workers with kills: "
        f"p50 {statistics.median(late):.3f}s, p99 {late[int(0.99 * (len(late) - 1))]:.3f}s, "
        f"max {late[-1]:.3f}s"
    )


@pytest.mark.parametrize("policy", ["latest", "skip", "all"])
def test_fire_times_missed_while_no_worker_ran_follow_the_policy(
    policy, start_worker, subprocess_env
):
    grace = 1
    subprocess_env["JOBSITE_SCHEDULES"] = json.dumps({"tick": {**TICK["tick"], "missed": policy}})
    subprocess_env["JOBSITE_SCHEDULE_GRACE_SECONDS"] = str(grace)
    worker = start_worker()
    wait_for(lambda: len(fired()) >= 2, timeout=60, what="two fires")
    stop(worker)
    last_before = fired()[-1].scheduled_at
    down_since = schedules.database_now()
    # Down for at least four fire times.
    wait_for(
        lambda: schedules.database_now() > down_since + 4 * STEP,
        timeout=30,
        what="time to pass",
        interval=0.2,
    )
    worker = start_worker()

    def on_time_again():
        recent = fired(scheduled_at__gt=down_since + 4 * STEP)
        return len([job for job in recent if lateness(job) <= grace]) >= 2

    wait_for(on_time_again, timeout=60, what="on-time fires after the restart")
    stop(worker)

    after = fired(scheduled_at__gt=last_before)
    span = (after[-1].scheduled_at - last_before) // STEP
    every_fire_time = [last_before + STEP * (i + 1) for i in range(span)]
    missing = sorted(set(every_fire_time) - {job.scheduled_at for job in after})
    # Enqueued well after their instant: only catch-ups (on-time jobs are within the grace).
    caught_up = [job for job in after if lateness(job) > grace + 1]
    assert Schedule.objects.get(name="tick").missed == len(missing)
    if policy == "all":
        assert missing == []
        assert len(caught_up) >= 2
        return
    assert len(missing) >= 2
    # Only fire times before the first job after the restart were passed over.
    assert all(t < after[0].scheduled_at for t in missing)
    assert all(b.scheduled_at - a.scheduled_at == STEP for a, b in pairwise(after[1:]))
    # One job, or none, for the whole outage: the first job after the restart is the fire time
    # right after the last one passed over (with "latest", the most recent at the restart).
    assert caught_up in ([], [after[0]])
    assert after[0].scheduled_at - missing[-1] == STEP


def test_a_pause_survives_a_restart_run_now_makes_one_job_and_resume_back_fills_nothing(
    start_worker, subprocess_env
):
    subprocess_env["JOBSITE_SCHEDULES"] = json.dumps(TICK)
    with with_schedules(TICK):
        worker = start_worker()
        wait_for(lambda: fired(), timeout=60, what="the first fire")
        assert schedules.pause("tick")
        paused_at = schedules.database_now()
        stop(worker)

        worker = start_worker()
        run_now = schedules.trigger("tick")
        wait_for(
            lambda: Job.objects.filter(id=run_now.id, state=JobState.SUCCEEDED).exists(),
            timeout=60,
            what="the run-now job to run",
        )
        # Several fire times pass while paused, with a worker running.
        wait_for(
            lambda: schedules.database_now() > paused_at + 3 * STEP,
            timeout=30,
            what="time to pass",
            interval=0.2,
        )
        assert not fired(scheduled_at__gt=paused_at)
        assert Schedule.objects.get(name="tick").paused

        assert schedules.resume("tick")
        resumed_at = schedules.database_now()
        wait_for(lambda: fired(scheduled_at__gt=resumed_at), timeout=30, what="a fire")
        stop(worker)

    assert not fired(scheduled_at__gt=paused_at, scheduled_at__lte=resumed_at)
    by_hand = Job.objects.filter(schedule="tick", scheduled_at__isnull=True)
    assert list(by_hand.values_list("id", flat=True)) == [run_now.id]


def test_a_worker_refuses_to_start_with_a_bad_schedule(run_worker, subprocess_env):
    subprocess_env["JOBSITE_SCHEDULES"] = json.dumps(
        {"nightly": {"task": "tests.tasks.record", "cron": "0 25 * * *"}}
    )
    proc = run_worker()
    assert proc.returncode != 0
    assert "schedule 'nightly': bad cron expression '0 25 * * *'" in proc.stderr
    assert not Job.objects.exists()
