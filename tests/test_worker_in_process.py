"""The worker built and driven in the test process (its executors are real child processes)."""

import dataclasses
import multiprocessing
import time
import uuid

import pytest
from django.db import connection

from jobs import worker_node
from jobs.db import Finish
from jobs.models import Attempt, Job, WorkerNode
from jobs.pool.supervisor import Supervisor
from jobs.states import JobState
from jobs.worker import Worker, WorkerConfig
from tests import tasks
from tests.conftest import database_url
from tests.factories import make_claimed

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run_in_process(monkeypatch):
    """Run a Worker here until it stops by itself; returns it."""
    # The executors set Django up as a worker subprocess does: the project's settings, the
    # test database.
    monkeypatch.setenv("DATABASE_URL", database_url())
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "jobsite.settings")
    _stop_fork_server()  # one started before would carry another environment
    ran = []

    def run(**options):
        worker = Worker(WorkerConfig(**{"concurrency": 2, **options}))
        worker.exit_code = worker.run()
        ran.append(worker)
        return worker

    yield run
    _stop_fork_server()
    connection.close()  # it carries the worker's session settings


def _stop_fork_server():
    from multiprocessing import forkserver

    forkserver._forkserver._stop()


def test_a_burst_runs_every_due_job_then_stops(run_in_process):
    results = [tasks.add.enqueue(i, i) for i in range(5)]

    worker = run_in_process(burst=True)

    assert worker.exit_code == 0
    jobs = Job.objects.filter(id__in=[r.id for r in results])
    assert sorted(j.return_value for j in jobs) == [0, 2, 4, 6, 8]
    assert {j.state for j in jobs} == {JobState.SUCCEEDED}
    assert worker.processed_total == 5
    node = WorkerNode.objects.get(id=worker.worker_id)
    assert node.stopped_at is not None and node.jobs_processed == 5


def test_a_burst_of_many_short_jobs_writes_every_outcome_once(run_in_process):
    # Enough that outcomes arrive while the last batch's transaction is still being written
    # (on PostgreSQL it runs on the statement thread): none may be dropped or written twice.
    ids = tasks.add.enqueue_many([((i, 1), {}) for i in range(1500)])

    worker = run_in_process(burst=True, concurrency=4)

    assert worker.exit_code == 0
    assert worker.processed_total == 1500
    jobs = Job.objects.filter(id__in=ids)
    assert jobs.filter(state=JobState.SUCCEEDED).count() == 1500
    assert sorted(jobs.values_list("return_value", flat=True)) == list(range(1, 1501))
    assert Attempt.objects.filter(job_id__in=ids).count() == 1500


def test_a_burst_of_jobs_that_each_fail_once_writes_every_attempt_once(run_in_process):
    # Retries due at once: on PostgreSQL a claim sent while a failure's transaction was still in
    # flight may take that retry before the failure's result is taken (two statement threads).
    ids = [r.id for r in (tasks.flaky.enqueue(f"burst-{i}") for i in range(800))]

    worker = run_in_process(burst=True, concurrency=4)

    assert worker.exit_code == 0
    assert worker.processed_total == 1600
    assert (worker.held, worker.superseded) == ({}, {})
    jobs = Job.objects.filter(id__in=ids)
    assert jobs.filter(state=JobState.SUCCEEDED, attempt=2).count() == 800
    attempts = Attempt.objects.filter(job_id__in=ids).values_list("number", "outcome")
    assert sorted(attempts) == [(1, "failed")] * 800 + [(2, "succeeded")] * 800


def test_a_retry_claimed_before_its_failure_is_taken_keeps_its_new_hold():
    # Two transactions in flight: the older claims the retry once the newer, which writes the
    # failure, has committed; the older's result is taken first.
    worker = Worker(WorkerConfig(concurrency=1))
    first = make_claimed()
    worker._took([first], 1, time.monotonic())
    again = dataclasses.replace(first, lease_id=uuid.uuid4(), attempt=2)
    worker._took([again], 1, time.monotonic())
    failure = Finish(
        job_id=first.id, lease_id=first.lease_id, state=JobState.RETRYING, outcome="failed"
    )

    settled = worker._release([failure], [failure])

    assert settled == [(failure, first)]  # reported with the attempt that ran
    assert worker.held[first.id].claimed is again
    assert worker.superseded == {}


def test_a_queue_name_with_a_comma_is_served_as_one_name_and_the_log_says_so(
    run_in_process, caplog
):
    listed = tasks.add.using(queue_name="a,b").enqueue(1, 1)
    other = tasks.add.using(queue_name="a").enqueue(2, 2)

    run_in_process(burst=True, queues=["a,b"])

    assert Job.objects.get(id=listed.id).state == JobState.SUCCEEDED
    assert Job.objects.get(id=other.id).state == JobState.PENDING
    assert "started: 'a,b', concurrency" in caplog.text
    assert "--queue 'a,b' is one queue" in caplog.text
    assert "(--queue a --queue b)" in caplog.text


def test_a_failing_job_is_retried_until_it_succeeds(run_in_process):
    result = tasks.flaky.enqueue("in-process")

    run_in_process(burst=True)

    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempt) == (JobState.SUCCEEDED, 2)
    assert [a.outcome for a in job.attempts.order_by("number")] == ["failed", "succeeded"]


def test_max_jobs_stops_the_worker_with_the_rest_still_due(run_in_process):
    for i in range(4):
        tasks.add.enqueue(i, 1)

    worker = run_in_process(max_jobs=2)

    assert worker.claimed_total == 2
    assert Job.objects.filter(state=JobState.SUCCEEDED).count() == 2
    assert Job.objects.filter(state=JobState.PENDING).count() == 2


def test_an_executor_that_dies_is_replaced_and_its_job_retried(run_in_process):
    result = tasks.dies_first_attempt.enqueue("in-process-crash")

    worker = run_in_process(burst=True)

    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempt) == (JobState.SUCCEEDED, 2)
    first = job.attempts.order_by("number").first()
    assert (first.outcome, first.error_type) == ("failed", "ExecutorCrashed")
    assert list(worker.supervisor.crash_streaks.values()) == [1]  # one crash, replaced


@pytest.fixture
def refused_outcome(monkeypatch):
    """The outcome of a job whose key is "refused" carries text no database column takes,
    added after the executor made its text storable (as a bug anywhere on the way might)."""
    from jobs import outcome as oc

    decide = oc.decide

    def deciding(claimed, ran, **kwargs):
        finish = decide(claimed, ran, **kwargs)
        if claimed.args_json == '["refused"]':
            finish.error_message += " \udc80 \x00"
        return finish

    monkeypatch.setattr(oc, "decide", deciding)


def test_an_outcome_the_database_refuses_is_stored_escaped_and_takes_no_other_down(
    run_in_process, refused_outcome, caplog
):
    refused = tasks.fails_once_no_retry.enqueue("refused").id
    others = [tasks.add.enqueue(i, i).id for i in range(6)]

    worker = run_in_process(burst=True)

    assert worker.exit_code == 0
    job = Job.objects.get(id=refused)
    assert (job.state, job.attempt) == (JobState.DEAD_LETTER, 1)
    assert job.error_message == "refused \\udc80 \\x00"
    assert job.attempts.get().error_message == "refused \\udc80 \\x00"
    assert {j.state for j in Job.objects.filter(id__in=others)} == {JobState.SUCCEEDED}
    assert all(j.attempts.count() == 1 for j in Job.objects.filter(id__in=others))
    assert "recording them one by one" in caplog.text


def test_executors_are_stopped_whatever_fails_once_they_started(run_in_process, monkeypatch):
    def refused(*args, **kwargs):
        raise RuntimeError("the worker's row could not be written")

    monkeypatch.setattr(worker_node, "register", refused)
    worker = Worker(WorkerConfig(concurrency=2, burst=True))

    with pytest.raises(RuntimeError, match="could not be written"):
        worker.run()

    # Left running, they would keep the exiting worker waiting for them for good.
    assert multiprocessing.active_children() == []


def test_executors_are_killed_when_stopping_them_in_order_fails(run_in_process, monkeypatch):
    def broken(self, *, hard=False):
        raise RuntimeError("the orderly stop failed")

    monkeypatch.setattr(Supervisor, "shutdown", broken)
    worker = Worker(WorkerConfig(concurrency=2, burst=True))

    with pytest.raises(RuntimeError, match="orderly stop failed"):
        worker.run()

    assert multiprocessing.active_children() == []


def test_an_executor_whose_fork_server_cannot_be_reached_starts_from_a_new_one(monkeypatch, caplog):
    import os
    import time
    from multiprocessing import forkserver

    monkeypatch.setenv("DATABASE_URL", database_url())
    _stop_fork_server()

    def supervisor():
        return Supervisor(
            worker_id="w-fork-server",
            settings_module="jobsite.settings",
            async_slots=1,
            cancel_grace=1.0,
            held={},
            settle=lambda stopped: None,
        )

    earlier, later = supervisor(), supervisor()
    try:
        earlier.start_all(1)  # starts the fork server
        first_server = forkserver._forkserver._forkserver_pid
        # A temporary-file cleaner removes the fork server's socket; the server runs on.
        os.unlink(forkserver._forkserver._forkserver_address)
        later.start_all(1)
        deadline = time.monotonic() + 15
        while not later.executors and time.monotonic() < deadline:
            later.start_due(time.monotonic())
            time.sleep(0.05)
        assert "could not start executor 0" in caplog.text
        assert "starting a new fork server" in caplog.text
        assert forkserver._forkserver._forkserver_pid not in (None, first_server)
        assert later.executors and later.executors[0].process.is_alive()
    finally:
        for one in (earlier, later):
            one.shutdown(hard=True)
        _stop_fork_server()
