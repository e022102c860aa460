"""Jobs per queue and state (jobs.state_counts): true after every kind of change, on both
databases; on PostgreSQL read from the trigger-kept counts, never from the job table."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import actions, state_counts
from jobs.maintenance import prune_jobs
from jobs.models import Job, JobCountDelta
from jobs.states import JobState
from tests import tasks
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def true_counts():
    counts = {}
    for queue, state in Job.objects.values_list("queue_name", "state"):
        counts[queue, state] = counts.get((queue, state), 0) + 1
    return counts


def test_counts_follow_enqueue_and_every_state_change():
    tasks.add.enqueue(1, 2)
    tasks.add.using(queue_name="emails").enqueue(3, 4)
    dead = make_job(JobState.DEAD_LETTER, queue_name="emails")
    assert state_counts.job_counts() == true_counts()

    actions.retry(dead.id)
    assert state_counts.job_counts() == true_counts()
    assert state_counts.job_counts()["emails", "pending"] == 2

    Job.objects.filter(queue_name="default").update(
        state=JobState.CANCELLED, finished_at=timezone.now()
    )
    assert state_counts.job_counts() == true_counts()
    assert ("default", "pending") not in state_counts.job_counts()


def test_counts_stay_true_after_pruning_and_deleting():
    old = timezone.now() - timedelta(days=30)
    for _ in range(3):
        make_job(JobState.SUCCEEDED, finished_at=old)
    make_job(JobState.SUCCEEDED)
    make_job(JobState.DEAD_LETTER)
    prune_jobs(timedelta(days=7), batch_size=2)
    assert (
        state_counts.job_counts()
        == true_counts()
        == {
            ("default", "succeeded"): 1,
            ("default", "dead_letter"): 1,
        }
    )
    Job.objects.filter(state=JobState.DEAD_LETTER).delete()
    assert state_counts.job_counts() == {("default", "succeeded"): 1}


def test_many_small_changes_are_folded_and_stay_true(monkeypatch):
    monkeypatch.setattr(state_counts, "FOLD_AT", 5)
    for _ in range(12):
        make_job(JobState.PENDING, queue_name="q")
    first = state_counts.job_counts()  # sums, then folds the increments
    assert first == true_counts() == {("q", "pending"): 12}
    if connection.vendor == "postgresql":
        assert JobCountDelta.objects.count() == 1
    assert state_counts.job_counts() == first


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_postgresql_reads_the_kept_counts_not_the_job_table():
    make_job(JobState.PENDING)
    with CaptureQueriesContext(connection) as queries:
        state_counts.job_counts()
    assert queries.captured_queries
    assert all('"jobs_job"' not in q["sql"] and " jobs_job " not in q["sql"]
               for q in queries.captured_queries)  # fmt: skip


@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.django_db(transaction=True)
def test_postgresql_counts_survive_a_truncate():
    make_job(JobState.PENDING)
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_job CASCADE")
    assert state_counts.job_counts() == {}
