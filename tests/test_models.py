import uuid

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs.models import Attempt, Job
from jobs.states import JobState
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def refused(**fields):
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.create(task_path="tests.tasks.add", **fields)


def test_a_terminal_job_must_have_finished_at():
    refused(state=JobState.SUCCEEDED, attempt=1)


def test_a_job_that_is_not_terminal_must_not_have_finished_at():
    refused(state=JobState.PENDING, finished_at=timezone.now())


def test_attempt_may_not_exceed_max_attempts():
    refused(state=JobState.RETRYING, attempt=4, max_attempts=3)


@pytest.mark.parametrize("priority", [-101, 101])
def test_priority_stays_within_minus_100_and_100(priority):
    refused(priority=priority)


@pytest.mark.parametrize("max_attempts", [0, 101])
def test_max_attempts_stays_within_1_and_100(max_attempts):
    refused(max_attempts=max_attempts)


def test_an_unknown_state_is_refused():
    refused(state="exploded")


def test_a_running_job_must_hold_a_lease():
    refused(state=JobState.RUNNING, attempt=1)


def test_dedup_key_is_unique_among_active_jobs():
    make_job(dedup_key="k")
    refused(dedup_key="k")


def test_dedup_key_is_free_again_once_the_holder_is_terminal():
    make_job(JobState.SUCCEEDED, dedup_key="k")
    make_job(JobState.CANCELLED, dedup_key="k")
    assert make_job(dedup_key="k").dedup_key == "k"


def test_an_attempt_number_is_recorded_once_per_job():
    job = make_job(JobState.SUCCEEDED)
    Attempt.objects.create(job=job, number=1, outcome="succeeded")
    with pytest.raises(IntegrityError), transaction.atomic():
        Attempt.objects.create(job=job, number=1, outcome="failed")


def test_ready_lists_only_due_unexpired_claimable_jobs():
    now = timezone.now()
    due = make_job()
    make_job(run_after=now + timezone.timedelta(minutes=5))
    make_job(not_after=now - timezone.timedelta(seconds=1))
    make_job(JobState.SUCCEEDED)
    retrying = make_job(JobState.RETRYING, attempt=1)
    assert set(Job.objects.ready()) == {due, retrying}


def test_ids_are_uuids():
    assert isinstance(make_job().id, uuid.UUID)
