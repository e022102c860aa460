"""Workflows and batches run by real workers (jobs.workflows, jobs.db's release of waiting jobs).

Run on SQLite, and on PostgreSQL with DATABASE_URL set.
"""

import pytest

from jobs import actions, workflows
from jobs.models import Job
from jobs.states import JobState
from jobs.workflows import Batch, Workflow
from tests import tasks

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def burst(run_worker, *args):
    proc = run_worker("--concurrency", "4", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def burst_together(start_worker, workers=3):
    procs = [start_worker("--burst", "--concurrency", "4") for _ in range(workers)]
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out


def runs(ledger):
    """key -> the times it ran."""
    seen = {}
    for key, _, at in ledger():
        seen.setdefault(key, []).append(at)
    return seen


def job(node):
    return Job.objects.get(id=node.job_id)


def test_a_diamond_runs_in_order_and_its_last_node_reads_both_upstream_values(run_worker, ledger):
    wf = Workflow("diamond")
    top = wf.add(tasks.node, "top", 1, name="top")
    left = wf.add(tasks.node, "left", "L", after=[top], name="left")
    right = wf.add(tasks.node, "right", "R", after=[top], name="right")
    last = wf.add(tasks.join, "last", after=[left, right])
    workflow_id = wf.enqueue()
    assert job(last).state == JobState.SCHEDULED
    burst(run_worker)
    seen = runs(ledger)
    assert {k: len(v) for k, v in seen.items()} == {"top": 1, "left": 1, "right": 1, "last": 1}
    assert seen["top"][0] <= min(seen["left"][0], seen["right"][0])
    assert max(seen["left"][0], seen["right"][0]) <= seen["last"][0]
    assert job(last).return_value == {"left": "L", "right": "R"}
    assert Job.objects.filter(workflow_id=workflow_id).count() == 4
    assert set(Job.objects.filter(workflow_id=workflow_id).values_list("state", flat=True)) == {
        JobState.SUCCEEDED
    }


def test_a_150_way_fan_in_runs_its_last_node_once_after_every_leaf_with_3_workers(
    start_worker, ledger
):
    wf = Workflow("fan-in")
    leaves = [wf.add(tasks.node, f"leaf-{i}", i) for i in range(150)]
    last = wf.add(tasks.node, "last", after=leaves)
    wf.enqueue()
    burst_together(start_worker, workers=3)
    seen = runs(ledger)
    assert len(seen["last"]) == 1
    assert all(len(seen[f"leaf-{i}"]) == 1 for i in range(150))
    assert max(seen[f"leaf-{i}"][0] for i in range(150)) <= seen["last"][0]
    assert job(last).state == JobState.SUCCEEDED and job(last).waiting_for == 0


def test_a_dead_lettered_node_cancels_what_follows_and_retrying_it_re_arms_them(run_worker, ledger):
    wf = Workflow("broken")
    first = wf.add(tasks.node, "first")
    # Fails its first attempt: with one attempt allowed, it dead-letters; a retry succeeds.
    shaky = wf.add(tasks.flaky.using(max_attempts=1), "shaky", after=[first])
    child = wf.add(tasks.node, "child", after=[shaky])
    grandchild = wf.add(tasks.node, "grandchild", after=[child])
    anyway = wf.add(tasks.node, "anyway", after=[shaky], on_upstream_failure="run")
    burst_id = wf.enqueue()
    burst(run_worker)
    assert job(shaky).state == JobState.DEAD_LETTER
    assert [job(n).state for n in (child, grandchild)] == [JobState.CANCELLED] * 2
    assert job(anyway).state == JobState.SUCCEEDED
    assert actions.retry(shaky.job_id)
    assert [job(n).state for n in (child, grandchild)] == [JobState.SCHEDULED] * 2
    burst(run_worker)
    states = Job.objects.filter(workflow_id=burst_id).values_list("state", flat=True)
    assert set(states) == {JobState.SUCCEEDED}
    assert {k: len(v) for k, v in runs(ledger).items()} == {
        "first": 1,
        "shaky": 2,
        "child": 1,
        "grandchild": 1,
        "anyway": 1,
    }


def callback_runs(ledger, batch_id):
    return len(runs(ledger).get(f"callback-{batch_id}", []))


def callbacks(batch_id):
    return {
        j.node_name: j
        for j in Job.objects.filter(workflow_id=batch_id, node_name__startswith="batch.")
    }


def test_a_60_job_batch_runs_on_success_and_on_finish_once_each_with_the_counts(
    start_worker, ledger
):
    batch = Batch("sixty", on_success=tasks.batch_callback, on_finish=tasks.batch_callback)
    for i in range(60):
        batch.add(tasks.node, f"member-{i}", i)
    batch_id = batch.enqueue()
    burst_together(start_worker, workers=3)
    assert callback_runs(ledger, batch_id) == 2
    done = callbacks(batch_id)
    for name in ("batch.on_success", "batch.on_finish"):
        assert done[name].state == JobState.SUCCEEDED
        assert done[name].return_value == {
            "batch_id": batch_id,
            "counts": {JobState.SUCCEEDED: 60},
        }


def assert_only_on_finish_ran(ledger, batch_id, counts):
    """The batch's on_success was cancelled, and its on_finish ran once with `counts`."""
    assert callback_runs(ledger, batch_id) == 1
    done = callbacks(batch_id)
    assert done["batch.on_success"].state == JobState.CANCELLED
    assert done["batch.on_finish"].return_value == {"batch_id": batch_id, "counts": counts}


def test_a_batch_with_a_dead_letter_runs_only_on_finish(run_worker, ledger):
    batch = Batch("one-fails", on_success=tasks.batch_callback, on_finish=tasks.batch_callback)
    for i in range(5):
        batch.add(tasks.node, f"member-{i}", i)
    batch.add(tasks.always_fails.using(max_attempts=1), "doomed")
    batch_id = batch.enqueue()
    burst(run_worker)
    assert_only_on_finish_ran(ledger, batch_id, {JobState.SUCCEEDED: 5, JobState.DEAD_LETTER: 1})


def test_a_continuation_still_waits_for_its_parent(run_worker, ledger):
    parent = tasks.node.enqueue("parent", 7)
    child = tasks.join.using(after=parent.id).enqueue("child")
    burst(run_worker)
    assert [k for k, _, _ in sorted(ledger(), key=lambda r: r[2])] == ["parent", "child"]
    assert Job.objects.get(id=child.id).return_value == {"node": 7}


def test_a_cancelled_batch_still_runs_on_finish_once_with_the_counts(run_worker, ledger):
    batch = Batch("called-off", on_success=tasks.batch_callback, on_finish=tasks.batch_callback)
    for i in range(3):
        batch.add(tasks.node, f"member-{i}", i)
    batch_id = batch.enqueue()
    workflows.cancel(batch_id)
    burst(run_worker)
    assert_only_on_finish_ran(ledger, batch_id, {JobState.CANCELLED: 3})


def test_a_cancelled_batch_retried_callbacks_first_runs_them_once_after_its_jobs(
    run_worker, ledger
):
    batch = Batch("back-on", on_success=tasks.batch_callback, on_finish=tasks.batch_callback)
    members = [batch.add(tasks.node, f"member-{i}", i) for i in range(2)]
    batch_id = batch.enqueue()
    workflows.cancel(batch_id)
    # As an operator clicking Retry on each, callbacks first.
    for job_id in [j.id for j in callbacks(batch_id).values()] + [m.job_id for m in members]:
        actions.retry(job_id)
    burst(run_worker)
    seen = runs(ledger)
    assert len(seen[f"callback-{batch_id}"]) == 2
    assert max(seen["member-0"] + seen["member-1"]) <= min(seen[f"callback-{batch_id}"])
    for callback in callbacks(batch_id).values():
        assert callback.return_value == {"batch_id": batch_id, "counts": {JobState.SUCCEEDED: 2}}


def test_an_async_node_awaits_its_upstream_values(run_worker, ledger):
    wf = Workflow("async")
    left = wf.add(tasks.node, "left", "L", name="left")
    right = wf.add(tasks.node, "right", {"n": 2}, name="right")
    last = wf.add(tasks.async_join, "last", after=[left, right])
    wf.enqueue()
    burst(run_worker)
    assert job(last).state == JobState.SUCCEEDED, job(last).error_message
    assert job(last).return_value["upstream"] == {"left": "L", "right": {"n": 2}}
    # The sync property cannot query from the event loop: it says what to await instead.
    assert "await context.aupstream()" in job(last).return_value["sync_read"]
