import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

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


def test_bulk_retry_puts_each_job_back_as_a_single_press_would():
    from jobs.retry import MAX_ATTEMPTS

    dead = make_job(JobState.DEAD_LETTER, attempt=3, max_attempts=3)
    spent = make_job(JobState.DEAD_LETTER, attempt=MAX_ATTEMPTS, max_attempts=MAX_ATTEMPTS)
    make_job(JobState.SUCCEEDED)
    result = bulk.apply("retry", Job.objects.all())
    assert (result.matched, result.applied) == (3, 1)
    dead.refresh_from_db()
    assert (dead.state, dead.max_attempts, dead.error_type) == (JobState.PENDING, 4, "")
    assert Job.objects.get(id=spent.id).state == JobState.DEAD_LETTER  # it can only rerun


def test_bulk_retry_of_dead_letters_sharing_a_dedup_key_retries_one_and_refuses_the_rest():
    for _ in range(3):
        make_job(JobState.DEAD_LETTER, dedup_key="welcome-42")
    other = make_job(JobState.DEAD_LETTER)
    result = bulk.apply("retry", Job.objects.all())
    assert (result.matched, result.applied) == (4, 2)
    held = Job.objects.filter(dedup_key="welcome-42", state=JobState.PENDING)
    assert held.count() == 1
    assert Job.objects.get(id=other.id).state == JobState.PENDING


def test_bulk_retry_of_a_workflows_failed_nodes_re_arms_the_graph_as_single_presses_do():
    from jobs.workflows import Workflow
    from tests import tasks

    wf = Workflow("bulk")
    first = wf.add(tasks.record, "first")
    second = wf.add(tasks.record, "second", after=[first], on_upstream_failure="run")
    wf.add(tasks.record, "third", after=[second])
    wf.enqueue()
    ids = [n.job_id for n in wf.nodes]
    for job_id in ids[:2]:  # both ended on their own; the third was cancelled by the second
        Job.objects.filter(id=job_id).update(
            state=JobState.DEAD_LETTER, attempt=1, finished_at=timezone.now(), waiting_for=0
        )
    Job.objects.filter(id=ids[2]).update(
        state=JobState.CANCELLED, finished_at=timezone.now(), error_type="ParentFailed"
    )
    result = bulk.apply("retry", Job.objects.filter(id__in=ids[:2]))
    assert result.applied >= 1
    states = {j.id: (j.state, j.waiting_for) for j in Job.objects.filter(id__in=ids)}
    assert states[ids[0]] == (JobState.PENDING, 0)
    assert states[ids[1]] == (JobState.SCHEDULED, 1)  # waits for the first once, not twice
    assert states[ids[2]] == (JobState.SCHEDULED, 1)


def test_bulk_cancel_cancels_waiting_jobs():
    make_job(JobState.PENDING)
    make_job(JobState.RETRYING)
    make_job(JobState.DEAD_LETTER)
    result = bulk.apply("cancel", Job.objects.all())
    assert (result.matched, result.applied) == (3, 2)


def test_an_unknown_action_is_refused():
    with pytest.raises(ValueError):
        bulk.apply("explode", Job.objects.all())
