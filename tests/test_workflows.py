"""jobs.workflows in process: the checks at enqueue, what is stored, cancel, retry and re-arm."""

import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import F
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import actions, db, workflows
from jobs.errors import DuplicateJob
from jobs.maintenance import prune_jobs
from jobs.models import AuditEntry, CounterDelta, Dependency, Job
from jobs.models import Workflow as WorkflowRecord
from jobs.states import AttemptOutcome, DeadLetterReason, JobState
from jobs.workflows import Batch, Workflow
from tests import tasks
from tests.concurrency import holding_meanwhile

pytestmark = pytest.mark.django_db


def nothing_stored():
    return not (Job.objects.exists() or Dependency.objects.exists())


def run(node_or_id, state=JobState.SUCCEEDED, value=None):
    """Claim the node's job and finish it in `state`, as a worker would."""
    finish(claim(node_or_id), state, value)


def claim(node_or_id):
    job_id = getattr(node_or_id, "job_id", node_or_id)
    claimed = db.claim_one(job_id, worker_id="w-test", lease_seconds=60)
    assert claimed is not None, f"{job_id} is not due"
    return claimed


def finish(claimed, state=JobState.SUCCEEDED, value=None):
    """End a claimed job's attempt in `state` (a requested cancel wins, as with a worker)."""
    outcome = {
        JobState.SUCCEEDED: AttemptOutcome.SUCCEEDED,
        JobState.DEAD_LETTER: AttemptOutcome.FAILED,
    }[state]
    db.finish(
        [
            db.Finish(
                job_id=claimed.id,
                lease_id=claimed.lease_id,
                state=state,
                outcome=outcome,
                worker_id="w-test",
                return_json=None if value is None else f'"{value}"',
                reason=DeadLetterReason.EXHAUSTED if state == JobState.DEAD_LETTER else "",
                error_type="ValueError" if state == JobState.DEAD_LETTER else "",
                started_at=timezone.now(),
                finished_at=timezone.now(),
            )
        ]
    )


def state(node):
    return state_of(node.job_id)


def state_of(job_id):
    return Job.objects.get(id=job_id).state


def chain(*names):
    """A workflow of nodes, each after the one before it (not enqueued yet)."""
    wf = Workflow("chain")
    nodes: list = []
    for name in names:
        nodes.append(wf.add(tasks.node, name, after=nodes[-1:]))
    return wf, *nodes


def diamond():
    wf = Workflow("diamond")
    top = wf.add(tasks.node, "top")
    left = wf.add(tasks.node, "left", after=[top])
    right = wf.add(tasks.node, "right", after=[top])
    last = wf.add(tasks.join, "last", after=[left, right])
    return wf, top, left, right, last


def test_enqueue_stores_every_node_waiting_for_its_upstream_nodes():
    wf, top, left, right, last = diamond()
    workflow_id = wf.enqueue()
    record = WorkflowRecord.objects.get(id=workflow_id)
    assert (record.name, record.kind, record.nodes) == ("diamond", "workflow", 4)
    jobs = {j.id: j for j in Job.objects.filter(workflow_id=workflow_id)}
    assert [jobs[n.job_id].node_name for n in (top, left, right, last)] == [
        "node",
        "node-2",
        "node-3",
        "join",
    ]
    assert jobs[top.job_id].state == JobState.PENDING
    assert [jobs[n.job_id].waiting_for for n in (top, left, right, last)] == [0, 1, 1, 2]
    assert {jobs[n.job_id].state for n in (left, right, last)} == {JobState.SCHEDULED}
    assert Dependency.objects.count() == 4
    assert CounterDelta.objects.totals() == {"jobs_enqueued": 4}


def test_a_workflow_enqueued_in_a_rolled_back_transaction_can_be_enqueued_again_but_not_twice():
    from django.db import transaction

    wf, *_ = diamond()

    class RolledBack(Exception):
        pass

    with pytest.raises(RolledBack), transaction.atomic():
        wf.enqueue()
        raise RolledBack
    assert not WorkflowRecord.objects.exists()
    workflow_id = wf.enqueue()
    assert Job.objects.filter(workflow_id=workflow_id).count() == 4
    with pytest.raises(ValueError, match="already enqueued"):
        wf.enqueue()


def test_a_node_runs_only_once_every_upstream_node_succeeded():
    wf, top, left, right, last = diamond()
    wf.enqueue()
    run(top)
    assert (state(left), state(right), state(last)) == (
        JobState.PENDING,
        JobState.PENDING,
        JobState.SCHEDULED,
    )
    run(left, value="L")
    assert state(last) == JobState.SCHEDULED
    run(right, value="R")
    assert state(last) == JobState.PENDING
    assert workflows.upstream_values(last.job_id) == {"node-2": "L", "node-3": "R"}


def test_a_cycle_is_refused_and_nothing_is_stored():
    wf = Workflow("loop")
    a = wf.add(tasks.node, "a")
    b = wf.add(tasks.node, "b", after=[a])
    a.after = (b,)
    with pytest.raises(ValueError, match="cycle"):
        wf.enqueue()
    assert nothing_stored()


def test_a_node_after_a_node_of_another_workflow_is_refused():
    other = Workflow("other").add(tasks.node, "x")
    wf = Workflow("mine")
    with pytest.raises(ValueError, match="nodes of this workflow"):
        wf.add(tasks.node, "y", after=[other])
    mine = wf.add(tasks.node, "y")
    mine.after = (other,)
    with pytest.raises(ValueError, match="another workflow"):
        wf.enqueue()
    assert nothing_stored()


def test_an_unknown_task_is_refused_and_nothing_is_stored():
    with pytest.raises(ValueError, match="unknown task"):
        Workflow("w").add(print, "x")
    wf = Workflow("w")
    wf.add(tasks.node, "fine")
    wf.add(tasks.node.using(queue_name="default"), "also fine")
    object.__setattr__(wf.nodes[1].task, "func", lambda: None)  # no longer importable by path
    with pytest.raises(ValueError, match="unknown task"):
        wf.enqueue()
    assert nothing_stored()


def test_a_bad_argument_in_any_node_stores_no_node():
    wf = Workflow("w")
    wf.add(tasks.node, "fine")
    wf.add(tasks.node, float("nan"))
    with pytest.raises(ValueError):
        wf.enqueue()
    assert nothing_stored() and not WorkflowRecord.objects.exists()


@pytest.mark.parametrize("kind", [Workflow, Batch])
def test_a_node_whose_dedup_key_is_held_is_refused_as_a_duplicate_and_nothing_is_stored(kind):
    holder = tasks.node.using(dedup_key="import-42").enqueue("holder")
    wf = kind("w")
    wf.add(tasks.node, "fine")
    wf.add(tasks.node.using(dedup_key="import-42"), "again")
    with pytest.raises(DuplicateJob) as refused:
        wf.enqueue()
    assert (refused.value.dedup_key, str(refused.value.job_id)) == ("import-42", holder.id)
    assert list(Job.objects.values_list("id", flat=True)) == [uuid.UUID(holder.id)]
    assert not (WorkflowRecord.objects.exists() or Dependency.objects.exists())


@pytest.mark.parametrize("kind", [Workflow, Batch])
def test_two_nodes_sharing_a_dedup_key_are_refused_and_nothing_is_stored(kind):
    wf = kind("w")
    wf.add(tasks.node.using(dedup_key="once"), "first")
    wf.add(tasks.node.using(dedup_key="once"), "second")
    with pytest.raises(ValueError, match="dedup_key 'once'"):
        wf.enqueue()
    assert nothing_stored() and not WorkflowRecord.objects.exists()


def test_a_batch_callback_sharing_a_members_dedup_key_is_refused():
    batch = Batch("b", on_finish=tasks.batch_callback.using(dedup_key="once"))
    batch.add(tasks.node.using(dedup_key="once"), "member")
    with pytest.raises(ValueError, match="dedup_key 'once'"):
        batch.enqueue()
    assert nothing_stored()


def test_node_names_are_unique_and_callback_names_reserved():
    wf = Workflow("w")
    wf.add(tasks.node, "a", name="same")
    with pytest.raises(ValueError, match="already has a node"):
        wf.add(tasks.node, "b", name="same")
    with pytest.raises(ValueError):
        wf.add(tasks.node, "c", name="batch.on_success")


def test_default_node_names_number_each_task_and_step_over_names_given_explicitly():
    wf = Workflow("w")
    names = [
        wf.add(tasks.node, "a").name,
        wf.add(tasks.node, "b", name="node-3").name,
        wf.add(tasks.node, "c").name,
        wf.add(tasks.join, "d").name,
        wf.add(tasks.node, "e").name,
        wf.add(tasks.node, "f", name="node-5").name,
        wf.add(tasks.node, "g").name,
    ]
    assert names == ["node", "node-3", "node-2", "join", "node-4", "node-5", "node-6"]


def test_a_dead_letter_cancels_what_follows_unless_it_runs_on_upstream_failure():
    wf = Workflow("w")
    top = wf.add(tasks.node, "top")
    child = wf.add(tasks.node, "child", after=[top])
    grandchild = wf.add(tasks.node, "grandchild", after=[child])
    anyway = wf.add(tasks.join, "anyway", after=[top], on_upstream_failure="run")
    wf.enqueue()
    run(top, JobState.DEAD_LETTER)
    assert (state(child), state(grandchild), state(anyway)) == (
        JobState.CANCELLED,
        JobState.CANCELLED,
        JobState.PENDING,
    )
    assert workflows.upstream_values(anyway.job_id) == {"node": None}
    assert CounterDelta.objects.totals()["jobs_cancelled"] == 2


def test_retrying_the_dead_letter_re_arms_what_its_failure_cancelled():
    wf = Workflow("w")
    top = wf.add(tasks.node, "top")
    other = wf.add(tasks.node, "other")
    child = wf.add(tasks.node, "child", after=[top, other])
    grandchild = wf.add(tasks.node, "grandchild", after=[child])
    wf.enqueue()
    run(top, JobState.DEAD_LETTER)
    assert state(grandchild) == JobState.CANCELLED
    run(other)
    result = actions.retry_job(top.job_id, source="python")
    assert result.changed and "2 jobs after it wait again" in result.message
    child_row = Job.objects.get(id=child.job_id)
    # `other` already succeeded: only the retried node is still awaited.
    assert (child_row.state, child_row.waiting_for, child_row.finished_at) == (
        JobState.SCHEDULED,
        1,
        None,
    )
    assert Job.objects.get(id=grandchild.job_id).waiting_for == 1
    run(top)
    run(child)
    assert state(grandchild) == JobState.PENDING
    assert AuditEntry.objects.filter(job_id=top.job_id, action="retry").exists()


def test_a_workflows_start_stays_its_first_attempts_start_after_the_node_is_retried():
    wf, first, _second = chain("first", "second")
    workflow_id = wf.enqueue()
    run(first, JobState.DEAD_LETTER)
    first_start = timezone.now() - timedelta(hours=1)
    Job.objects.get(id=first.job_id).attempts.update(started_at=first_start)
    actions.retry_job(first.job_id, source="python")
    claim(first)
    assert Job.objects.get(id=first.job_id).started_at > first_start
    [summary] = workflows.summaries(WorkflowRecord.objects.filter(id=workflow_id))
    assert summary.started_at == first_start


@pytest.mark.parametrize("waits", ["in a retry's backoff", "snoozed"])
def test_a_workflow_whose_only_started_node_waits_again_is_running_not_pending(waits):
    wf, first, _second = chain("first", "second")
    workflow_id = wf.enqueue()
    [summary] = workflows.summaries(WorkflowRecord.objects.filter(id=workflow_id))
    assert summary.state == "pending"
    claimed = claim(first)
    again = {
        "in a retry's backoff": {"state": JobState.RETRYING, "outcome": AttemptOutcome.FAILED},
        "snoozed": {"state": JobState.PENDING, "outcome": AttemptOutcome.SNOOZED, "snoozed": True},
    }[waits]
    db.finish(
        [
            db.Finish(
                job_id=claimed.id,
                lease_id=claimed.lease_id,
                worker_id="w-test",
                delay=3600,
                started_at=timezone.now(),
                finished_at=timezone.now(),
                **again,
            )
        ]
    )
    assert state(first) == again["state"]
    [summary] = workflows.summaries(WorkflowRecord.objects.filter(id=workflow_id))
    assert (summary.state, summary.done) == ("running", 0)


def test_retrying_a_node_whose_upstream_did_not_succeed_is_refused_and_changes_nothing():
    wf, top, left, right, last = diamond()
    workflow_id = wf.enqueue()
    workflows.cancel(workflow_id)
    result = actions.retry_job(last.job_id)
    # Put back, it would be cancelled again for its upstream nodes' end (a worker's safety net
    # does just that): the operator is told which one to retry instead.
    assert not result.changed
    assert str(left.job_id) in result.message or str(right.job_id) in result.message
    assert "retry that job first" in result.message
    assert state(last) == JobState.CANCELLED
    assert AuditEntry.objects.filter(job_id=last.job_id, outcome=result.message).exists()
    assert workflows.retry_failed(workflow_id) == 4
    assert (state(top), state(left)) == (JobState.PENDING, JobState.SCHEDULED)
    assert (state(last), Job.objects.get(id=last.job_id).waiting_for) == (JobState.SCHEDULED, 2)
    run(top)
    run(left)
    run(right)
    assert state(last) == JobState.PENDING


def test_a_node_after_a_dead_letter_is_retried_once_that_one_is_back_in_line():
    wf, first, second = chain("first", "second")
    wf.enqueue()
    run(first, JobState.DEAD_LETTER)
    assert state(second) == JobState.CANCELLED
    assert not actions.retry(second.job_id)
    assert actions.retry(first.job_id)
    # The retry of the dead letter re-armed it already: nothing left to retry.
    assert state(second) == JobState.SCHEDULED
    assert not actions.retry(second.job_id)
    run(first)
    assert state(second) == JobState.PENDING


def test_a_bulk_retry_leaves_a_node_whose_failed_upstream_it_does_not_put_back():
    wf, first, second, third = chain("first", "second", "third")
    elsewhere = uuid.UUID(tasks.node.enqueue("elsewhere").id)
    wf.enqueue()
    run(first, JobState.DEAD_LETTER)
    run(elsewhere, JobState.DEAD_LETTER)
    assert (state(second), state(third)) == (JobState.CANCELLED, JobState.CANCELLED)
    # The cancelled nodes without the dead letter before them: neither can run.
    assert actions.retry_many([second.job_id, third.job_id, elsewhere]) == 1
    assert (state(second), state(third)) == (JobState.CANCELLED, JobState.CANCELLED)
    assert state_of(elsewhere) == JobState.PENDING
    # With it, every one goes back, each after the one before it (re-armed by its retry).
    assert actions.retry_many([third.job_id, second.job_id, first.job_id]) == 3
    assert waits(second.job_id) == (JobState.SCHEDULED, 1)
    assert waits(third.job_id) == (JobState.SCHEDULED, 1)


def test_a_bulk_retry_puts_back_a_cancelled_chain_in_order_whatever_the_ids():
    wf, first, second, third = chain("first", "second", "third")
    workflow_id = wf.enqueue()
    workflows.cancel(workflow_id)  # each node cancelled on its own, not by a failure
    # Ids are random: whichever order they sort in, each node goes back after the one before.
    assert actions.retry_many([third.job_id, second.job_id, first.job_id]) == 3
    assert waits(first.job_id) == (JobState.PENDING, 0)
    assert waits(second.job_id) == (JobState.SCHEDULED, 1)
    assert waits(third.job_id) == (JobState.SCHEDULED, 1)
    run(first)
    run(second)
    assert waits(third.job_id) == (JobState.PENDING, 0)


def test_cancel_ends_every_unfinished_node_and_is_audited():
    wf, top, left, right, last = diamond()
    workflow_id = wf.enqueue()
    db.claim_one(top.job_id, worker_id="w-test", lease_seconds=60)
    assert workflows.cancel(workflow_id) == 4
    assert {state(n) for n in (left, right, last)} == {JobState.CANCELLED}
    running = Job.objects.get(id=top.job_id)
    assert running.state == JobState.RUNNING and running.cancel_requested_at is not None
    entry = AuditEntry.objects.get(action="cancel workflow")
    assert (entry.subject, entry.detail) == (workflow_id, {"cancelled": 3, "stopping": 1})
    assert workflows.cancel(uuid.uuid4()) == 0
    assert workflows.cancel("not an id") == 0


@pytest.mark.parametrize("width", [5, 60])
def test_retrying_a_cancelled_fan_out_puts_its_nodes_back_layer_by_layer(width):
    wf = Workflow("fan-out")
    root = wf.add(tasks.node, "root")
    leaves = [wf.add(tasks.node, f"leaf-{i}", after=[root]) for i in range(width)]
    workflow_id = wf.enqueue()
    assert workflows.cancel(workflow_id) == width + 1
    with CaptureQueriesContext(connection) as queries:
        assert workflows.retry_failed(workflow_id) == width + 1
    assert state(root) == JobState.PENDING
    assert {state(n) for n in leaves} == {JobState.SCHEDULED}
    assert {Job.objects.get(id=n.job_id).waiting_for for n in leaves} == {1}
    # The same statements for 5 leaves as for 60: one layer, not one retry per leaf.
    if width == 60:
        assert len(queries) < 60, len(queries)


def test_a_batch_retried_to_success_runs_on_success_with_counts_that_count_it_once():
    batch = Batch("b", on_success=tasks.batch_callback, on_finish=tasks.batch_callback)
    ok = batch.add(tasks.node, "ok")
    bad = batch.add(tasks.node, "bad")
    batch_id = batch.enqueue()
    callbacks = {
        j.node_name: j.id for j in Job.objects.filter(workflow_id=batch_id).exclude(node_name="")
    }
    on_success, on_finish = callbacks["batch.on_success"], callbacks["batch.on_finish"]
    run(ok)
    run(bad, JobState.DEAD_LETTER)
    finish = Job.objects.get(id=on_finish)
    assert finish.state == JobState.PENDING
    assert finish.kwargs == {"batch_id": batch_id, "counts": {"succeeded": 1, "dead_letter": 1}}
    assert Job.objects.get(id=on_success).state == JobState.CANCELLED
    assert actions.retry(bad.job_id)
    assert Job.objects.get(id=on_success).state == JobState.SCHEDULED
    run(bad)
    success = Job.objects.get(id=on_success)
    assert success.state == JobState.PENDING
    assert success.kwargs == {"batch_id": batch_id, "counts": {"succeeded": 2}}


def test_a_batch_member_retried_before_on_finish_is_awaited_again():
    batch = Batch("b", on_finish=tasks.batch_callback)
    bad = batch.add(tasks.node, "bad")
    slow = batch.add(tasks.node, "slow")
    batch_id = batch.enqueue()
    on_finish = Job.objects.get(workflow_id=batch_id, node_name="batch.on_finish")
    run(bad, JobState.DEAD_LETTER)
    assert actions.retry(bad.job_id)
    run(slow)
    assert Job.objects.get(id=on_finish.id).state == JobState.SCHEDULED
    run(bad)
    assert Job.objects.get(id=on_finish.id).kwargs["counts"] == {"succeeded": 2}


def batch_of_two():
    """A batch of members `a` and `b` with both callbacks: (batch id, a, b, callbacks by name)."""
    batch = Batch("two", on_success=tasks.batch_callback, on_finish=tasks.batch_callback)
    a = batch.add(tasks.node, "a")
    b = batch.add(tasks.node, "b")
    batch_id = batch.enqueue()
    named = Job.objects.filter(workflow_id=batch_id, node_name__startswith="batch.")
    return batch_id, a, b, {j.node_name.removeprefix("batch."): j.id for j in named}


def waits(job_id):
    job = Job.objects.get(id=job_id)
    return job.state, job.waiting_for


def counts_given(job_id):
    return Job.objects.get(id=job_id).kwargs["counts"]


def test_a_retried_on_finish_waits_for_the_members_retried_after_it():
    batch_id, a, b, callback = batch_of_two()
    assert actions.cancel(callback["on_finish"])
    assert actions.cancel(a.job_id) and actions.cancel(b.job_id)
    # Every member has ended: the retried callback is due, with the counts of now.
    assert actions.retry(callback["on_finish"])
    assert waits(callback["on_finish"]) == (JobState.PENDING, 0)
    assert counts_given(callback["on_finish"]) == {"cancelled": 2}
    assert actions.retry(a.job_id) and actions.retry(b.job_id)
    assert waits(callback["on_finish"]) == (JobState.SCHEDULED, 2)
    assert waits(callback["on_success"]) == (JobState.SCHEDULED, 2)
    run(a)
    run(b)
    for name in ("on_success", "on_finish"):
        assert waits(callback[name]) == (JobState.PENDING, 0)
        assert counts_given(callback[name]) == {"succeeded": 2}


def test_retry_failed_after_a_batch_cancel_runs_the_callbacks_after_the_members():
    batch_id, a, b, callback = batch_of_two()
    workflows.cancel(batch_id)
    assert workflows.retry_failed(batch_id) == 2
    assert (state(a), state(b)) == (JobState.PENDING, JobState.PENDING)
    assert waits(callback["on_success"]) == (JobState.SCHEDULED, 2)
    assert waits(callback["on_finish"]) == (JobState.SCHEDULED, 2)
    for node in (a, b, callback["on_success"], callback["on_finish"]):
        run(node)
        assert state_of(getattr(node, "job_id", node)) == JobState.SUCCEEDED


def test_on_finish_released_by_a_dead_letter_waits_again_for_the_retried_member():
    batch_id, a, b, callback = batch_of_two()
    run(a)
    run(b, JobState.DEAD_LETTER)
    assert counts_given(callback["on_finish"]) == {"succeeded": 1, "dead_letter": 1}
    assert workflows.retry_failed(batch_id) == 1
    assert waits(callback["on_finish"]) == (JobState.SCHEDULED, 1)
    run(b)
    assert waits(callback["on_finish"]) == (JobState.PENDING, 0)
    assert counts_given(callback["on_finish"]) == {"succeeded": 2}


def test_on_finish_that_already_ran_does_not_run_again_when_a_member_is_retried():
    batch_id, a, b, callback = batch_of_two()
    run(a)
    run(b, JobState.DEAD_LETTER)
    run(callback["on_finish"])
    assert actions.retry(b.job_id)
    assert state_of(callback["on_finish"]) == JobState.SUCCEEDED
    run(b)
    assert state_of(callback["on_finish"]) == JobState.SUCCEEDED
    assert counts_given(callback["on_success"]) == {"succeeded": 2}


def test_a_run_anyway_node_waits_again_when_its_cancelled_upstream_is_retried():
    wf = Workflow("w")
    top = wf.add(tasks.node, "top")
    child = wf.add(tasks.node, "child", after=[top])
    anyway = wf.add(tasks.node, "anyway", after=[top], on_upstream_failure="run")
    wf.enqueue()
    assert actions.cancel(top.job_id)
    assert (state(child), state(anyway)) == (JobState.CANCELLED, JobState.PENDING)
    assert actions.retry(top.job_id)
    assert waits(anyway.job_id) == (JobState.SCHEDULED, 1)
    assert waits(child.job_id) == (JobState.SCHEDULED, 1)
    run(top)
    assert (state(child), state(anyway)) == (JobState.PENDING, JobState.PENDING)


def test_retry_failed_puts_many_failed_members_back_at_once_and_audits_each():
    batch = Batch("many", on_success=tasks.batch_callback, on_finish=tasks.batch_callback)
    members = [batch.add(tasks.node, str(i)) for i in range(40)]
    batch_id = batch.enqueue()
    for member in members:
        run(member, JobState.DEAD_LETTER)
    on_success, on_finish = (
        Job.objects.get(workflow_id=batch_id, node_name=f"batch.{name}").id
        for name in ("on_success", "on_finish")
    )
    run(on_finish)
    with CaptureQueriesContext(connection) as retried:
        assert workflows.retry_failed(batch_id) == 40
    # A batch's members wait for no other job: they go back together, the graph re-armed once.
    assert len(retried.captured_queries) < 40
    assert waits(on_success) == (JobState.SCHEDULED, 40)
    assert state_of(on_finish) == JobState.SUCCEEDED  # it ran; it does not run again
    audited = AuditEntry.objects.filter(action="retry").values_list("job_id", flat=True)
    assert sorted(audited) == sorted(member.job_id for member in members)
    for member in members:
        run(member)
    assert counts_given(on_success) == {"succeeded": 40}


def test_retry_failed_of_a_fan_out_takes_as_many_statements_for_forty_nodes_as_for_four():
    """Failed nodes after the same root go back together, their graph re-armed once: 2,000 of
    them took 10 s one by one on PostgreSQL, each re-arming the fan-in node after them."""

    def retried(n):
        wf = Workflow(f"fan-{n}")
        root = wf.add(tasks.node, "root")
        nodes = [wf.add(tasks.node, f"n{i}", after=[root]) for i in range(n)]
        last = wf.add(tasks.join, "last", after=nodes)
        workflow_id = wf.enqueue()
        run(root)
        for node in nodes:
            run(node, JobState.DEAD_LETTER)
        assert state(last) == JobState.CANCELLED
        with CaptureQueriesContext(connection) as statements:
            assert workflows.retry_failed(workflow_id) == n
        assert {state(node) for node in nodes} == {JobState.PENDING}
        assert waits(last.job_id) == (JobState.SCHEDULED, n)
        for node in nodes:
            run(node)
        assert waits(last.job_id) == (JobState.PENDING, 0)
        return len(statements.captured_queries)

    assert retried(40) == retried(4)


def test_a_retried_root_re_arms_forty_cancelled_nodes_in_as_many_statements_as_four():
    """The nodes a failure cancelled wait again together: 5,000 of them took 11 s to re-arm
    one by one on PostgreSQL, for a single press of Retry."""

    def retried(n):
        wf = Workflow(f"fan-{n}")
        root = wf.add(tasks.node, "root")
        nodes = [wf.add(tasks.node, f"n{i}", after=[root]) for i in range(n)]
        last = wf.add(tasks.join, "last", after=nodes)
        wf.enqueue()
        run(root, JobState.DEAD_LETTER)
        assert {state(node) for node in [*nodes, last]} == {JobState.CANCELLED}
        with CaptureQueriesContext(connection) as statements:
            assert actions.retry(root.job_id)
        assert {waits(node.job_id) for node in nodes} == {(JobState.SCHEDULED, 1)}
        assert waits(last.job_id) == (JobState.SCHEDULED, n)
        run(root)
        assert {waits(node.job_id) for node in nodes} == {(JobState.PENDING, 0)}
        return len(statements.captured_queries)

    assert retried(40) == retried(4)


def test_a_node_after_two_failed_nodes_stays_cancelled_until_both_are_retried():
    wf = Workflow("w")
    a = wf.add(tasks.node, "a")
    b = wf.add(tasks.node, "b")
    c = wf.add(tasks.join, "c", after=[a, b])
    d = wf.add(tasks.node, "d", after=[c])
    wf.enqueue()
    run(a, JobState.DEAD_LETTER)
    run(b, JobState.DEAD_LETTER)
    assert actions.retry(a.job_id)
    # b's failure still cancels c: waiting for b would wait for good.
    assert (state(c), state(d)) == (JobState.CANCELLED, JobState.CANCELLED)
    run(a)
    assert actions.retry(b.job_id)
    assert waits(c.job_id) == (JobState.SCHEDULED, 1)
    assert waits(d.job_id) == (JobState.SCHEDULED, 1)
    run(b)
    run(c)
    assert waits(d.job_id) == (JobState.PENDING, 0)


def test_a_node_retried_with_the_failed_node_before_it_waits_for_it():
    wf = Workflow("w")
    top = wf.add(tasks.node, "top")
    anyway = wf.add(tasks.node, "anyway", after=[top], on_upstream_failure="run")
    child = wf.add(tasks.node, "child", after=[anyway])
    wf.enqueue()
    run(top, JobState.DEAD_LETTER)
    run(anyway, JobState.DEAD_LETTER)
    assert state(child) == JobState.CANCELLED
    assert actions.retry_many([anyway.job_id, top.job_id]) == 2
    assert waits(top.job_id) == (JobState.PENDING, 0)
    assert waits(anyway.job_id) == (JobState.SCHEDULED, 1)
    assert waits(child.job_id) == (JobState.SCHEDULED, 1)
    run(top)
    run(anyway)
    assert waits(child.job_id) == (JobState.PENDING, 0)


def deadlocks_so_far():
    with connection.cursor() as cursor:
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def retry_failed_while(batch_id, finish) -> list:
    """Retry failed nodes of `batch_id` (one is put back) while `finish(holding)` stands in
    for a worker's finish on a connection of its own (`holding_meanwhile`); the errors that
    thread met."""
    with holding_meanwhile(finish) as errors:
        assert workflows.retry_failed(batch_id) == 1
    return errors


def finished(job):
    Job.objects.filter(id=job.id).update(
        state=JobState.SUCCEEDED, finished_at=timezone.now(), lease_id=None
    )


@pytest.mark.django_db(transaction=True)
def test_retry_failed_waits_for_a_member_finishing_meanwhile_and_never_deadlocks():
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serialises writers; the race needs concurrent connections")
    batch_id, a, b, callback = batch_of_two()
    run(a, JobState.DEAD_LETTER)
    running = claim(b)

    def finish(holding):
        # A finish holds its job's row, then locks the jobs it releases in id order.
        finished(running)
        holding.set()
        time.sleep(0.5)
        released = Job.objects.filter(id__in=callback.values(), state=JobState.SCHEDULED)
        for job in released.order_by("id").select_for_update():
            Job.objects.filter(id=job.id).update(waiting_for=F("waiting_for") - 1)

    before = deadlocks_so_far()
    errors = retry_failed_while(batch_id, finish)
    assert errors == []  # "deadlock detected" in either transaction is the bug under test
    assert deadlocks_so_far() == before  # not even one ridden out by making the retry again
    # The retry saw the member's finish: the callbacks wait for the retried member alone.
    assert waits(callback["on_finish"]) == (JobState.SCHEDULED, 1)
    assert waits(callback["on_success"]) == (JobState.SCHEDULED, 1)


@pytest.mark.django_db(transaction=True)
def test_retry_failed_chosen_as_a_deadlocks_victim_is_made_again_and_succeeds():
    """A finish locks its batch of outcomes in the order of the table's pages: two running
    members finishing together can lock in the other order than a retry, which locks them in
    id order. PostgreSQL rolls one side back; a retry it rolls back is made again."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serialises writers; the race needs concurrent connections")
    batch = Batch("three", on_success=tasks.batch_callback, on_finish=tasks.batch_callback)
    failed, *finishing_ones = [batch.add(tasks.node, name) for name in ("a", "b", "c")]
    batch_id = batch.enqueue()
    callback = {
        j.node_name.removeprefix("batch."): j.id
        for j in Job.objects.filter(workflow_id=batch_id, node_name__startswith="batch.")
    }
    run(failed, JobState.DEAD_LETTER)
    first, second = sorted((claim(node) for node in finishing_ones), key=lambda j: j.id)

    def finish(holding):
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL deadlock_timeout = '20s'")  # the other side sees it first
        for job in (second, first):  # not in id order, as a page order may be
            finished(job)
            holding.set()
            time.sleep(0.2)
        # Then the callback they settle, as a finish counts it down.
        Job.objects.filter(id=callback["on_finish"]).update(waiting_for=F("waiting_for") - 2)

    before = deadlocks_so_far()
    with connection.cursor() as cursor:
        # Checked once the cycle has formed: the retry waits for the second member from the
        # start, the finish for the first 0.2 s later.
        cursor.execute("SET deadlock_timeout = '600ms'")
    try:
        errors = retry_failed_while(batch_id, finish)
    finally:
        connection.close()
    assert errors == []
    assert deadlocks_so_far() == before + 1  # the cycle happened, and the retry rode it out
    assert state(failed) == JobState.PENDING
    # Made again after the finish: the callbacks wait for the retried member alone.
    assert waits(callback["on_success"]) == (JobState.SCHEDULED, 1)
    assert waits(callback["on_finish"]) == (JobState.SCHEDULED, 1)


def test_a_bulk_retry_of_a_node_and_the_run_anyway_node_after_it_counts_it_once():
    wf = Workflow("w")
    top = wf.add(tasks.node, "top")
    anyway = wf.add(tasks.node, "anyway", after=[top], on_upstream_failure="run")
    wf.enqueue()
    run(top, JobState.DEAD_LETTER)
    run(anyway, JobState.DEAD_LETTER)
    assert actions.retry_many([top.job_id, anyway.job_id]) == 2
    assert waits(top.job_id) == (JobState.PENDING, 0)
    assert waits(anyway.job_id) == (JobState.SCHEDULED, 1)
    run(top)
    assert waits(anyway.job_id) == (JobState.PENDING, 0)


def test_cancelling_a_batch_cancels_its_members_and_on_success_and_still_runs_on_finish():
    batch_id, a, b, callback = batch_of_two()
    assert workflows.cancel(batch_id) == 3
    assert (state(a), state(b), state_of(callback["on_success"])) == (JobState.CANCELLED,) * 3
    assert waits(callback["on_finish"]) == (JobState.PENDING, 0)
    assert counts_given(callback["on_finish"]) == {"cancelled": 2}
    assert CounterDelta.objects.totals()["jobs_cancelled"] == 3


def test_cancelling_a_batch_while_a_member_runs_runs_on_finish_once_it_has_stopped():
    batch_id, a, b, callback = batch_of_two()
    running = claim(a)
    assert workflows.cancel(batch_id) == 3
    assert state_of(callback["on_success"]) == JobState.CANCELLED
    assert waits(callback["on_finish"]) == (JobState.SCHEDULED, 1)
    finish(running)  # it returned, but its cancel was asked for first
    assert state(a) == JobState.CANCELLED
    assert waits(callback["on_finish"]) == (JobState.PENDING, 0)
    assert counts_given(callback["on_finish"]) == {"cancelled": 2}


def test_the_safety_net_settles_a_node_whose_upstream_nodes_all_ended():
    wf, top, left, right, last = diamond()
    wf.enqueue()
    # As if a finish had been lost: the upstream nodes ended without settling `last`.
    Job.objects.filter(id__in=[top.job_id, left.job_id, right.job_id]).update(
        state=JobState.SUCCEEDED, finished_at=timezone.now()
    )
    Job.objects.filter(id__in=[left.job_id, right.job_id]).update(waiting_for=0)
    assert db.settle_orphaned_continuations() == 1
    assert state(last) == JobState.PENDING


def test_pruning_keeps_a_finished_node_until_the_nodes_after_it_succeeded():
    wf, top, left, right, last = diamond()
    wf.enqueue()
    run(top, value="T")
    run(left)
    old = timezone.now() - timedelta(days=30)
    Job.objects.filter(id__in=[top.job_id, left.job_id]).update(finished_at=old)
    # `right` has yet to run and read top's value; `left` is needed by `last`.
    assert prune_jobs(timedelta(days=7)).deleted == 0
    right_job = claim(right)
    assert workflows.upstream_values(right.job_id) == {"node": "T"}
    finish(right_job)
    run(last)
    Job.objects.filter(id__in=[right.job_id, last.job_id]).update(finished_at=old)
    assert prune_jobs(timedelta(days=7)).deleted == 4


def test_pruning_keeps_every_node_of_a_workflow_until_all_of_them_may_go():
    wf = Workflow("w")
    first = wf.add(tasks.node, "first")
    second = wf.add(tasks.node, "second", after=[first])
    other = wf.add(tasks.node, "other")
    wf.enqueue()
    run(first, JobState.DEAD_LETTER)
    assert state(second) == JobState.CANCELLED
    old = timezone.now() - timedelta(days=30)
    Job.objects.filter(id__in=[first.job_id, second.job_id]).update(finished_at=old)
    # `other` has not run: the cancelled node stays, so that a retry of `first` re-arms it.
    assert prune_jobs(timedelta(days=7)).deleted == 0
    assert actions.retry_job(first.job_id, source="python").changed
    assert state(second) == JobState.SCHEDULED
    run(first)
    run(second)
    run(other)
    Job.objects.filter(workflow_id=wf.id).update(finished_at=old)
    assert prune_jobs(timedelta(days=7)).deleted == 3


def test_a_finished_workflow_is_pruned_whole_in_one_pass_as_the_dry_run_counted():
    wf, first, second, third, fourth = chain("first", "second", "third", "fourth")
    wf.enqueue()
    run(first)
    run(second, JobState.DEAD_LETTER)
    Job.objects.filter(workflow_id=wf.id).update(finished_at=timezone.now() - timedelta(days=30))
    every = ("succeeded", "cancelled", "dead_letter")
    assert prune_jobs(timedelta(days=7), states=every, dry_run=True).matched == 4
    passes = []
    result = prune_jobs(
        timedelta(days=7), states=every, batch_size=1, progress=lambda n, of: passes.append(of)
    )
    assert (result.matched, result.deleted) == (4, 4)
    assert passes == [4, 4, 4, 4]


def test_a_finished_node_a_node_after_it_still_needs_is_not_discarded():
    wf, first, second, third = chain("first", "second", "third")
    wf.enqueue()
    run(first, JobState.DEAD_LETTER)
    result = actions.discard_job(first.job_id, source="python")
    assert not result.changed
    assert str(second.job_id) in result.message and "discard it first" in result.message
    assert state(first) == JobState.DEAD_LETTER
    # `second` still waits for `first`: its retry is refused until `first` is retried.
    assert actions.retry_job(second.job_id, source="python").changed is False
    assert AuditEntry.objects.filter(job_id=first.job_id, action="discard").exists()


def test_a_node_is_discarded_only_after_the_nodes_after_it_so_that_none_reruns_without_it():
    wf, first, second = chain("first", "second")
    wf.enqueue()
    run(first, value="F")
    run(second)
    refused = actions.discard_job(first.job_id, source="python")
    assert not refused.changed and "discard it first" in refused.message
    new = actions.rerun(second.job_id)
    assert new is not None and workflows.upstream_values(new.id) == {"node": "F"}
    assert actions.discard_job(second.job_id, source="python").changed
    assert not actions.discard_job(first.job_id, source="python").changed  # the rerun needs it


def test_discarding_a_failed_chain_at_once_takes_it_from_its_end():
    wf, first, second, third = chain("first", "second", "third")
    wf.enqueue()
    run(first, JobState.DEAD_LETTER)
    ids = [first.job_id, second.job_id, third.job_id]
    assert actions.discard_many(ids) == 3
    assert not Job.objects.exists()


def test_a_rerun_of_a_node_reads_its_upstream_nodes_values_as_the_node_did():
    wf, first, second = chain("first", "second")
    wf.enqueue()
    run(first, value="F")
    run(second, JobState.DEAD_LETTER)
    new = actions.rerun(second.job_id)
    assert new is not None and new.state == JobState.PENDING
    assert new.node_name == Job.objects.get(id=second.job_id).node_name
    assert workflows.upstream_values(new.id) == {"node": "F"}
    # Discarding `first` would take the new run's input: it is kept until the run succeeded.
    assert not actions.discard_job(first.job_id, source="python").changed


def test_a_rerun_of_a_node_whose_upstream_failed_is_refused_and_creates_nothing():
    wf, first, second = chain("first", "second")
    wf.enqueue()
    run(first, JobState.DEAD_LETTER)
    assert state(second) == JobState.CANCELLED
    result = actions.rerun_job(second.job_id, source="python")
    assert not result.changed
    assert f"after job {first.job_id}, which is a dead letter" in result.message
    assert Job.objects.count() == 2
    assert AuditEntry.objects.filter(job_id=second.job_id, action="rerun").exists()


def test_a_continuations_parent_is_kept_until_the_continuation_succeeded():
    parent = tasks.record.enqueue("p")
    child = tasks.record.using(after=parent).enqueue("c")
    run(parent.id, value="p")
    assert not actions.discard_job(parent.id, source="python").changed
    run(child.id)
    assert actions.discard_job(parent.id, source="python").changed


EAGER = {
    "default": {"BACKEND": "jobs.backend.JobsBackend", "QUEUES": [], "OPTIONS": {"EAGER": True}}
}


@override_settings(TASKS=EAGER)
def test_eager_mode_runs_the_whole_graph_and_the_batch_callbacks_inline():
    wf, top, left, right, last = diamond()
    workflow_id = wf.enqueue()
    assert set(Job.objects.filter(workflow_id=workflow_id).values_list("state", flat=True)) == {
        JobState.SUCCEEDED
    }
    assert Job.objects.get(id=last.job_id).return_value == {"node-2": None, "node-3": None}
    batch = Batch("b", on_finish=tasks.batch_callback)
    batch.add(tasks.node, "x", 1)
    batch_id = batch.enqueue()
    done = Job.objects.get(workflow_id=batch_id, node_name="batch.on_finish")
    assert done.return_value == {"batch_id": batch_id, "counts": {"succeeded": 1}}


def test_pruning_a_failed_chain_of_continuations_never_counts_past_its_total():
    parent = tasks.record.enqueue("p")
    child = tasks.record.using(after=parent).enqueue("c")
    tasks.record.using(after=child).enqueue("g")
    run(parent.id, JobState.DEAD_LETTER)
    assert Job.objects.filter(state=JobState.CANCELLED).count() == 2
    Job.objects.update(finished_at=timezone.now() - timedelta(days=10))
    calls = []
    result = prune_jobs(
        timedelta(days=7),
        states=[JobState.CANCELLED, JobState.DEAD_LETTER],
        batch_size=1,
        progress=lambda *a: calls.append(a),
    )
    assert Job.objects.count() == 0
    assert all(done <= total for done, total in calls), calls
    assert calls[-1] == (3, 3) and (result.deleted, result.matched) == (3, 3)
