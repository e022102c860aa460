"""The execution core under crashes, signals, hostile exceptions and mixed job lengths.

Real `manage.py worker` subprocesses against the test database (SQLite or PostgreSQL).
"""

import signal
from collections import Counter
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from jobs.compat import InvalidTask
from jobs.models import Attempt, CounterDelta, Job
from jobs.retry import Fixed
from jobs.states import JobState
from tests import tasks
from tests.reliability_helpers import (
    all_terminal,
    assert_attempt_history_consistent,
    assert_nothing_running,
    read_events,
    wait_for,
    wait_started,
)

pytestmark = pytest.mark.django_db(transaction=True)


def burst(run_worker, *args):
    proc = run_worker(*args)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout + proc.stderr


def starts(env):
    return Counter(e.key for e in read_events(env) if e.kind == "start")


def ends(env):
    return Counter(e.key for e in read_events(env) if e.kind == "end")


# --- crashes -------------------------------------------------------------------------------


def test_a_crash_storm_never_takes_the_worker_down_nor_runs_a_finished_job_again(
    spawn_worker, subprocess_env
):
    fast, crashers = [], []
    for chunk in range(20):
        keys = [f"fast-{chunk}-{i}" for i in range(49)]
        fast += tasks.ledger_span.enqueue_many([((k, 0), {}) for k in keys])
        crashers.append(tasks.exits_hard.enqueue(f"crash-{chunk}").id)
    worker = spawn_worker("--concurrency", "2")

    def drained():
        assert worker.alive(), f"the worker went down:\n{worker.output()[-3000:]}"
        return all_terminal(fast + crashers)

    wait_for(drained, timeout=240, what="1,000 jobs to finish")
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.output()[-3000:]

    started, ended = starts(subprocess_env), ends(subprocess_env)
    for job in Job.objects.filter(id__in=fast):
        key = job.args[0]
        assert job.state == JobState.SUCCEEDED, (key, job.state, job.error_message)
        assert (started[key], ended[key], job.attempt) == (1, 1, 1), key
    for job in Job.objects.filter(id__in=crashers):
        key = job.args[0]
        assert (job.state, job.dead_letter_reason) == ("dead_letter", "exhausted")
        assert started[key] == job.attempt == 2, key
        assert job.error_type == "ExecutorCrashed"
        assert job.error_message == "the process running the job exited with code 3"
    assert_attempt_history_consistent(fast + crashers)
    assert_nothing_running()


@pytest.mark.parametrize("task", [tasks.forks, tasks.forks_in_a_coroutine])
def test_a_task_whose_forked_child_returns_or_raises_leaves_the_executor_to_its_parent(
    run_worker, subprocess_env, task
):
    ends = {"returns": 0, "raises": 1, "exits": 5}  # the child's exit status, as Python's
    forking = [task.enqueue(child, child=child).id for child in ends]
    after = tasks.ledger_span.enqueue_many([((f"after-{i}", 0), {}) for i in range(20)])
    crash = tasks.exits_hard.enqueue("crash").id
    burst(run_worker, "--concurrency", "1")
    for job in Job.objects.filter(id__in=forking):
        assert job.state == JobState.SUCCEEDED, job.error_message
        assert job.return_value == ["the parent's value", ends[job.args[0]]]
    children = Counter(e.key for e in read_events(subprocess_env) if e.kind == "child")
    assert children == dict.fromkeys(ends, 1)  # each child did run
    assert all(j.state == JobState.SUCCEEDED for j in Job.objects.filter(id__in=after))
    # A crash after them is still seen as one: no forked copy answers for the executor.
    assert Job.objects.get(id=crash).error_type == "ExecutorCrashed"
    assert_nothing_running()


def test_a_task_may_start_processes_with_multiprocessing(run_worker):
    job = tasks.uses_multiprocessing.enqueue(10)
    burst(run_worker, "--concurrency", "1")
    job = Job.objects.get(id=job.id)
    assert (job.state, job.return_value) == (JobState.SUCCEEDED, [285, 0]), job.error_message
    assert_nothing_running()


def test_on_crash_dead_letter_stops_at_the_first_crash_and_retry_tries_again(run_worker):
    stop = tasks.segfaults_no_retry.enqueue("stop").id
    again = tasks.segfaults_then_succeeds.enqueue("again").id
    burst(run_worker, "--concurrency", "1")

    stopped = Job.objects.get(id=stop)
    assert (stopped.state, stopped.dead_letter_reason, stopped.attempt) == (
        "dead_letter",
        "crashed",
        1,
    )
    assert stopped.error_message == "the process running the job was killed by SIGSEGV"
    retried = Job.objects.get(id=again)
    assert (retried.state, retried.attempt, retried.return_value) == (
        "succeeded",
        2,
        "second time lucky",
    )
    assert [a.outcome for a in Attempt.objects.filter(job_id=again).order_by("number")] == [
        "failed",
        "succeeded",
    ]
    assert CounterDelta.objects.totals()["jobs_failed"] == 2  # each crashed attempt


def test_a_timeout_shorter_than_the_poll_interval_stops_every_job_that_runs_past_it(run_worker):
    # The worker polls once a second when it has a wake-up channel (both databases here). A
    # job's start shows in its executor's status and wakes nobody, so the worker must look
    # again within the timeout: before it did, some of these ran to the end and succeeded.
    jobs = [tasks.sleepy.using(timeout=0.3, max_attempts=1).enqueue(0.8) for _ in range(8)]
    output = burst(run_worker, "--concurrency", "4")
    ended = Job.objects.filter(id__in=[j.id for j in jobs]).values_list("state", "error_type")
    assert list(ended) == [("dead_letter", "JobTimeout")] * 8, output[-3000:]


def test_a_backoff_callable_gets_a_task_result_on_a_crash_and_on_a_timeout(
    run_worker, subprocess_env
):
    crashed = tasks.crashes_with_callable.enqueue("crash").id
    timed_out = tasks.sleeps_past_timeout_with_callable.enqueue("slow").id
    burst(run_worker, "--concurrency", "2")

    calls = [e.name for e in read_events(subprocess_env) if e.kind == "backoff"]
    assert "backoff:ExecutorCrashed:1:ExecutorCrashed" in calls
    assert "backoff:JobTimeout:1:JobTimeout" in calls
    assert "backoff:JobTimeout:2:JobTimeout,JobTimeout" in calls
    for job in Job.objects.filter(id__in=[crashed, timed_out]):
        assert (job.state, job.dead_letter_reason, job.attempt) == ("dead_letter", "exhausted", 2)


def test_a_backoff_callable_that_raises_dead_letters_the_job_and_is_logged(run_worker):
    job_id = tasks.fails_with_broken_backoff.enqueue("b").id
    output = burst(run_worker)
    job = Job.objects.get(id=job_id)
    assert (job.state, job.dead_letter_reason, job.attempt) == ("dead_letter", "backoff_failed", 1)
    assert "LookupError: this backoff is broken" in output  # with its traceback


# --- hostile exceptions and error text -------------------------------------------------------


def test_every_exception_a_task_raises_is_recorded_as_itself(run_worker):
    ids = {kind: tasks.raises_hostile.enqueue(kind).id for kind in tasks.HOSTILE}
    output = burst(run_worker, "--concurrency", "1")

    expected = {
        "str_raises": ("tests.tasks.StrRaises", "StrRaises('hidden')"),
        "str_not_a_string": ("tests.tasks.StrNotAString", "StrNotAString('hidden')"),
        "nothing_prints": ("tests.tasks.NothingPrints", "<unprintable NothingPrints>"),
        "keyboard_interrupt": ("KeyboardInterrupt", "pressed by the task"),
        "system_exit": ("SystemExit", "4"),
        "generator_exit": ("GeneratorExit", "closed"),
        "custom_base": ("tests.tasks.CustomBase", "a BaseException of its own"),
        "oddly_named": ("tests.odd\\x00module\\udc80.Odd\nName\\x00", "named oddly"),
    }
    for kind, job_id in ids.items():
        job = Job.objects.get(id=job_id)
        assert (job.error_type, job.error_message) == expected[kind], kind
        assert (job.state, job.dead_letter_reason) == ("dead_letter", "unrecoverable"), kind
        assert "raises_hostile" in job.error_traceback, kind
    assert "executor process" not in output  # no executor died


def test_a_snooze_of_any_length_waits_at_most_ten_years_and_a_broken_one_fails(run_worker):
    ids = {seconds: tasks.snoozes_for.enqueue(seconds).id for seconds in (1e9, 1e300, 10**400)}
    broken = tasks.snoozes_for.enqueue(None).id
    before = timezone.now()
    burst(run_worker)

    for seconds, job_id in ids.items():
        job = Job.objects.get(id=job_id)
        assert (job.state, job.snoozes, job.attempt) == (JobState.PENDING, 1, 0), seconds
        wait = job.run_after - before
        assert timedelta(days=3649) < wait < timedelta(days=3651), (seconds, job.run_after)
    job = Job.objects.get(id=broken)
    assert (job.state, job.attempt, job.snoozes) == (JobState.DEAD_LETTER, 2, 0)
    assert job.error_type == "tests.tasks.SnoozeOfItsOwn"


def test_a_huge_error_message_is_capped_and_cannot_forge_a_log_line(run_worker):
    job_id = tasks.raises_huge.enqueue(60_000).id
    output = burst(run_worker)
    job = Job.objects.get(id=job_id)
    assert len(job.error_message) <= 10_000
    assert job.error_message.endswith(" characters]") and "[cut: " in job.error_message
    assert len(job.error_traceback) <= 100_000
    attempt = Attempt.objects.get(job_id=job_id)
    assert len(attempt.error_message) <= 10_000
    assert max(len(line) for line in output.splitlines()) < 5_000


def test_a_newline_in_an_error_message_stays_inside_its_log_line(run_worker):
    tasks.raises_huge.enqueue(0)
    output = burst(run_worker)
    assert not any(line.startswith("FORGED") for line in output.splitlines())
    assert "\\nFORGED job 00000000" in output


def test_arguments_nested_5000_deep_are_refused_at_enqueue():
    nested = []
    for _ in range(5000):
        nested = [nested]
    with pytest.raises(ValueError, match="nested more than 100 levels deep"):
        tasks.echo.enqueue(nested)
    assert not Job.objects.exists()


# --- dispatch ----------------------------------------------------------------------------------


def test_a_short_job_never_waits_behind_a_long_one(spawn_worker, subprocess_env):
    warmup = tasks.ledger_span.enqueue_many([((f"warm-{i}", 0), {}) for i in range(300)])
    worker = spawn_worker("--concurrency", "2", "--shutdown-timeout", "0")
    wait_for(lambda: all_terminal(warmup), timeout=120, what="the warm-up jobs")

    tasks.ledger_span.enqueue("long", 20)
    short = [tasks.ledger_span.enqueue(f"short-{i}", 0.05).id for i in range(40)]

    def short_done():
        return all(
            s == JobState.SUCCEEDED
            for s in Job.objects.filter(id__in=short).values_list("state", flat=True)
        )

    wait_for(short_done, timeout=15, what="the short jobs, while the long one runs")
    assert ends(subprocess_env)["long"] == 0  # it is still running
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()[-3000:]


# --- signals to the whole process group ------------------------------------------------------


def sigterm_the_group_and_see_it_exit_cleanly(worker):
    """SIGTERM to the worker's whole process group (as a terminal's Ctrl-C or a supervisor
    sends it): the worker exits 0 and no process of the group starts after the signal."""
    members = worker.group_members()
    worker.signal_group(signal.SIGTERM)
    seen_after = set()
    while worker.wait(0.05) is None:
        seen_after |= worker.group_members()
    assert worker.proc.returncode == 0, worker.output()[-3000:]
    assert seen_after <= members, "an executor was started after the signal"


def test_sigterm_to_the_group_while_executors_boot_stops_cleanly(spawn_worker, subprocess_env):
    ids = tasks.ledger_span.enqueue_many([((f"boot-{i}", 0.1), {}) for i in range(10)])
    worker = spawn_worker("--concurrency", "4")
    # The worker, its resource tracker, its executors' fork server and the 4 executors, all
    # started: a process that shows up after the signal was started after it. A snapshot
    # taken earlier would race with the worker starting the rest before the signal.
    wait_for(lambda: len(worker.group_members()) >= 7, timeout=30, what="every executor to start")
    sigterm_the_group_and_see_it_exit_cleanly(worker)
    assert "executor process" not in worker.output()
    assert_nothing_running()
    assert max(starts(subprocess_env).values(), default=0) <= 1
    for job in Job.objects.filter(id__in=ids):
        assert job.state in (JobState.SUCCEEDED, JobState.PENDING), job.state


def test_sigterm_to_the_group_while_jobs_run_finishes_them_once(spawn_worker, subprocess_env):
    ids = tasks.ledger_span.enqueue_many([((f"run-{i}", 0.3), {}) for i in range(20)])
    worker = spawn_worker("--concurrency", "2")
    wait_started(worker)
    wait_for(lambda: starts(subprocess_env), timeout=30, what="a job to start")
    sigterm_the_group_and_see_it_exit_cleanly(worker)
    assert_nothing_running()
    started, ended = starts(subprocess_env), ends(subprocess_env)
    assert max(started.values()) == 1
    for job in Job.objects.filter(id__in=ids):
        key = job.args[0]
        if job.state == JobState.SUCCEEDED:
            assert (started[key], ended[key]) == (1, 1), key
        else:
            assert (job.state, started[key]) == (JobState.PENDING, 0), key


# --- per-call backoff and signals -------------------------------------------------------------


def test_a_per_call_backoff_applies_and_survives_every_retry(run_worker):
    job_id = tasks.always_fails.using(backoff=Fixed(77)).enqueue("per-call").id
    for attempt in (1, 2):
        burst(run_worker)
        job = Job.objects.get(id=job_id)
        assert (job.state, job.attempt) == (JobState.RETRYING, attempt)
        last = Attempt.objects.get(job_id=job_id, number=attempt)
        wait = job.run_after - last.finished_at
        assert timedelta(seconds=76) < wait < timedelta(seconds=78), wait
        Job.objects.filter(id=job_id).update(run_after=timezone.now())


def test_a_callable_backoff_is_refused_per_call():
    with pytest.raises(InvalidTask, match="give a callable to @task"):
        tasks.add.using(backoff=lambda exception, task_result: 1)


EAGER = {
    "default": {"BACKEND": "jobs.backend.JobsBackend", "QUEUES": [], "OPTIONS": {"EAGER": True}}
}


@override_settings(TASKS=EAGER)
def test_retry_and_dead_letter_signals_carry_the_error_message_and_duration():
    from jobs.signals import job_dead_lettered, job_retry_scheduled

    events = []

    def record(sender, **kw):
        events.append((kw.get("delay"), kw["error_message"], kw["duration"]))

    job_retry_scheduled.connect(record)
    job_dead_lettered.connect(record)
    try:
        tasks.always_fails.using(backoff=Fixed(77)).enqueue("eager")
    finally:
        job_retry_scheduled.disconnect(record)
        job_dead_lettered.disconnect(record)
    assert [(d, m) for d, m, _ in events] == [
        (77.0, "eager failed on attempt 1"),
        (77.0, "eager failed on attempt 2"),
        (None, "eager failed on attempt 3"),
    ]
    assert all(isinstance(s, float) and s >= 0 for _, _, s in events)
