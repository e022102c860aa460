"""A before/after of two checkouts whose schemas differ: each run in a fresh database of its own,
migrated by its own checkout.

    git worktree add --detach /tmp/before <commit>
    .venv/bin/python bench/checkout_ab.py /tmp/before .                 # PostgreSQL, 3 rounds
    .venv/bin/python bench/checkout_ab.py --db sqlite --rounds 4 /tmp/before .

`bench/drain_ab.py` shares one database between the two, so it cannot compare a change of
tables or indexes. Here each round runs both checkouts, in alternating order, each in a child
process that imports only its own checkout's code: a fresh database that first holds `--base`
finished jobs (a table that has been in use), then one-at-a-time enqueues and `enqueue_many`
timed, then the burst drain of `bench/baseline.py` (checked exactly-once; with `--retry`, every
job failing once). Not part of the test suite.
"""

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(checkout: Path, db, base, count, concurrency, retry):
    """In this process, with `checkout`'s code only: prints one RESULT line."""
    sys.path.insert(0, str(checkout))
    fresh_database_run(db, base, count, concurrency, retry, root=checkout)


def fresh_database_run(db, base, count, concurrency, retry, *, root=ROOT, before=None, made=None):
    """In this process, a fresh database: `base` finished jobs, then one-at-a-time enqueues and
    `enqueue_many` timed, then the burst drain (from the checkout at `root`, by default this
    one); prints one line `RESULT single bulk drain`. `before()` runs before any job is
    made, `made(Job)` once the finished jobs are there (bench/job_ids.py's checks)."""
    from bench.baseline import jobsite_drain, jobsite_retry_drain
    from bench.throughput import scratch_database, setup_django, vacuum

    url = scratch_database(db)
    setup_django(url)
    from django.db import connection

    from jobs.models import Job
    from jobsite.tasks import noop

    if before:
        before()
    for start in range(0, base, 10_000):
        noop.enqueue_many([((), {})] * min(10_000, base - start))
    with connection.cursor() as cursor:
        # Finished long ago (cancelled: the drain's checks count succeeded jobs and attempts).
        cursor.execute(
            "UPDATE jobs_job SET state = 'cancelled', finished_at = enqueued_at, queue_name = 'old'"
        )
    if made:
        made(Job)
    new = Job.objects.exclude(queue_name="old")
    vacuum()
    n = min(count, 3_000)
    start = time.perf_counter()
    for _ in range(n):
        noop.enqueue()
    single = n / (time.perf_counter() - start)
    new.delete()
    start = time.perf_counter()
    noop.enqueue_many([((), {})] * n)
    bulk = n / (time.perf_counter() - start)
    new.delete()
    vacuum()
    if retry:
        rate = jobsite_retry_drain(url, count, concurrency, root=root)
    else:
        rate, _ = jobsite_drain(url, count, concurrency, root=root)
    print(f"RESULT {single:.0f} {bulk:.0f} {rate:.0f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="*", type=Path, help="before and after")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--base", type=int, default=100_000, help="finished jobs already there")
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per checkout")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--retry", action="store_true", help="every job failing once")
    parser.add_argument("--checkout", type=Path, help=argparse.SUPPRESS)  # one child run
    args = parser.parse_args()
    if args.checkout:
        one_run(args.checkout, args.db, args.base, args.jobs, args.concurrency, args.retry)
        return
    if len(args.checkouts) != 2:
        parser.error("name two checkouts: before and after")
    sys.path.insert(0, str(ROOT))
    from bench.throughput import alternated_runs, print_rounds_table

    args_ = ["--db", args.db, "--base", str(args.base), "--jobs", str(args.jobs)]
    args_ += ["--concurrency", str(args.concurrency)] + (["--retry"] if args.retry else [])
    sides = [str(checkout.resolve()) for checkout in args.checkouts]
    results = alternated_runs(__file__, "--checkout", sides, args.rounds, args_)
    print(f"\n{args.db}, {args.base:,} finished jobs, {args.jobs:,} drained, c{args.concurrency}")
    print_rounds_table("checkout", "retry-heavy drain" if args.retry else "drain", results)


if __name__ == "__main__":
    main()
