"""Bulk actions by filter over many jobs: retry and discard of dead letters, cancel of waiting
jobs, each as one `jobs.bulk.apply` call (what the console's and the API's bulk actions run),
and Retry failed nodes (`jobs.workflows.retry_failed`) of a batch whose jobs all failed and of
a workflow fanning out from one root to n nodes that all failed, joined again by one last node;
and a single Retry of such a workflow's root, whose failure cancelled everything after it.

    .venv/bin/python bench/bulk_actions.py                       # SQLite and PostgreSQL
    .venv/bin/python bench/bulk_actions.py --db postgres --jobs 20000

Each database gets a fresh scratch database (bench/throughput.py's). Dead letters carry three
failed attempts with a traceback each, as real ones do. Every run checks that each job ended in
the state its action promises. Not part of the test suite: numbers go to bench/README.md.
"""

import argparse
import subprocess
import sys
import time

from throughput import log, reset, scratch_database, setup_django

TASK = "jobsite.tasks.noop"
TRACEBACK = "Traceback (most recent call last):\n" + '  File "app.py", line 1\n' * 20


def make_jobs(n, state):
    from django.utils import timezone

    from jobs.models import Attempt, Job
    from jobs.states import AttemptOutcome, JobState
    from jobsite.tasks import noop

    noop.enqueue_many([((), {})] * n)
    jobs = Job.objects.filter(task_path=TASK)
    if state == JobState.DEAD_LETTER:
        now = timezone.now()
        jobs.update(
            state=state,
            attempt=3,
            max_attempts=3,
            finished_at=now,
            error_type="ValueError",
            error_message="no such account",
            error_traceback=TRACEBACK,
            dead_letter_reason="exhausted",
        )
        rows = [
            Attempt(
                job_id=job_id,
                number=number,
                started_at=now,
                finished_at=now,
                outcome=AttemptOutcome.FAILED,
                error_type="ValueError",
                error_message="no such account",
                error_traceback=TRACEBACK,
            )
            for job_id in jobs.values_list("id", flat=True)
            for number in (1, 2, 3)
        ]
        Attempt.objects.bulk_create(rows, batch_size=2000)
    return jobs


def make_failed_batch(n):
    """A batch of n jobs that all ended dead letters: its on_success cancelled by their failure,
    its on_finish run. Returns the batch's id."""
    from django.utils import timezone

    from jobs.db.sql import BATCH_CALLBACKS, UPSTREAM_FAILED
    from jobs.models import Job
    from jobs.states import JobState
    from jobs.workflows import Batch
    from jobsite.tasks import batch_report, noop

    batch = Batch("bench", on_success=batch_report, on_finish=batch_report)
    for _ in range(n):
        batch.add(noop)
    batch_id = batch.enqueue()
    nodes = Job.objects.filter(workflow_id=batch_id)
    on_success, on_finish = BATCH_CALLBACKS
    now = timezone.now()
    nodes.filter(node_name=on_success).update(
        state=JobState.CANCELLED, finished_at=now, error_type=UPSTREAM_FAILED, waiting_for=0
    )
    nodes.filter(node_name=on_finish).update(
        state=JobState.SUCCEEDED, finished_at=now, attempt=1, waiting_for=0
    )
    nodes.exclude(node_name__in=BATCH_CALLBACKS).update(
        state=JobState.DEAD_LETTER, attempt=3, max_attempts=3, finished_at=now,
        error_type="ValueError", error_message="no such account",
    )  # fmt: skip
    return batch_id


def timed_retry_failed(n):
    """`jobs.workflows.retry_failed` (the workflow page's Retry failed nodes) over a batch of n
    dead letters; checks that they are back in line and on_success waits for them again."""
    from jobs.db.sql import BATCH_CALLBACKS
    from jobs.models import Job
    from jobs.states import JobState
    from jobs.workflows import retry_failed

    reset()
    batch_id = make_failed_batch(n)
    start = time.perf_counter()
    retried = retry_failed(batch_id)
    seconds = time.perf_counter() - start
    nodes = Job.objects.filter(workflow_id=batch_id)
    on_success = nodes.get(node_name=BATCH_CALLBACKS[0])
    members = nodes.exclude(node_name__in=BATCH_CALLBACKS)
    back = members.filter(state=JobState.PENDING).count()
    if (retried, back, on_success.state, on_success.waiting_for) != (
        n, n, JobState.SCHEDULED, n
    ):  # fmt: skip
        raise SystemExit(f"retry_failed: {retried} retried, {back} back, on_success {on_success}")
    forget_graphs()
    return seconds


def make_fan_out(n, *, root_failed):
    """A workflow root -> n nodes -> last, ended as a failure leaves it: with `root_failed`,
    the root a dead letter and everything after it cancelled by its failure; else the n nodes
    dead letters and last cancelled by theirs. Returns (workflow id, root, nodes, last)."""
    from django.utils import timezone

    from jobs.db.sql import UPSTREAM_FAILED
    from jobs.models import Job
    from jobs.states import JobState
    from jobs.workflows import Workflow
    from jobsite.tasks import noop

    reset()
    wf = Workflow("bench")
    root = wf.add(noop, name="root")
    nodes = [wf.add(noop, name=f"node {i}", after=[root]) for i in range(n)]
    last = wf.add(noop, name="last", after=nodes)
    workflow_id = wf.enqueue()
    now = timezone.now()
    dead = {
        "state": JobState.DEAD_LETTER,
        "attempt": 3,
        "max_attempts": 3,
        "finished_at": now,
        "waiting_for": 0,
        "error_type": "ValueError",
        "error_message": "no such account",
    }
    cancelled = {
        "state": JobState.CANCELLED,
        "finished_at": now,
        "waiting_for": 0,
        "error_type": UPSTREAM_FAILED,
    }
    node_ids = [node.job_id for node in nodes]
    if root_failed:
        Job.objects.filter(id=root.job_id).update(**dead)
        Job.objects.filter(id__in=[*node_ids, last.job_id]).update(**cancelled)
    else:
        Job.objects.filter(id=root.job_id).update(
            state=JobState.SUCCEEDED, finished_at=now, attempt=1, waiting_for=0
        )
        Job.objects.filter(id__in=node_ids).update(**dead)
        Job.objects.filter(id=last.job_id).update(**cancelled)
    return workflow_id, root, nodes, last


def forget_graphs():
    from django.db import connection

    with connection.cursor() as cursor:  # reset() leaves the graph's tables alone
        cursor.execute("DELETE FROM jobs_dependency")
        cursor.execute("DELETE FROM jobs_workflow")


def timed_retry_failed_fan_out(n):
    """`jobs.workflows.retry_failed` over a fan-out whose n nodes all failed; checks that they
    are back in line and that last waits for all of them again."""
    from jobs.models import Job
    from jobs.states import JobState
    from jobs.workflows import retry_failed

    workflow_id, _, nodes, last = make_fan_out(n, root_failed=False)
    start = time.perf_counter()
    retried = retry_failed(workflow_id)
    seconds = time.perf_counter() - start
    back = Job.objects.filter(id__in=[node.job_id for node in nodes], state=JobState.PENDING)
    after = Job.objects.get(id=last.job_id)
    if (retried, back.count(), after.state, after.waiting_for) != (
        n, n, JobState.SCHEDULED, n
    ):  # fmt: skip
        raise SystemExit(f"retry_failed: {retried} retried, {back.count()} back, last {after}")
    forget_graphs()
    return seconds


def timed_retry_root(n):
    """A single Retry (`jobs.actions.retry`) of a fan-out's failed root, whose failure
    cancelled the n nodes and last; checks that all of them wait again."""
    from jobs.actions import retry
    from jobs.models import Job
    from jobs.states import JobState

    _, root, nodes, last = make_fan_out(n, root_failed=True)
    start = time.perf_counter()
    retried = retry(root.job_id)
    seconds = time.perf_counter() - start
    waiting = Job.objects.filter(
        id__in=[node.job_id for node in nodes], state=JobState.SCHEDULED, waiting_for=1
    )
    after = Job.objects.get(id=last.job_id)
    if (retried, waiting.count(), after.state, after.waiting_for) != (
        True, n, JobState.SCHEDULED, n
    ):  # fmt: skip
        raise SystemExit(f"retry: {retried}, {waiting.count()} waiting again, last {after}")
    forget_graphs()
    return seconds


def timed(action, n, state, expect):
    from jobs import bulk
    from jobs.models import Job

    reset()
    make_jobs(n, state)
    start = time.perf_counter()
    result = bulk.apply(action, Job.objects.filter(task_path=TASK))
    seconds = time.perf_counter() - start
    left = Job.objects.filter(task_path=TASK)
    if (result.matched, result.applied) != (n, n) or not expect(left):
        raise SystemExit(f"bulk {action}: {result} and the jobs left do not match the promise")
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument(
        "--actions",
        default="retry,discard,cancel,retry_failed,retry_failed_fan_out,retry_root",
        help="comma-separated, in this order",
    )
    args = parser.parse_args()
    if args.db == "both":
        for kind in ("sqlite", "postgres"):
            given = [f"--jobs={args.jobs}", f"--actions={args.actions}"]
            subprocess.run([sys.executable, __file__, "--db", kind, *given], check=True)
        return
    setup_django(scratch_database(args.db))
    from jobs.states import JobState

    def all_back_in_line(jobs):
        return {(j.state, j.attempt) for j in jobs.only("state", "attempt")} == {
            (JobState.PENDING, 3)
        }

    def all_gone(jobs):
        return not jobs.exists()

    def all_cancelled(jobs):
        return set(jobs.values_list("state", flat=True)) == {JobState.CANCELLED}

    cases = {
        "retry": (JobState.DEAD_LETTER, all_back_in_line),
        "discard": (JobState.DEAD_LETTER, all_gone),
        "cancel": (JobState.PENDING, all_cancelled),
    }
    n = args.jobs
    for action in args.actions.split(","):
        if action == "retry_failed":
            seconds = timed_retry_failed(n)
            log(f"{args.db}: retry_failed of a batch of {n:,}: {seconds:.2f} s")
            continue
        if action == "retry_failed_fan_out":
            seconds = timed_retry_failed_fan_out(n)
            log(f"{args.db}: retry_failed of a fan-out of {n:,} nodes: {seconds:.2f} s")
            continue
        if action == "retry_root":
            seconds = timed_retry_root(n)
            log(f"{args.db}: retry of a failed root before {n:,} nodes: {seconds:.2f} s")
            continue
        state, expect = cases[action]
        seconds = timed(action, n, state, expect)
        log(f"{args.db}: bulk {action} of {n:,} jobs: {seconds:.2f} s ({n / seconds:,.0f} jobs/s)")


if __name__ == "__main__":
    main()
