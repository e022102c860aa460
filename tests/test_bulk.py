import pytest
from django.contrib.auth import get_user_model

from jobs import bulk
from jobs.models import AuditEntry, Job
from jobs.states import JobState
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def test_a_dry_run_counts_and_changes_nothing():
    make_job(JobState.DEAD_LETTER)
    make_job(JobState.DEAD_LETTER)
    result = bulk.apply("retry", Job.objects.filter(state=JobState.DEAD_LETTER), dry_run=True)
    assert (result.matched, result.applied) == (2, 0)
    assert Job.objects.filter(state=JobState.DEAD_LETTER).count() == 2
    assert not AuditEntry.objects.exists()


def test_bulk_retry_goes_batch_by_batch_and_writes_one_audit_entry():
    user = get_user_model().objects.create_user("ops", is_staff=True)
    for _ in range(7):
        make_job(JobState.DEAD_LETTER)
    seen = []
    result = bulk.apply(
        "retry",
        Job.objects.filter(state=JobState.DEAD_LETTER),
        user=user,
        source="api",
        description="state=dead_letter",
        progress=lambda matched, applied: seen.append((matched, applied)),
        batch=3,
    )
    assert (result.matched, result.applied) == (7, 7)
    assert seen == [(3, 3), (6, 6), (7, 7)]
    assert Job.objects.filter(state=JobState.PENDING).count() == 7
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.username, entry.subject) == (
        "bulk retry",
        "ops",
        "state=dead_letter",
    )
    assert entry.detail["matched"] == 7 and entry.detail["applied"] == 7


def test_jobs_not_allowed_in_their_state_are_matched_but_not_changed():
    make_job(JobState.SUCCEEDED)
    make_job(JobState.PENDING)
    make_job(JobState.CANCELLED)
    result = bulk.apply("discard", Job.objects.all())
    assert (result.matched, result.applied) == (3, 2)
    assert list(Job.objects.values_list("state", flat=True)) == [JobState.PENDING]


def test_bulk_cancel_cancels_waiting_jobs():
    make_job(JobState.PENDING)
    make_job(JobState.RETRYING)
    make_job(JobState.DEAD_LETTER)
    result = bulk.apply("cancel", Job.objects.all())
    assert (result.matched, result.applied) == (3, 2)


def test_an_unknown_action_is_refused():
    with pytest.raises(ValueError):
        bulk.apply("explode", Job.objects.all())
