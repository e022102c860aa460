"""Throughput of the engine on its own: enqueue/s, drain/s and wake-up latency.

    .venv/bin/python bench/throughput.py                 # SQLite and PostgreSQL, 10,000 jobs
    .venv/bin/python bench/throughput.py --db postgres --jobs 20000 --concurrency 2
    .venv/bin/python bench/throughput.py --db postgres --arg-bytes 1000   # jobs with arguments

Each database gets a fresh scratch database (PostgreSQL: jobsite_bench on 127.0.0.1, SQLite: a
temporary file). Every run checks that each job ran exactly once and none is left running.
Not part of the test suite: numbers go to bench/README.md.
"""

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN = "postgres://postgres@127.0.0.1:5432/postgres"
# Prepended to the scratch database's name, so runs sharing one server keep apart.
BENCH_DB_PREFIX = os.environ.get("BENCH_DB_PREFIX", "")


def log(text):
    print(text, flush=True)


def rounds_cell(values) -> str:
    """A table cell of alternated rounds: each round's figure, then their median."""
    return " / ".join(f"{v:,.0f}" for v in values) + f" (median {statistics.median(values):,.0f})"


def alternated_runs(script, option, sides, rounds, args) -> dict:
    """Child runs of `script` (`option side` plus `args`), one per side in each round, the sides
    in alternating order so neither always runs on a warmer machine. Each child prints one line
    `RESULT single bulk drain`; returns {side: [(single, bulk, drain) of each round]}."""
    results: dict = {side: [] for side in sides}
    for round_ in range(rounds):
        for side in sides if round_ % 2 == 0 else sides[::-1]:
            run = subprocess.run(
                [sys.executable, str(script), option, side, *args],
                cwd=ROOT, capture_output=True, text=True,
            )  # fmt: skip
            if run.returncode != 0:
                raise SystemExit(f"the {side!r} run failed:\n{run.stdout}{run.stderr}")
            line = next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))
            single, bulk, rate = (float(v) for v in line.split()[1:])
            log(
                f"round {round_ + 1} {side}: {single:,.0f} single/s, {bulk:,.0f} bulk/s, "
                f"drain {rate:,.0f} jobs/s"
            )
            results[side].append((single, bulk, rate))
    return results


def print_rounds_table(what, drain, results):
    """The Markdown table of `alternated_runs`' results, one row per side."""
    print(f"| {what} | single enqueue/s | `enqueue_many`/s | {drain} jobs/s |")
    print("|---|---:|---:|---:|")
    for side, rounds in results.items():
        cells = [rounds_cell(column) for column in zip(*rounds, strict=True)]
        print(f"| {side} | " + " | ".join(cells) + " |")


def scratch_database(kind):
    if kind == "sqlite":
        path = Path(tempfile.mkdtemp(prefix="jobsite-bench-")) / "bench.sqlite3"
        return f"sqlite:///{path}"
    import psycopg

    name = BENCH_DB_PREFIX + "jobsite_bench"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgres://postgres@127.0.0.1:5432/{name}"


def setup_django(url):
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
    # The settings refuse to load without a key; the workers started here inherit this one.
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def reset():
    from django.db import connection

    with connection.cursor() as cursor:
        for table in (
            "jobs_attempt",
            "jobs_auditentry",
            "jobs_job",
            "jobs_counterdelta",
            "jobs_workernode",
        ):
            cursor.execute(f"DELETE FROM {table}")


def vacuum():
    """Clear the dead rows `reset` left, so no round walks past the last one's (PostgreSQL)."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("VACUUM jobs_job, jobs_attempt, jobs_searchtext, jobs_jobcountdelta")
        else:
            # Each round starts with an empty write-ahead log: no round pays for the last one's.
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def worker_env(url):
    # No demo schedules firing during a measurement.
    return {
        **os.environ,
        "DATABASE_URL": url,
        "JOBSITE_LOG_LEVEL": "WARNING",
        "JOBSITE_SCHEDULES": "{}",
    }


def drain(url, n, concurrency, workers=1):
    """Run burst workers over n pending jobs; returns jobs/s measured from the first claim."""
    from jobs.models import Job

    procs = [
        subprocess.Popen(
            [sys.executable, "manage.py", "worker", "--burst", "--concurrency", str(concurrency)],
            cwd=ROOT,
            env=worker_env(url),
        )
        for _ in range(workers)
    ]
    for proc in procs:
        if proc.wait(timeout=1800) != 0:
            raise SystemExit(f"worker exited with {proc.returncode}")
    stats = Job.objects.filter(state="succeeded").order_by()
    first = stats.order_by("started_at").values_list("started_at", flat=True).first()
    last = stats.order_by("-finished_at").values_list("finished_at", flat=True).first()
    check_exactly_once(n)
    return n / (last - first).total_seconds()


def check_exactly_once(n):
    from django.db.models import Count

    from jobs.models import Attempt, Job

    succeeded = Job.objects.filter(state="succeeded").count()
    running = Job.objects.filter(state="running").count()
    repeated = Attempt.objects.values("job_id").annotate(n=Count("id")).filter(n__gt=1).count()
    if succeeded != n or running or repeated:
        raise SystemExit(
            f"correctness check failed: {succeeded}/{n} succeeded, {running} running, "
            f"{repeated} jobs with more than one attempt"
        )


def enqueue_noops(n):
    """Enqueue n no-op jobs, 10,000 to an `enqueue_many`."""
    from jobsite.tasks import noop

    for start in range(0, n, 10_000):
        noop.enqueue_many([((), {})] * min(10_000, n - start))


def bench_enqueue(n, arg_bytes=0):
    """Enqueue rates of no-op jobs; with `arg_bytes`, of jobs given a string argument of that
    size (which they return: `add(text, "")`)."""
    from jobsite.tasks import add, noop

    task, args = (add, ("x" * arg_bytes, "")) if arg_bytes else (noop, ())
    start = time.perf_counter()
    for _ in range(n):
        task.enqueue(*args)
    single = n / (time.perf_counter() - start)
    reset()
    start = time.perf_counter()
    task.enqueue_many([(args, {})] * n)
    bulk = n / (time.perf_counter() - start)
    return single, bulk


def bench_latency(url, n):
    """Jobs enqueued one after another into an idle worker: enqueue-to-start, in ms."""
    from jobs.models import Job
    from jobsite.tasks import noop

    proc = subprocess.Popen(
        [sys.executable, "manage.py", "worker", "--concurrency", "2"],
        cwd=ROOT,
        env=worker_env(url),
    )
    try:
        time.sleep(3)  # let the worker start and go idle
        for _ in range(n):
            result = noop.enqueue()
            deadline = time.monotonic() + 10
            while not Job.objects.filter(id=result.id, state="succeeded").exists():
                if time.monotonic() > deadline:
                    raise SystemExit("a job was not picked up within 10 s")
                time.sleep(0.001)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    rows = Job.objects.values_list("enqueued_at", "started_at")
    latencies = sorted((s - e).total_seconds() * 1000 for e, s in rows)
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return p50, p99


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--latency-jobs", type=int, default=300)
    parser.add_argument(
        "--arg-bytes", type=int, default=0, help="a string argument of this size per job"
    )
    args = parser.parse_args()
    kinds = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    if len(kinds) > 1:
        # Django is set up once per process: run each database in a child of our own.
        for kind in kinds:
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--db",
                    kind,
                    "--jobs",
                    str(args.jobs),
                    "--concurrency",
                    str(args.concurrency),
                    "--latency-jobs",
                    str(args.latency_jobs),
                    "--arg-bytes",
                    str(args.arg_bytes),
                ],
                check=True,
            )
        return
    kind = kinds[0]
    url = scratch_database(kind)
    setup_django(url)
    what = f"jobs with a {args.arg_bytes}-byte argument" if args.arg_bytes else "no-op jobs"
    log(f"== {kind}: {args.jobs} {what}, concurrency {args.concurrency}")
    single, bulk = bench_enqueue(args.jobs, args.arg_bytes)
    log(f"[1/3] enqueue: {single:,.0f}/s one at a time, {bulk:,.0f}/s with enqueue_many")
    rate = drain(url, args.jobs, args.concurrency)
    log(f"[2/3] drain:   {rate:,.0f} jobs/s (1 worker, concurrency {args.concurrency})")
    reset()
    p50, p99 = bench_latency(url, args.latency_jobs)
    log(f"[3/3] wake-up: p50 {p50:.1f} ms, p99 {p99:.1f} ms (enqueue to start, idle worker)")
    print(
        f"RESULT {kind} single={single:.0f} bulk={bulk:.0f} drain={rate:.0f} "
        f"p50_ms={p50:.2f} p99_ms={p99:.2f}"
    )


if __name__ == "__main__":
    main()
