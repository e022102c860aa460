"""Workflows and batches: enqueue cost (time, rows written), and the drain of workflow jobs
against plain jobs in the same run.

    .venv/bin/python bench/workflows.py                      # SQLite and PostgreSQL
    .venv/bin/python bench/workflows.py --db postgres --batch 10000 --graph 1000 --drain 5000

Each database gets a fresh scratch database (bench/throughput.py's). Measured:
  1. a Batch of --batch no-op jobs with on_success and on_finish (one transaction);
  2. a Workflow of --graph nodes in layers of 100, each node after 2 nodes of the layer above;
  3. drains of --drain jobs, plain (enqueue_many) and as one Batch with both callbacks, one
     burst worker each, alternating for --rounds rounds; and that each batch's callbacks ran
     exactly once with the right counts.
Not part of the test suite: numbers go to bench/README.md.
"""

import argparse
import random
import statistics
import subprocess
import sys
import time

from throughput import ROOT, log, reset, scratch_database, setup_django, worker_env

TABLES = ("jobs_job", "jobs_dependency", "jobs_workflow", "jobs_counterdelta")


def row_counts():
    from django.db import connection

    with connection.cursor() as cursor:
        counts = {}
        for table in TABLES:
            cursor.execute(f"SELECT count(*) FROM {table}")
            counts[table] = cursor.fetchone()[0]
    return counts


def written(before, after):
    return {t.removeprefix("jobs_"): after[t] - before[t] for t in TABLES if after[t] != before[t]}


def clear():
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_dependency")
        cursor.execute("DELETE FROM jobs_workflow")
    reset()


def batch_of(n):
    from jobs.workflows import Batch
    from jobsite.tasks import batch_report, noop

    batch = Batch(f"bench-{n}", on_success=batch_report, on_finish=batch_report)
    for _ in range(n):
        batch.add(noop)
    return batch


def graph_of(n, width=100, fan_in=2, seed=7):
    from jobs.workflows import Workflow
    from jobsite.tasks import noop

    rng = random.Random(seed)
    wf = Workflow(f"bench-graph-{n}")
    layer = [wf.add(noop)]
    while len(wf.nodes) < n:
        size = min(width, n - len(wf.nodes))
        above = layer
        layer = [
            wf.add(noop, after=rng.sample(above, min(fan_in, len(above)))) for _ in range(size)
        ]
    return wf


def timed_enqueue(build):
    workflow = build()
    before = row_counts()
    start = time.perf_counter()
    workflow.enqueue()
    seconds = time.perf_counter() - start
    return seconds, written(before, row_counts())


def drain(url):
    """One burst worker over every due job; jobs/s from the first claim to the last finish."""
    from jobs.models import Job

    proc = subprocess.Popen(
        [sys.executable, "manage.py", "worker", "--burst", "--concurrency", "2"],
        cwd=ROOT,
        env=worker_env(url),
    )
    if proc.wait(timeout=1800) != 0:
        raise SystemExit(f"worker exited with {proc.returncode}")
    done = Job.objects.filter(state="succeeded").order_by()
    first = done.order_by("started_at").values_list("started_at", flat=True).first()
    last = done.order_by("-finished_at").values_list("finished_at", flat=True).first()
    return done.count() / (last - first).total_seconds()


def check_batch(n):
    """Every job succeeded once; each callback ran once, given the batch's counts."""
    from django.db.models import Count

    from jobs.models import Attempt, Job

    jobs = Job.objects.all()
    if jobs.exclude(state="succeeded").exists() or jobs.count() != n + 2:
        raise SystemExit("correctness check failed: not every job of the batch succeeded")
    if Attempt.objects.values("job_id").annotate(k=Count("id")).filter(k__gt=1).exists():
        raise SystemExit("correctness check failed: a job ran more than once")
    for name in ("batch.on_success", "batch.on_finish"):
        callback = Job.objects.get(node_name=name)
        if callback.attempts.count() != 1 or callback.kwargs["counts"] != {"succeeded": n}:
            raise SystemExit(f"correctness check failed: {name} {callback.kwargs}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--graph", type=int, default=1_000)
    parser.add_argument("--drain", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.db == "both":
        for kind in ("sqlite", "postgres"):
            given = [f"--{k}={v}" for k, v in vars(args).items() if k != "db"]
            subprocess.run([sys.executable, __file__, "--db", kind, *given], check=True)
        return
    url = scratch_database(args.db)
    setup_django(url)
    log(f"== {args.db}")
    seconds, rows = timed_enqueue(lambda: batch_of(args.batch))
    log(f"[1/3] batch of {args.batch:,} jobs enqueued in {seconds:.2f} s; rows written {rows}")
    clear()
    seconds, rows = timed_enqueue(lambda: graph_of(args.graph))
    log(f"[2/3] graph of {args.graph:,} nodes enqueued in {seconds:.2f} s; rows written {rows}")
    clear()
    from jobsite.tasks import noop

    plain, batched = [], []
    for round_ in range(args.rounds):
        noop.enqueue_many([((), {})] * args.drain)
        plain.append(drain(url))
        clear()
        batch_of(args.drain).enqueue()
        batched.append(drain(url))
        check_batch(args.drain)
        clear()
        log(f"      round {round_ + 1}: plain {plain[-1]:,.0f} jobs/s, batch {batched[-1]:,.0f}/s")
    p, b = statistics.median(plain), statistics.median(batched)
    log(
        f"[3/3] drain of {args.drain:,}: plain {p:,.0f} jobs/s, batch with callbacks "
        f"{b:,.0f} jobs/s ({(p - b) / p:+.1%} slower); callbacks ran once each, counts right"
    )


if __name__ == "__main__":
    main()
