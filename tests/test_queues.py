"""Pausing queues: the engine calls, and the real worker skipping a paused queue."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from jobs import queues
from jobs.models import Attempt, AuditEntry, Job, PausedQueue
from jobs.states import JobState
from tests import tasks
from tests.factories import add_attempts, make_job


@pytest.mark.django_db
def test_pause_and_resume_are_persisted_and_audited():
    user = get_user_model().objects.create_user("ops", is_staff=True)
    assert queues.pause("emails", user=user, source="api") is True
    assert queues.pause("emails") is False
    assert queues.is_paused("emails")
    assert list(queues.paused()) == ["emails"]
    assert PausedQueue.objects.get().paused_by == "ops"
    assert queues.resume("emails") is True
    assert queues.resume("emails") is False
    assert not queues.is_paused("emails")
    entries = list(AuditEntry.objects.order_by("at", "id").values_list("action", "subject"))
    assert entries == [("pause queue", "emails"), ("resume queue", "emails")]


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["", "x" * 101, "a\x00b", "lone \udc80", None])
def test_a_bad_queue_name_is_refused(name):
    with pytest.raises(ValueError):
        queues.pause(name)
    assert not PausedQueue.objects.exists()


@pytest.mark.django_db
def test_job_counts_are_exact_per_queue_and_state():
    make_job(queue_name="emails")
    make_job(JobState.DEAD_LETTER, queue_name="emails")
    make_job(JobState.DEAD_LETTER, queue_name="emails")
    make_job(JobState.SUCCEEDED, queue_name="reports")
    Job.objects.filter(queue_name="reports").delete()
    assert queues.job_counts() == {"emails": {"pending": 1, "dead_letter": 2}}


@pytest.mark.django_db
def test_the_last_hour_counts_each_queues_attempts_and_failures():
    add_attempts(make_job(JobState.SUCCEEDED, queue_name="emails"), ["failed", "succeeded"])
    add_attempts(make_job(JobState.DEAD_LETTER, queue_name="reports"), ["lost", "poison"])
    old = make_job(JobState.SUCCEEDED, queue_name="reports")
    add_attempts(old, ["succeeded"])
    Attempt.objects.filter(job=old).update(finished_at=timezone.now() - timedelta(hours=2))
    hour = queues.last_hour(timezone.now())
    assert hour.finished == {"emails": 2, "reports": 2}
    assert hour.failed == {"emails": 1, "reports": 2}
    assert hour.exact and not hour.capped


@pytest.mark.django_db
def test_beyond_its_sample_the_last_hour_is_shared_out_and_marked_as_an_estimate(monkeypatch):
    monkeypatch.setattr(queues, "LAST_HOUR_SAMPLE", 2)
    add_attempts(make_job(JobState.SUCCEEDED, queue_name="emails"), ["failed", "succeeded"])
    add_attempts(make_job(JobState.SUCCEEDED, queue_name="emails"), ["succeeded"])
    hour = queues.last_hour(timezone.now())
    assert hour.finished == {"emails": 3}
    assert not hour.exact and not hour.capped
    monkeypatch.setattr(queues, "LAST_HOUR_CAP", 2)
    assert queues.last_hour(timezone.now()).capped


@pytest.mark.django_db(transaction=True)
def test_a_worker_claims_nothing_from_a_paused_queue_and_enqueues_still_land(run_worker):
    queues.pause("emails")
    held = tasks.add.using(queue_name="emails").enqueue(1, 1)
    free = tasks.add.enqueue(2, 2)
    proc = run_worker()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert Job.objects.get(id=held.id).state == JobState.PENDING
    assert Job.objects.get(id=free.id).state == JobState.SUCCEEDED

    queues.resume("emails")
    proc = run_worker("--queue", "emails")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert Job.objects.get(id=held.id).state == JobState.SUCCEEDED
