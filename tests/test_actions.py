import time
import uuid
from datetime import timedelta
from functools import partial

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from jobs import actions
from jobs.models import Attempt, AuditEntry, CounterDelta, Job
from jobs.states import TERMINAL, JobState
from tests import tasks
from tests.concurrency import at_once, holding_meanwhile
from tests.factories import add_attempts, make_job

pytestmark = pytest.mark.django_db

NOT_RETRYABLE = [
    JobState.PENDING,
    JobState.SCHEDULED,
    JobState.RUNNING,
    JobState.RETRYING,
    JobState.SUCCEEDED,
]


def test_retry_puts_a_dead_letter_back_in_line_on_the_same_row():
    job = make_job(JobState.DEAD_LETTER, error_traceback="Traceback ...", worker_id="w1")
    add_attempts(job, ["failed", "failed", "failed"])
    assert actions.retry(job.id) is True
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert (job.error_type, job.error_message, job.error_traceback) == ("", "", "")
    assert (job.worker_id, job.finished_at, job.started_at, job.dead_letter_reason) == (
        "",
        None,
        None,
        "",
    )
    assert job.max_attempts == job.attempt + 1 == 4
    assert Job.objects.count() == 1


def test_retry_keeps_every_attempt_of_the_history():
    job = make_job(JobState.DEAD_LETTER)
    add_attempts(job, ["failed", "failed", "failed"])
    actions.retry(job.id)
    assert Attempt.objects.filter(job=job).count() == 3


def test_retry_of_a_cancelled_job_that_has_attempts_left_keeps_max_attempts():
    job = make_job(JobState.CANCELLED, attempt=1, max_attempts=5)
    assert actions.retry(job.id) is True
    job.refresh_from_db()
    assert (job.state, job.max_attempts) == (JobState.PENDING, 5)


@pytest.mark.parametrize("state", NOT_RETRYABLE)
def test_retry_is_refused_in_any_other_state(state):
    job = make_job(state, attempt=1 if state == JobState.RETRYING else 0)
    assert actions.retry(job.id) is False
    job.refresh_from_db()
    assert job.state == state


def test_retrying_twice_has_one_effect_and_says_so():
    job = make_job(JobState.DEAD_LETTER)
    first = actions.retry_job(job.id)
    second = actions.retry_job(job.id)
    assert (first.changed, second.changed) == (True, False)
    assert second.message == "job already pending"


def test_retry_of_a_job_that_used_100_attempts_asks_for_a_rerun():
    job = make_job(JobState.DEAD_LETTER, attempt=100, max_attempts=100)
    result = actions.retry_job(job.id)
    assert not result.changed and "rerun" in result.message


@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_rerun_makes_a_new_linked_run_and_leaves_the_original_alone(state):
    original = make_job(state, args=[7, 8], queue_name="emails", priority=5)
    before = Job.objects.values().get(id=original.id)
    new = actions.rerun(original.id)
    assert new.rerun_of_id == original.id
    assert (new.task_path, new.args, new.queue_name, new.priority) == (
        original.task_path,
        [7, 8],
        "emails",
        5,
    )
    assert (new.state, new.attempt) == (JobState.PENDING, 0)
    assert Job.objects.values().get(id=original.id) == before


@pytest.mark.parametrize("edited", [False, True])
def test_a_rerun_of_a_retried_job_gets_the_tasks_own_attempts_not_the_raised_ones(edited):
    job = make_job(JobState.DEAD_LETTER, task_path="tests.tasks.always_fails", args=["k"])
    assert actions.retry(job.id)
    Job.objects.filter(id=job.id).update(
        state=JobState.DEAD_LETTER, attempt=4, finished_at=timezone.now()
    )
    assert Job.objects.get(id=job.id).max_attempts == 4
    new = actions.rerun(job.id, args=["edited"] if edited else None)
    assert new.max_attempts == 3


def test_a_rerun_of_a_job_whose_task_is_gone_keeps_the_jobs_attempts():
    job = make_job(JobState.DEAD_LETTER, task_path="tests.tasks.no_such_task", max_attempts=7)
    assert actions.rerun(job.id).max_attempts == 7


def test_a_rerun_keeps_the_limit_key_and_the_backoff_its_original_was_enqueued_with():
    from jobs.retry import Fixed

    job_id = tasks.record.using(limit_key="tenant-42", backoff=Fixed(60)).enqueue("k").id
    Job.objects.filter(id=job_id).update(
        state=JobState.DEAD_LETTER, attempt=1, finished_at=timezone.now()
    )
    original = Job.objects.get(id=job_id)
    for new in (actions.rerun(job_id), actions.rerun(job_id, args=["edited"])):
        assert (new.limit_key, new.backoff) == ("tenant-42", original.backoff)
        assert new.backoff is not None


def test_an_edited_rerun_of_a_task_computing_its_limit_key_takes_the_new_arguments_key():
    job_id = tasks.per_tenant.enqueue(tenant_id=7).id
    Job.objects.filter(id=job_id).update(
        state=JobState.SUCCEEDED, attempt=1, finished_at=timezone.now()
    )
    assert actions.rerun(job_id).limit_key == "tenant-7"
    assert actions.rerun(job_id, kwargs={"tenant_id": 8}).limit_key == "tenant-8"
    with pytest.raises(ValueError, match="limit_key"):
        actions.rerun(job_id, kwargs={"other": 8})
    assert Job.objects.count() == 3


def test_a_rerun_of_a_job_discarded_meanwhile_answers_no_such_job(monkeypatch):
    original = make_job(JobState.DEAD_LETTER)

    def discarded_meanwhile(request_key):  # between the rerun's first read and its write
        assert actions.discard(original.id)

    monkeypatch.setattr(actions, "_earlier_rerun", discarded_meanwhile)
    result = actions.rerun_job(original.id, request_key="press")
    assert (result.changed, result.message) == (False, "no such job")
    assert not Job.objects.exists()


def test_a_rerun_of_a_job_retried_meanwhile_is_refused(monkeypatch):
    original = make_job(JobState.DEAD_LETTER)

    def retried_meanwhile(request_key):
        assert actions.retry(original.id)

    monkeypatch.setattr(actions, "_earlier_rerun", retried_meanwhile)
    result = actions.rerun_job(original.id, request_key="press")
    assert not result.changed and "only finished jobs can be rerun" in result.message
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_reruns_and_discards_of_one_job_never_fail():
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serialises writers; the race needs concurrent connections")
    for _ in range(10):
        job = make_job(JobState.DEAD_LETTER)
        results, errors = at_once(
            [partial(actions.rerun_job, job.id), partial(actions.discard_job, job.id)]
        )
        assert errors == []  # a raise here is the bug under test
        (rerun,) = [r for r in results if r.message != "job discarded"]
        assert rerun.changed or rerun.message == "no such job"
        if rerun.changed:  # the rerun came first: the discard cleared its link
            assert Job.objects.get(id=rerun.new_job.id).rerun_of_id is None
        assert not Job.objects.filter(id=job.id).exists()
        Job.objects.all().delete()


@pytest.mark.parametrize("state", sorted(set(JobState) - TERMINAL))
def test_rerun_is_refused_before_the_job_has_finished(state):
    job = make_job(state, attempt=1 if state == JobState.RETRYING else 0)
    assert actions.rerun(job.id) is None
    assert Job.objects.count() == 1


@pytest.mark.parametrize("state", [JobState.PENDING, JobState.SCHEDULED, JobState.RETRYING])
def test_cancel_ends_a_waiting_job(state):
    job = make_job(state, attempt=1 if state == JobState.RETRYING else 0)
    assert actions.cancel(job.id) is True
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.finished_at is not None


def test_cancel_of_a_running_job_asks_its_worker_to_stop_it():
    job = make_job(JobState.RUNNING)
    assert actions.cancel(job.id) is True
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.cancel_requested_at is not None
    assert actions.cancel_job(job.id).message == "cancel already requested"


@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_cancel_is_refused_once_the_job_has_finished(state):
    job = make_job(state)
    assert actions.cancel(job.id) is False


def test_cancelling_a_parent_cancels_its_waiting_continuations():
    parent = make_job()
    child = make_job(JobState.SCHEDULED, parent=parent)
    grandchild = make_job(JobState.SCHEDULED, parent=child)
    actions.cancel(parent.id)
    assert set(Job.objects.filter(state=JobState.CANCELLED).values_list("id", flat=True)) == {
        parent.id,
        child.id,
        grandchild.id,
    }


def test_cancelling_a_parent_counts_each_continuation_it_cancels():
    parent = make_job()
    child = make_job(JobState.SCHEDULED, parent=parent)
    make_job(JobState.SCHEDULED, parent=child)
    actions.cancel(parent.id)
    assert CounterDelta.objects.totals().get("jobs_cancelled") == 3


def test_actions_on_unknown_or_malformed_ids_change_nothing():
    for job_id in (uuid.uuid4(), "nonsense", None):
        assert actions.retry(job_id) is False
        assert actions.rerun(job_id) is None
        assert actions.cancel(job_id) is False


def test_each_action_writes_an_audit_entry_naming_the_user():
    user = get_user_model().objects.create_user("operator")
    job = make_job(JobState.DEAD_LETTER)
    actions.retry_job(job.id, user=user, source="dashboard")
    actions.retry_job(job.id, user=user, source="dashboard")
    entries = list(AuditEntry.objects.filter(job=job).order_by("at", "id"))
    assert [(e.username, e.action, e.source) for e in entries] == [
        ("operator", "retry", "dashboard"),
        ("operator", "retry", "dashboard"),
    ]
    assert [e.outcome for e in entries] == ["job put back in line", "job already pending"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_of_one_job_have_one_effect():
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serialises writers; the race needs concurrent connections")
    job = make_job(JobState.DEAD_LETTER)
    results, errors = at_once([partial(actions.retry, job.id) for _ in range(8)])
    assert errors == []
    assert sorted(results) == [False] * 7 + [True]


def test_a_rerun_with_the_same_request_key_has_one_effect():
    original = make_job(JobState.DEAD_LETTER)
    first = actions.rerun_job(original.id, request_key="press-1")
    second = actions.rerun_job(original.id, request_key="press-1")
    assert first.changed and not second.changed
    assert second.message == "already rerun" and second.new_job.id == first.new_job.id
    assert Job.objects.filter(rerun_of=original).count() == 1
    third = actions.rerun_job(original.id, request_key="press-2")
    assert third.changed and Job.objects.filter(rerun_of=original).count() == 2


def _dead_letter_whose_key_was_taken():
    dead = make_job(JobState.DEAD_LETTER, dedup_key="welcome-42")
    holder = make_job(JobState.PENDING, dedup_key="welcome-42")
    return dead, holder


def test_retry_of_a_dead_letter_whose_dedup_key_was_taken_is_refused_naming_the_holder():
    dead, holder = _dead_letter_whose_key_was_taken()

    assert actions.retry(dead.id) is False
    result = actions.retry_job(dead.id)

    assert result.changed is False
    assert result.held_by == holder.id
    assert str(holder.id) in result.message
    assert "welcome-42" in result.message
    dead.refresh_from_db()
    assert dead.state == JobState.DEAD_LETTER
    assert AuditEntry.objects.filter(job=dead, outcome=result.message).count() == 2


def test_a_refused_retry_leaves_the_transaction_usable():
    dead, holder = _dead_letter_whose_key_was_taken()
    other = make_job(JobState.DEAD_LETTER)
    from django.db import transaction

    with transaction.atomic():
        assert actions.retry(dead.id) is False
        assert actions.retry(other.id) is True
    other.refresh_from_db()
    assert other.state == JobState.PENDING


def test_retry_succeeds_once_the_holder_of_the_dedup_key_has_finished():
    dead, holder = _dead_letter_whose_key_was_taken()
    Job.objects.filter(id=holder.id).update(
        state=JobState.SUCCEEDED, finished_at=holder.enqueued_at, attempt=1
    )
    assert actions.retry(dead.id) is True


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_of_two_dead_letters_sharing_a_dedup_key_let_one_win():
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serialises writers; the race needs concurrent connections")
    jobs = [make_job(JobState.DEAD_LETTER, dedup_key="shared") for _ in range(6)]
    results, errors = at_once([partial(actions.retry_job, job.id) for job in jobs])
    assert errors == []  # a raise here is the bug under test
    winners = [r for r in results if r.changed]
    assert len(winners) == 1
    assert Job.objects.filter(dedup_key="shared", state=JobState.PENDING).count() == 1
    assert {r.held_by for r in results if not r.changed} <= {winners[0].job.id, None}


# Run now.


def test_run_now_makes_a_job_waiting_for_later_due_at_once_and_audits_it():
    job = make_job(JobState.PENDING, run_after=timezone.now() + timedelta(hours=1))
    before = timezone.now()
    assert actions.run_now(job.id, source="api") is True
    job.refresh_from_db()
    assert before <= job.run_after <= timezone.now()
    assert job.state == JobState.PENDING
    entry = AuditEntry.objects.get(job=job)
    assert (entry.action, entry.outcome, entry.source) == ("run now", "job due now", "api")


def test_run_now_brings_a_retrying_job_forward_keeping_its_attempts():
    job = make_job(JobState.RETRYING, attempt=1, run_after=timezone.now() + timedelta(minutes=5))
    assert actions.run_now(job.id) is True
    job.refresh_from_db()
    assert (job.state, job.attempt) == (JobState.RETRYING, 1)
    assert job.run_after <= timezone.now()


def test_run_now_of_a_job_already_due_changes_nothing_and_says_so():
    job = make_job(JobState.PENDING, run_after=timezone.now() - timedelta(seconds=5))
    result = actions.run_now_job(job.id)
    assert (result.changed, result.message) == (False, "job already due")


@pytest.mark.parametrize("state", [JobState.SCHEDULED, JobState.RUNNING, *sorted(TERMINAL)])
def test_run_now_is_refused_outside_pending_and_retrying(state):
    job = make_job(state, run_after=timezone.now() + timedelta(hours=1))
    result = actions.run_now_job(job.id)
    assert result.changed is False
    job.refresh_from_db()
    assert job.run_after > timezone.now()


def test_run_now_of_an_unknown_job_is_false():
    assert actions.run_now(uuid.uuid4()) is False
    assert actions.run_now("not-a-uuid") is False


# Discard.


@pytest.mark.parametrize("state", [JobState.DEAD_LETTER, JobState.CANCELLED, JobState.SUCCEEDED])
def test_discard_deletes_a_finished_job_and_its_attempts_keeping_the_audit(state):
    user = get_user_model().objects.create_user("ops", is_staff=True)
    job = make_job(state)
    add_attempts(job, ["failed"])
    rerun = make_job(JobState.PENDING, rerun_of=job)
    continuation = make_job(JobState.SUCCEEDED, parent=job)
    assert actions.discard(job.id, user=user, source="api") is True
    assert not Job.objects.filter(id=job.id).exists()
    assert not Attempt.objects.filter(job_id=job.id).exists()
    rerun.refresh_from_db()
    continuation.refresh_from_db()
    assert (rerun.rerun_of_id, continuation.parent_id) == (None, None)
    entry = AuditEntry.objects.get(action="discard")
    assert (entry.subject, entry.task_path, entry.username, entry.source, entry.job_id) == (
        str(job.id),
        job.task_path,
        "ops",
        "api",
        None,
    )


@pytest.mark.parametrize(
    "state", [JobState.PENDING, JobState.SCHEDULED, JobState.RUNNING, JobState.RETRYING]
)
def test_discard_refuses_a_job_that_has_not_finished(state):
    job = make_job(state)
    result = actions.discard_job(job.id)
    assert result.changed is False and "only finished jobs" in result.message
    assert Job.objects.filter(id=job.id).exists()


def test_discard_of_an_unknown_id_changes_nothing():
    assert actions.discard(uuid.uuid4()) is False
    assert actions.discard("not-an-id") is False


# Edit and rerun.


def test_rerun_with_new_arguments_runs_them_and_audits_old_and_new():
    job = make_job(JobState.DEAD_LETTER, args=[1, 0], kwargs={"a": 1})
    new = actions.rerun(job.id, args=[1, 2], kwargs={"b": [True]})
    assert (new.args, new.kwargs, new.rerun_of_id) == ([1, 2], {"b": [True]}, job.id)
    job.refresh_from_db()
    assert (job.args, job.kwargs) == ([1, 0], {"a": 1})
    entry = AuditEntry.objects.get(action="rerun")
    assert entry.detail == {
        "old": {"args": [1, 0], "kwargs": {"a": 1}},
        "new": {"args": [1, 2], "kwargs": {"b": [True]}},
    }


def test_rerun_with_only_kwargs_keeps_the_original_args():
    job = make_job(JobState.SUCCEEDED, args=[5], kwargs={})
    new = actions.rerun(job.id, kwargs={"x": "y"})
    assert (new.args, new.kwargs) == ([5], {"x": "y"})


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        ({"not": "a list"}, None, TypeError),
        (None, [1], TypeError),
        ([float("nan")], None, ValueError),
        (["a\x00b"], None, ValueError),
        ([object()], None, TypeError),
        (None, {1: "non-string key"}, TypeError),
        (["x" * 2_000_000], None, ValueError),
        (None, {"big": "x" * 1_048_576}, ValueError),
    ],
)
def test_rerun_with_bad_arguments_is_a_clear_error_and_creates_nothing(args, kwargs, error):
    job = make_job(JobState.DEAD_LETTER)
    with pytest.raises(error):
        actions.rerun(job.id, args=args, kwargs=kwargs)
    assert Job.objects.count() == 1
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_cancel_waiting_for_a_claim_of_its_job_asks_the_claimed_job_to_stop():
    job = make_job(JobState.PENDING)

    def claim_as_a_worker_does(holding):
        now = timezone.now()
        Job.objects.filter(id=job.id).update(
            state=JobState.RUNNING,
            attempt=1,
            lease_id=uuid.uuid4(),
            started_at=now,
            worker_id="w-test",
            lease_expires_at=now + timedelta(seconds=60),
        )
        holding.set()
        time.sleep(0.5)

    with holding_meanwhile(claim_as_a_worker_does) as errors:
        result = actions.cancel_job(job.id)
    assert errors == []
    assert result.changed
    assert result.message == "cancel requested; the worker will stop the job"
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.cancel_requested_at is not None
