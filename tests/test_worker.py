"""The real worker, in a subprocess, against the test database."""

import collections
import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from jobs import actions
from jobs.models import CounterDelta, Job, WorkerNode
from jobs.states import JobState
from tests import tasks
from tests.factories import make_job

pytestmark = pytest.mark.django_db(transaction=True)


def burst(run_worker, *args):
    proc = run_worker(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_a_job_succeeds_and_keeps_its_return_value(run_worker):
    result = tasks.add.enqueue(2, 40)
    burst(run_worker)
    job = Job.objects.get(id=result.id)
    assert (job.state, job.return_value, job.attempt) == (JobState.SUCCEEDED, 42, 1)
    attempt = job.attempts.get()
    assert attempt.outcome == "succeeded" and attempt.worker_id
    assert job.finished_at >= job.started_at


def test_a_flaky_job_succeeds_on_attempt_2(run_worker, ledger):
    result = tasks.flaky.enqueue("flaky-1")
    burst(run_worker)
    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempt) == (JobState.SUCCEEDED, 2)
    assert job.return_value == {"key": "flaky-1", "attempt": 2}
    assert [(a.number, a.outcome) for a in job.attempts.all()] == [(1, "failed"), (2, "succeeded")]
    assert job.attempts.first().error_type == "ConnectionError"
    assert [k for k, _, _ in ledger()] == ["flaky-1", "flaky-1"]


def test_an_always_failing_job_dead_letters_after_max_attempts_keeping_every_error(run_worker):
    result = tasks.always_fails.enqueue("doomed")
    proc = burst(run_worker)
    job = Job.objects.get(id=result.id)
    assert (job.state, job.dead_letter_reason, job.attempt) == ("dead_letter", "exhausted", 3)
    assert job.error_type == "ValueError"
    assert job.error_message == "doomed failed on attempt 3"
    assert "Traceback" in job.error_traceback and "always_fails" in job.error_traceback
    attempts = list(job.attempts.all())
    assert [a.error_message for a in attempts] == [
        f"doomed failed on attempt {n}" for n in (1, 2, 3)
    ]
    assert all("Traceback" in a.error_traceback for a in attempts)
    assert "dead-lettered (exhausted)" in proc.stderr


def test_unrecoverable_dead_letters_at_once(run_worker, ledger):
    result = tasks.gives_up.enqueue("hopeless")
    burst(run_worker)
    job = Job.objects.get(id=result.id)
    assert (job.state, job.dead_letter_reason, job.attempt) == ("dead_letter", "unrecoverable", 1)
    assert job.error_type == "Unrecoverable"
    assert len(ledger()) == 1


def test_no_retry_policy_dead_letters_at_the_first_failure(run_worker):
    result = tasks.fails_once_no_retry.enqueue("x")
    burst(run_worker)
    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempt, job.dead_letter_reason) == ("dead_letter", 1, "unrecoverable")


def test_an_error_message_a_database_cannot_hold_is_kept_escaped(run_worker):
    result = tasks.fails_with_unstorable_text.enqueue()
    burst(run_worker)
    job = Job.objects.get(id=result.id)
    assert (job.state, job.error_type) == (JobState.DEAD_LETTER, "ValueError")
    assert job.error_message == "NUL \\x00 and a lone surrogate \\udc80"
    assert "\\x00" in job.attempts.get().error_traceback


def test_a_job_of_an_unknown_task_is_poison_and_the_worker_carries_on(run_worker):
    ghost = make_job(task_path="tests.tasks.does_not_exist")
    broken_module = make_job(task_path="no_such_module.task")
    not_a_task = make_job(task_path="tests.tasks.NO_WAIT")
    exits = make_job(task_path="tests.exits_on_import.task")
    fine = tasks.add.enqueue(1, 1)
    burst(run_worker)
    for job in (ghost, broken_module, not_a_task, exits):
        job.refresh_from_db()
        assert (job.state, job.dead_letter_reason, job.attempt) == ("dead_letter", "poison", 1)
        assert job.attempts.get().outcome == "poison"
        # What is wrong, and what to do about it.
        assert job.error_type == "PoisonJob"
        assert job.error_message.startswith(f"no task can be loaded at '{job.task_path}' (")
        assert job.error_message.endswith(
            "deploy the code that defines it to the workers and retry the job, or discard it"
        )
    assert "No module named 'no_such_module'" in Job.objects.get(id=broken_module.id).error_message
    assert "is not a task (decorate it with @task)" in not_a_task.error_message
    assert Job.objects.get(id=fine.id).state == JobState.SUCCEEDED


def test_a_job_whose_stored_arguments_no_longer_fit_is_poison(run_worker):
    wrong_arity = make_job(task_path="tests.tasks.add", args=[1, 2, 3])
    wrong_kwarg = make_job(task_path="tests.tasks.add", args=[1], kwargs={"c": 2})
    not_a_list = make_job(task_path="tests.tasks.add", args={"a": 1})
    burst(run_worker)
    for job in (wrong_arity, wrong_kwarg, not_a_list):
        job.refresh_from_db()
        assert (job.state, job.dead_letter_reason) == ("dead_letter", "poison"), job.args
        assert job.error_type == "PoisonJob"
        assert job.error_message.endswith("(Edit and rerun), or discard it")
    wrong_arity.refresh_from_db()
    assert wrong_arity.error_message.startswith(
        "the stored arguments do not fit tests.tasks.add(a, b) (too many positional arguments)"
    )


def test_a_return_value_that_is_not_json_dead_letters_the_job_at_once(run_worker):
    result = tasks.returns_object.enqueue()
    burst(run_worker)
    job = Job.objects.get(id=result.id)
    assert job.state == JobState.DEAD_LETTER and job.error_type == "TypeError"
    assert (job.attempt, job.dead_letter_reason) == (1, "unrecoverable")


def test_a_continuation_runs_after_its_parent_succeeds(run_worker, ledger):
    parent = tasks.record.enqueue("parent")
    child = tasks.record.using(after=parent.id).enqueue("child")
    burst(run_worker, "--concurrency", "1")
    assert Job.objects.get(id=child.id).state == JobState.SUCCEEDED
    assert [k for k, _, _ in ledger()] == ["parent", "child"]


def test_a_continuation_is_cancelled_when_its_parent_dead_letters(run_worker, ledger):
    parent = tasks.always_fails.enqueue("parent")
    child = tasks.record.using(after=parent.id).enqueue("child")
    grandchild = tasks.record.using(after=child.id).enqueue("grandchild")
    burst(run_worker)
    assert Job.objects.get(id=parent.id).state == JobState.DEAD_LETTER
    assert Job.objects.get(id=child.id).state == JobState.CANCELLED
    assert Job.objects.get(id=grandchild.id).state == JobState.CANCELLED
    assert "child" not in [k for k, _, _ in ledger()]


def test_continuations_cancelled_when_their_parent_dead_letters_are_counted(run_worker):
    parent = tasks.always_fails.enqueue("parent")
    child = tasks.record.using(after=parent.id).enqueue("child")
    tasks.record.using(after=child.id).enqueue("grandchild")
    burst(run_worker)
    counters = CounterDelta.objects.totals()
    assert (counters.get("jobs_dead_lettered"), counters.get("jobs_cancelled")) == (1, 2)


def test_continuations_of_a_job_expired_by_not_after_are_counted(run_worker):
    expired = tasks.record.using(not_after=timezone.now() - timedelta(seconds=1)).enqueue("late")
    tasks.record.using(after=expired.id).enqueue("child")
    burst(run_worker)
    assert Job.objects.filter(state=JobState.CANCELLED).count() == 2
    assert CounterDelta.objects.totals().get("jobs_cancelled") == 2


def test_a_job_not_started_before_not_after_is_cancelled_and_never_runs(run_worker, ledger):
    expired = tasks.record.using(not_after=timezone.now() - timedelta(seconds=1)).enqueue("late")
    burst(run_worker)
    job = Job.objects.get(id=expired.id)
    assert (job.state, job.attempt) == (JobState.CANCELLED, 0)
    assert ledger() == []


def test_a_job_due_later_is_not_awaited_by_burst(run_worker, ledger):
    later = tasks.record.using(run_after=timezone.now() + timedelta(hours=1)).enqueue("later")
    burst(run_worker)
    assert Job.objects.get(id=later.id).state == JobState.PENDING
    assert ledger() == []


def test_the_worker_serves_only_the_queues_it_is_given(run_worker):
    email = tasks.add.using(queue_name="emails").enqueue(1, 1)
    report = tasks.add.using(queue_name="reports").enqueue(1, 1)
    burst(run_worker, "--queue", "emails")
    assert Job.objects.get(id=email.id).state == JobState.SUCCEEDED
    assert Job.objects.get(id=report.id).state == JobState.PENDING


def test_higher_priority_runs_first(run_worker, ledger):
    for i in range(3):
        tasks.record.using(priority=-10).enqueue(f"low-{i}")
    tasks.record.using(priority=50).enqueue("high")
    burst(run_worker, "--concurrency", "1")
    assert ledger()[0][0] == "high"


def test_max_jobs_stops_after_that_many(run_worker):
    for i in range(5):
        tasks.add.enqueue(i, i)
    burst(run_worker, "--max-jobs", "2", "--concurrency", "1")
    assert Job.objects.filter(state=JobState.SUCCEEDED).count() == 2
    assert Job.objects.filter(state=JobState.PENDING).count() == 3


def test_a_dead_letter_retried_runs_again_on_the_same_row(run_worker):
    result = tasks.always_fails.enqueue("again")
    burst(run_worker)
    assert actions.retry(result.id)
    burst(run_worker)
    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempt, job.max_attempts) == ("dead_letter", 4, 4)
    assert list(job.attempts.values_list("number", flat=True)) == [1, 2, 3, 4]
    assert Job.objects.count() == 1


def test_a_rerun_runs_as_a_new_job_linked_to_the_original(run_worker):
    original = tasks.add.enqueue(3, 4)
    burst(run_worker)
    new = actions.rerun(original.id)
    burst(run_worker)
    new.refresh_from_db()
    assert (new.state, new.return_value, str(new.rerun_of_id)) == ("succeeded", 7, original.id)
    assert Job.objects.get(id=original.id).attempts.count() == 1


def test_a_job_running_past_its_timeout_is_stopped_and_counted_as_failed(run_worker):
    stuck = tasks.ignores_timeout.enqueue("spin")
    fine = tasks.sleepy.enqueue(0.2, key="fine")
    burst(run_worker, "--concurrency", "2")
    job = Job.objects.get(id=stuck.id)
    assert (job.state, job.dead_letter_reason, job.attempt) == ("dead_letter", "exhausted", 2)
    assert list(job.attempts.values_list("error_type", flat=True)) == [
        "JobTimeout",
        "JobTimeout",
    ]
    assert Job.objects.get(id=fine.id).state == JobState.SUCCEEDED


def _alive(pid):
    """Is the process running (a zombie waiting to be reaped is not)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads processes from /proc")
def test_a_job_stopped_at_its_timeout_takes_the_processes_it_started_with_it(run_worker, ledger):
    stuck = tasks.starts_processes_and_hangs.enqueue("tree")
    burst(run_worker)
    job = Job.objects.get(id=stuck.id)
    assert (job.state, job.error_type) == (JobState.DEAD_LETTER, "JobTimeout")
    started = [pid for key, pid, _ in ledger() if key == "tree"]
    assert len(started) == 2
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in started if _alive(pid)]


def test_an_expired_lease_is_recovered_through_the_retry_flow(run_worker):
    past = timezone.now() - timedelta(minutes=5)
    lost = make_job(
        JobState.RUNNING,
        task_path="tests.tasks.add",
        args=[1, 1],
        lease_expires_at=past,
        worker_id="vanished-worker",
    )
    burst(run_worker)
    lost.refresh_from_db()
    assert (lost.state, lost.attempt) == (JobState.SUCCEEDED, 2)
    first = lost.attempts.get(number=1)
    assert (first.outcome, first.error_type, first.worker_id) == (
        "lost",
        "WorkerLost",
        "vanished-worker",
    )
    assert CounterDelta.objects.totals()["jobs_recovered"] == 1


def test_a_live_lease_is_left_alone(run_worker):
    held = make_job(JobState.RUNNING, worker_id="busy-worker")
    burst(run_worker)
    held.refresh_from_db()
    assert held.state == JobState.RUNNING and held.worker_id == "busy-worker"


def test_two_workers_drain_1000_jobs_running_each_exactly_once(start_worker, ledger):
    keys = [f"job-{i}" for i in range(1000)]
    tasks.record.enqueue_many([((k,), {}) for k in keys])
    workers = [start_worker("--burst", "--concurrency", "2") for _ in range(2)]
    for w in workers:
        assert w.wait(timeout=180) == 0
    runs = collections.Counter(k for k, _, _ in ledger())
    assert set(runs) == set(keys)
    assert max(runs.values()) == 1
    assert Job.objects.filter(state=JobState.SUCCEEDED).count() == 1000
    assert len({pid for _, pid, _ in ledger()}) >= 2


def test_a_clean_exit_leaves_no_job_running_and_marks_the_node_stopped(run_worker):
    for i in range(20):
        tasks.add.enqueue(i, i)
    proc = burst(run_worker, "--worker-id", "tidy-worker")
    assert not Job.objects.filter(state=JobState.RUNNING).exists()
    node = WorkerNode.objects.get(id="tidy-worker")
    assert node.stopped_at is not None and node.jobs_processed == 20
    assert "worker tidy-worker started" in proc.stderr
    assert "tidy-worker stopped: 20 job(s) processed" in proc.stderr


def test_counters_follow_what_the_worker_did(run_worker):
    tasks.add.enqueue(1, 1)
    tasks.flaky.enqueue("f")
    tasks.always_fails.enqueue("a")
    burst(run_worker)
    totals = CounterDelta.objects.totals()
    assert totals["jobs_enqueued"] == 3
    assert totals["jobs_succeeded"] == 2
    assert totals["jobs_failed"] == 1 + 3
    assert totals["jobs_requeued"] == 1 + 2
    assert totals["jobs_dead_lettered"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "number of executors from 1 to 1000"),
        (["--concurrency", "3000"], "number of executors from 1 to 1000"),
        (["--concurrency", "many"], "whole number"),
        (["--async-concurrency", "0"], "number from 1 to 10000"),
        (["--async-concurrency", "lots"], "whole number"),
        (["--max-jobs", "-1"], "number >= 1"),
        (["--shutdown-timeout", "soon"], "seconds"),
        (["--shutdown-timeout", "nan"], "seconds"),
        (["--queue", ""], "--queue must be 1 to 100 characters"),
        (["--backend", "nope"], "unknown task backend"),
        (["--frobnicate"], "unrecognized arguments"),
    ],
)
def test_malformed_arguments_get_a_clear_error(run_worker, args, message):
    proc = run_worker(*args)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def _catches(pid, signum):
    """Whether process `pid` has a handler installed for `signum` (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def test_a_stop_request_while_the_worker_starts_ends_it_cleanly(start_worker):
    proc = start_worker("--concurrency", "1")
    deadline = time.monotonic() + 30
    while not _catches(proc.pid, signal.SIGTERM):
        assert proc.poll() is None and time.monotonic() < deadline, "worker never started"
    proc.send_signal(signal.SIGTERM)  # most likely still importing Django
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    assert "received SIGTERM" in output
    assert not Job.objects.filter(state=JobState.RUNNING).exists()


@pytest.fixture
def scratch_server(scratch_databases):
    """Databases on the test server that come and go (an SQLite file is there, or is created
    empty, which a worker refuses: tests/test_schema.py)."""
    from jobs.db.pooler import is_pooled

    if connection.vendor != "postgresql":
        pytest.skip("a database server that starts after the worker")
    if is_pooled(connection):
        pytest.skip("databases created and renamed under a pooler's pools")
    return scratch_databases


def _read_until(proc, text, timeout=60) -> str:
    """The worker's output up to the first line holding `text`; a worker that has not
    written it within `timeout` seconds is killed (its process group), so the read ends."""
    seen = []
    timer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
    timer.start()
    try:
        for line in proc.stdout:
            seen.append(line)
            if text in line:
                return "".join(seen)
    finally:
        timer.cancel()
    raise AssertionError(f"no line with {text!r} in:\n{''.join(seen)}")


def test_a_worker_started_before_its_database_waits_for_it(
    start_worker, scratch_server, subprocess_env, manage
):
    subprocess_env["DATABASE_URL"] = scratch_server.url("late")
    proc = start_worker("--burst", "--concurrency", "1")
    waited = _read_until(proc, "database unavailable")

    def one_job(url):
        enqueued = manage("enqueue", "tests.tasks.add", "2", "40", env={"DATABASE_URL": url})
        assert enqueued.returncode == 0, enqueued.stderr

    scratch_server.create("late", migrate_to=(), then=one_job)
    output, _ = proc.communicate(timeout=120)

    assert proc.returncode == 0, waited + output
    assert "retrying in" in waited
    assert "tests.tasks.add" in output and "stopped: 1 job(s) processed" in output


def test_a_worker_waiting_for_its_database_stops_at_a_signal(
    start_worker, scratch_server, subprocess_env
):
    subprocess_env["DATABASE_URL"] = scratch_server.url("never")
    proc = start_worker("--concurrency", "1")
    waited = _read_until(proc, "database unavailable")

    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=30)

    assert proc.returncode == 0, waited + output
    assert "received SIGTERM before the worker started: stopping" in output
    assert "stopped before it started" in output
    assert "Traceback" not in waited + output


def test_a_worker_given_the_id_of_a_running_worker_is_warned(start_worker):
    first = start_worker("--worker-id", "twin", "--concurrency", "1")
    _read_until(first, "worker twin started")
    second = start_worker("--worker-id", "twin", "--concurrency", "1")

    seen = _read_until(second, "worker twin started")

    assert "another worker runs with the id twin" in seen, seen
    for proc in (first, second):
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, output


def test_a_worker_restarted_under_its_id_is_not_warned(run_worker):
    burst(run_worker, "--worker-id", "again")

    again = burst(run_worker, "--worker-id", "again")

    assert "worker again started" in again.stderr
    assert "another worker" not in again.stderr
