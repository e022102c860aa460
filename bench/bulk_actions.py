"""Bulk actions by filter over many jobs: retry and discard of dead letters, cancel of waiting
jobs, each as one `jobs.bulk.apply` call (what the console's and the API's bulk actions run).

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
        "--actions", default="retry,discard,cancel", help="comma-separated, in this order"
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
        state, expect = cases[action]
        seconds = timed(action, n, state, expect)
        log(f"{args.db}: bulk {action} of {n:,} jobs: {seconds:.2f} s ({n / seconds:,.0f} jobs/s)")


if __name__ == "__main__":
    main()
