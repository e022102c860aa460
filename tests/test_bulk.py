import time
from functools import partial

import pytest
from django.contrib.auth import get_user_model
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import actions, bulk
from jobs.models import Attempt, AuditEntry, CounterDelta, Job
from jobs.states import JobState
from tests.concurrency import at_once, holding_meanwhile
from tests.factories import add_attempts, make_job

ACTIONS = ("retry", "discard", "cancel")

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


def test_a_run_stopped_early_is_audited_with_the_batches_done_and_says_so():
    for _ in range(5):
        make_job(JobState.DEAD_LETTER)
    run = bulk.run("retry", Job.objects.all(), batch=2)
    assert next(run) == bulk.BulkResult(matched=2, applied=2)
    run.close()  # the progress page was closed
    entry = AuditEntry.objects.get()
    assert entry.outcome == "stopped before the end: 2 of 2 matching jobs changed"
    assert entry.detail["complete"] is False


def test_a_cancel_batch_that_fails_changes_none_of_its_jobs_and_the_audit_says_so(
    monkeypatch,
):
    for _ in range(4):
        make_job(JobState.PENDING)
    done = []

    def cancel_then_fail(job_ids):
        if done:
            with transaction.atomic():  # fails halfway, as a deadlocked batch does
                actions.cancel_many(job_ids)
                raise OperationalError("deadlock detected")
        done.append(job_ids)
        return actions.cancel_many(job_ids)

    monkeypatch.setitem(bulk.ACTIONS, "cancel", cancel_then_fail)
    with pytest.raises(OperationalError):
        bulk.apply("cancel", Job.objects.all(), batch=2)
    assert Job.objects.filter(state=JobState.CANCELLED).count() == 2
    entry = AuditEntry.objects.get()
    assert entry.outcome == "stopped before the end: 2 of 2 matching jobs changed"


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


def cancelled_workflow(shape):
    """A workflow cancelled before any node ran: a chain of ten, or a root, eight nodes after
    it and one after those; its job ids in the order they were added."""
    from jobs import workflows
    from jobs.workflows import Workflow
    from tests import tasks

    wf = Workflow(shape)
    if shape == "chain":
        node = wf.add(tasks.record, 0)
        for i in range(1, 10):
            node = wf.add(tasks.record, i, after=[node])
    else:
        root = wf.add(tasks.record, "root")
        leaves = [wf.add(tasks.record, i, after=[root]) for i in range(8)]
        wf.add(tasks.record, "sink", after=leaves)
    workflow_id = wf.enqueue()
    workflows.cancel(workflow_id)
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.CANCELLED}
    return [n.job_id for n in wf.nodes]


@pytest.mark.parametrize("shape", ["chain", "fan-in"])
def test_bulk_discard_of_a_workflow_over_many_batches_discards_every_node(shape):
    ids = cancelled_workflow(shape)
    result = bulk.apply("discard", Job.objects.filter(state=JobState.CANCELLED), batch=3)
    assert (result.matched, result.applied) == (10, 10)
    assert not Job.objects.filter(id__in=ids).exists()


@pytest.mark.parametrize("shape", ["chain", "fan-in"])
def test_bulk_retry_of_a_workflow_over_many_batches_puts_every_node_back(shape):
    ids = cancelled_workflow(shape)
    result = bulk.apply("retry", Job.objects.filter(state=JobState.CANCELLED), batch=3)
    assert (result.matched, result.applied) == (10, 10)
    states = dict(Job.objects.values_list("id", "state"))
    assert states[ids[0]] == JobState.PENDING
    assert {states[job_id] for job_id in ids[1:]} == {JobState.SCHEDULED}


@pytest.mark.parametrize("action", ["retry", "discard"])
def test_a_workflow_larger_than_a_batch_goes_batch_by_batch_from_the_right_end(action):
    ids = cancelled_workflow("chain")
    run = bulk.run(action, Job.objects.filter(state=JobState.CANCELLED), batch=3)
    assert next(run) == bulk.BulkResult(matched=3, applied=3)
    run.close()  # the page was closed: the batch done stays done
    states = dict(Job.objects.values_list("id", "state"))
    if action == "retry":  # from the start of the chain
        assert [states[job_id] for job_id in ids[:4]] == [
            JobState.PENDING,
            JobState.SCHEDULED,
            JobState.SCHEDULED,
            JobState.CANCELLED,
        ]
    else:  # from its end
        assert set(states) == set(ids[:7])
    assert "stopped before the end" in AuditEntry.objects.get(action=f"bulk {action}").outcome
    # A second run goes on from there.
    result = bulk.apply(action, Job.objects.filter(state=JobState.CANCELLED), batch=3)
    assert (result.matched, result.applied) == (7, 7)


def test_a_bulk_action_counts_each_job_once_when_a_batch_takes_later_ones_with_it():
    ids = cancelled_workflow("chain")
    alone = [make_job(JobState.CANCELLED) for _ in range(5)]
    seen = []
    result = bulk.apply(
        "discard",
        Job.objects.filter(state=JobState.CANCELLED),
        batch=2,
        progress=lambda matched, applied: seen.append(matched),
    )
    assert (result.matched, result.applied) == (15, 15)
    assert seen == sorted(seen) and seen[-1] == 15
    assert not Job.objects.filter(id__in=ids + [j.id for j in alone]).exists()


def test_bulk_cancel_cancels_waiting_jobs():
    make_job(JobState.PENDING)
    make_job(JobState.RETRYING)
    make_job(JobState.DEAD_LETTER)
    result = bulk.apply("cancel", Job.objects.all())
    assert (result.matched, result.applied) == (3, 2)


def test_bulk_cancel_asks_running_jobs_to_stop_and_cancels_what_waits_for_them():
    parent = make_job(JobState.PENDING)
    child = make_job(JobState.SCHEDULED, parent=parent)
    running = make_job(JobState.RUNNING)
    asked_before = make_job(JobState.RUNNING, cancel_requested_at=timezone.now())
    result = bulk.apply("cancel", Job.objects.exclude(id=child.id))
    assert (result.matched, result.applied) == (3, 2)
    states = dict(Job.objects.values_list("id", "state"))
    assert states[parent.id] == states[child.id] == JobState.CANCELLED
    assert Job.objects.get(id=child.id).error_type == "ParentFailed"
    assert states[running.id] == JobState.RUNNING
    assert Job.objects.get(id=running.id).cancel_requested_at is not None
    assert Job.objects.get(id=asked_before.id).cancel_requested_at == (
        asked_before.cancel_requested_at
    )
    assert CounterDelta.objects.totals().get("jobs_cancelled") == 2


def test_bulk_discard_deletes_finished_jobs_with_their_attempts_keeping_the_runs_after_them():
    dead = make_job(JobState.DEAD_LETTER)
    add_attempts(dead, ["failed", "failed", "failed"])
    rerun = make_job(JobState.PENDING, rerun_of=dead)
    cancelled = make_job(JobState.CANCELLED)
    result = bulk.apply("discard", Job.objects.filter(id__in=[dead.id, cancelled.id, rerun.id]))
    assert (result.matched, result.applied) == (3, 2)
    assert list(Job.objects.values_list("id", flat=True)) == [rerun.id]
    assert not Attempt.objects.exists()
    assert Job.objects.get(id=rerun.id).rerun_of_id is None


@pytest.mark.parametrize(
    ("action", "state"),
    [
        ("retry", JobState.DEAD_LETTER),
        ("cancel", JobState.PENDING),
        ("cancel", JobState.RUNNING),
        ("discard", JobState.DEAD_LETTER),
    ],
)
def test_a_batch_takes_as_many_queries_for_forty_jobs_as_for_four(action, state):
    """A bulk action over many jobs finishes within a request's time: its statements per batch
    do not grow with the batch's size."""

    def queries_for(n):
        jobs = [make_job(state) for _ in range(n)]
        for job in jobs:
            add_attempts(job, ["failed"] * job.attempt)
        with CaptureQueriesContext(connection) as run:
            result = bulk.apply(action, Job.objects.filter(id__in=[j.id for j in jobs]))
        assert (result.matched, result.applied) == (n, n)
        return len(run.captured_queries)

    assert queries_for(40) == queries_for(4)


@pytest.mark.django_db(transaction=True)
def test_bulk_retries_discards_and_cancels_racing_over_the_same_jobs_each_change_a_job_once():
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serialises writers; the race needs concurrent connections")
    for _ in range(300):
        make_job(JobState.DEAD_LETTER)
    everything = Job.objects.all()

    def bulk_action(action):
        return action, bulk.apply(action, everything, batch=50)

    results, errors = at_once([partial(bulk_action, action) for action in ACTIONS * 2])
    assert errors == []  # a deadlock or a constraint error here is the bug under test
    applied = {action: 0 for action in ACTIONS}
    for action, result in results:
        applied[action] += result.applied
    left = dict(Job.objects.values_list("id", "state"))
    # Every retry puts a finished job back in line, every cancel ends one waiting there, and
    # every discard deletes a finished one: the counts must add up to what is left.
    assert applied["discard"] == 300 - len(left)
    assert applied["retry"] >= applied["cancel"]
    assert set(left.values()) <= {JobState.PENDING, JobState.CANCELLED, JobState.DEAD_LETTER}
    assert applied["retry"] - applied["cancel"] == list(left.values()).count(JobState.PENDING)


@pytest.mark.django_db(transaction=True)
def test_bulk_cancel_waits_for_a_finish_releasing_the_job_after_it_and_never_deadlocks():
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serialises writers; the race needs concurrent connections")
    first = make_job(JobState.RUNNING)
    after = make_job(JobState.SCHEDULED, parent=first)

    def finish_as_a_worker_does(holding):
        # A finish holds its job's row, then locks the jobs it releases.
        Job.objects.filter(id=first.id).update(
            state=JobState.SUCCEEDED, finished_at=timezone.now(), lease_id=None
        )
        holding.set()
        time.sleep(0.5)
        list(Job.objects.select_for_update().filter(id=after.id))

    with holding_meanwhile(finish_as_a_worker_does) as errors:
        result = bulk.apply("cancel", Job.objects.filter(id__in=[first.id, after.id]))
    assert errors == []  # "deadlock detected" in either transaction is the bug under test
    assert (result.matched, result.applied) == (2, 1)
    states = dict(Job.objects.values_list("id", "state"))
    assert (states[first.id], states[after.id]) == (JobState.SUCCEEDED, JobState.CANCELLED)


def test_an_unknown_action_is_refused():
    with pytest.raises(ValueError):
        bulk.apply("explode", Job.objects.all())
