"""Snooze: a task asks to run again later; its attempt is recorded and given back."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs import actions, db
from jobs import outcome as oc
from jobs.errors import Snooze
from jobs.models import Attempt, CounterDelta, Job
from jobs.retry import MAX_DELAY
from jobs.states import AttemptOutcome, DeadLetterReason, JobState
from tests.factories import make_job
from tests.test_limits import with_limits

pytestmark = pytest.mark.django_db


def run_once(job, kind="snoozed", delay=30.0):
    (claimed,) = db.claim(worker_id="w-snooze", queues=None, limit=1, lease_seconds=60)
    assert claimed.id == job.id
    ran = oc.Ran(job.id, kind, delay=delay, started_at=oc.now(), finished_at=oc.now())
    return db.finish([oc.decide(claimed, ran, worker_id="w-snooze")])


def test_snooze_takes_seconds_and_refuses_nonsense():
    assert Snooze(5).seconds == 5.0
    for bad in (-1, "5", float("nan"), float("inf"), True, None):
        with pytest.raises(ValueError):
            Snooze(bad)


def test_a_snooze_longer_than_a_retry_s_longest_delay_waits_that_long():
    assert Snooze(MAX_DELAY - 1).seconds == MAX_DELAY - 1
    assert Snooze(1e300).seconds == Snooze(10**400).seconds == MAX_DELAY


def test_a_snoozed_job_is_pending_later_with_its_attempt_given_back_and_recorded():
    job = make_job(run_after=timezone.now() - timedelta(minutes=1))
    before = timezone.now()
    (applied,) = run_once(job, delay=30)
    job.refresh_from_db()
    assert applied.state == JobState.PENDING
    assert (job.state, job.attempt, job.snoozes) == (JobState.PENDING, 0, 1)
    assert job.run_after >= before + timedelta(seconds=29)
    assert job.started_at is not None
    (attempt,) = Attempt.objects.filter(job=job)
    assert (attempt.number, attempt.outcome) == (1, AttemptOutcome.SNOOZED)
    assert CounterDelta.objects.totals().get("jobs_snoozed") == 1


def test_a_job_that_snoozed_keeps_every_attempt_and_numbers_its_runs_in_order():
    job = make_job(max_attempts=2)
    for _ in range(3):
        Job.objects.filter(id=job.id).update(run_after=timezone.now() - timedelta(minutes=1))
        run_once(job, delay=0)
    for _ in range(2):
        Job.objects.filter(id=job.id).update(run_after=timezone.now() - timedelta(minutes=1))
        run_once(job, kind="error", delay=0)
    job.refresh_from_db()
    assert (job.state, job.attempt, job.snoozes) == (JobState.DEAD_LETTER, 2, 3)
    assert job.dead_letter_reason == DeadLetterReason.EXHAUSTED
    attempts = Attempt.objects.filter(job=job).order_by("number")
    outcomes = list(attempts.values_list("number", "outcome"))
    assert outcomes == [
        (1, "snoozed"),
        (2, "snoozed"),
        (3, "snoozed"),
        (4, "failed"),
        (5, "failed"),
    ]


def test_past_max_snoozes_the_job_is_dead_lettered_as_snoozed_too_often():
    job = make_job()
    with with_limits({}, MAX_SNOOZES=2):
        for _ in range(3):
            Job.objects.filter(id=job.id).update(run_after=timezone.now() - timedelta(minutes=1))
            run_once(job, delay=0)
    job.refresh_from_db()
    assert (job.state, job.dead_letter_reason) == (
        JobState.DEAD_LETTER,
        DeadLetterReason.SNOOZED_TOO_OFTEN,
    )
    assert job.snoozes == 2
    assert Attempt.objects.filter(job=job, outcome="snoozed").count() == 3
    # The dead letter says why, as every other one does.
    assert job.error_type == "SnoozedTooOften"
    assert job.error_message == "snoozed again after 2 snoozes, the most MAX_SNOOZES allows"


def test_the_job_page_counts_the_snoozes_beside_the_attempts(client, viewer):
    job = make_job()
    with with_limits({}, MAX_SNOOZES=2):
        for _ in range(3):
            Job.objects.filter(id=job.id).update(run_after=timezone.now() - timedelta(minutes=1))
            run_once(job, delay=0)
    client.force_login(viewer)
    html = client.get(reverse("dashboard:job", args=[job.id])).content.decode()
    assert "snoozed 2 times, which uses no attempt" in html


def test_a_job_retried_after_snoozing_too_often_may_snooze_as_often_again():
    job = make_job()
    with with_limits({}, MAX_SNOOZES=2):
        for _ in range(3):
            Job.objects.filter(id=job.id).update(run_after=timezone.now() - timedelta(minutes=1))
            run_once(job, delay=0)
        assert actions.retry(job.id)
        states = []
        for _ in range(3):
            Job.objects.filter(id=job.id).update(run_after=timezone.now() - timedelta(minutes=1))
            (applied,) = run_once(job, delay=0)
            states.append(applied.state)
    assert states == [JobState.PENDING, JobState.PENDING, JobState.DEAD_LETTER]
    job.refresh_from_db()
    assert (job.dead_letter_reason, job.snoozes) == (DeadLetterReason.SNOOZED_TOO_OFTEN, 4)
    numbers = list(
        Attempt.objects.filter(job=job).order_by("number").values_list("number", "outcome")
    )
    assert numbers == [(n, "snoozed") for n in range(1, 7)]


@pytest.mark.parametrize("bad", ["lots", -1, 2.5, True])
def test_a_malformed_max_snoozes_is_a_check_error_and_never_stops_a_finish(bad):
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    from jobs.checks import check_max_snoozes

    job = make_job()
    with with_limits({}, MAX_SNOOZES=bad):
        errors = check_max_snoozes()
        assert [e.id for e in errors] == ["jobs.E003"]
        assert f"MAX_SNOOZES must be a whole number >= 0, not {bad!r}" in errors[0].msg
        with pytest.raises(SystemCheckError, match="MAX_SNOOZES"):
            call_command("check")
        assert oc.max_snoozes("default") == oc.DEFAULT_MAX_SNOOZES
        run_once(job, delay=0)
    job.refresh_from_db()
    assert (job.state, job.snoozes) == (JobState.PENDING, 1)


def test_max_snoozes_of_zero_dead_letters_the_first_snooze():
    job = make_job()
    with with_limits({}, MAX_SNOOZES=0):
        assert oc.max_snoozes("default") == 0
        run_once(job, delay=0)
    job.refresh_from_db()
    assert job.dead_letter_reason == DeadLetterReason.SNOOZED_TOO_OFTEN
