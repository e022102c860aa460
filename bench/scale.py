"""Does jobsite keep its pace with a million jobs in the table? PostgreSQL only.

    .venv/bin/python bench/scale.py           # 1M-row table, 10,000-job drains, 100k latency drain
    .venv/bin/python bench/scale.py --quick   # smoke: 100k rows, 2,000-job drains, 10k drain
    .venv/bin/python bench/scale.py --only drain --rounds 3

Two scratch databases on BENCH_POSTGRES (default postgres://postgres@127.0.0.1:5432), created,
migrated and dropped here: `jobsite_scale_empty` and `jobsite_scale_full`. The full one holds
--fill jobs (bench/dashboard.py's fill, another state mix):

- half finished: 43% succeeded, 5% dead letters, 2% cancelled, with their attempts;
- half live but not due: 40% retrying and 10% pending, due between 1 hour and 30 days from
  now (a backlog of delayed jobs and retries waiting out their backoff). They stay in the
  claim's partial index, which a claim must step over, yet a burst worker can still finish.

then VACUUM ANALYZE, as autovacuum would have run by then.

1. drain: N pre-enqueued no-op jobs (enqueue_many, `jobsite.tasks.noop`) drained by one
   `manage.py worker --burst --concurrency 4`, on the empty and on the full table, interleaved
   (--rounds each); rate = N / (first attempt's start to last finish), every measured job checked
   to have run exactly once; then the measured jobs are deleted and the tables vacuumed. Target:
   full / empty >= 0.8. The table is ANALYZEd between enqueueing and draining: an empty table's
   statistics, taken while it was empty, make the planner sort every due job at each claim
   instead of walking the claim index (see --latency-on empty); --stale-stats leaves them.
2. claim latency: --latency-jobs no-op jobs drained by one worker on the full table (or
   --latency-on empty / both), with no vacuum after enqueueing: autovacuum does what it does
   (check that the server runs it: `SHOW autovacuum`). Meanwhile a probe times the engine's own
   claim (jobs.db.claim, same statement and prepared-statement path as the worker's, limit =
   concurrency) every --probe-interval s, in a transaction it rolls back, and stops once fewer
   jobs than that remain. Reports p50/p95 of the probe in the first and last 10% of the drain
   (by jobs finished), the drain rate per tenth of the jobs, and pg_stat_user_tables of
   jobs_job at start and end. Target: no slowdown.

Exits non-zero on a failed check. Not part of the test suite.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.dashboard import fill_jobs, jobs_sql, recreate_database  # noqa: E402
from bench.throughput import enqueue_noops, log, setup_django, worker_env  # noqa: E402

SERVER = os.environ.get("BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432").rstrip("/")
EMPTY, FULL = "jobsite_scale_empty", "jobsite_scale_full"
TASK = "jobsite.tasks.noop"
TARGET_RATIO = 0.8

# Buckets of 1000 (see bench/dashboard.py): half finished, half live but not yet due.
SCALE_STATES = """
    CASE
        WHEN b < 430 THEN 'succeeded'
        WHEN b < 480 THEN 'dead_letter'
        WHEN b < 500 THEN 'cancelled'
        WHEN b < 900 THEN 'retrying'
        ELSE 'pending'
    END
"""


def url(name):
    return f"{SERVER}/{name}"


def use_database(name):
    """Point this process's Django connection at another scratch database."""
    from django.db import connection

    connection.close()
    connection.settings_dict["NAME"] = name


def sql(statement, params=None):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else None


def vacuum():
    sql("VACUUM ANALYZE")


def fill(jobs, live_priority=0):
    from jobs.states import CLAIMABLE

    started = time.perf_counter()
    log(f"filling {jobs:,} jobs (half finished, half due in 1 h to 30 days) ...")
    fill_jobs(jobs, jobs_sql(SCALE_STATES, running=0))
    log(f"  rows and attempts in {time.perf_counter() - started:.0f} s; moving live rows ahead ...")
    sql(
        "UPDATE jobs_job SET run_after = now() + interval '1 hour' + random() * interval '30 days',"
        " priority = %s WHERE state = ANY(%s)",
        [live_priority, list(CLAIMABLE)],
    )
    log("  VACUUM ANALYZE ...")
    vacuum()
    counts = dict(sql("SELECT state, count(*) FROM jobs_job GROUP BY state"))
    log(
        f"  filled in {time.perf_counter() - started:.0f} s: "
        + ", ".join(f"{s} {n:,}" for s, n in sorted(counts.items()))
    )


def measured():
    from jobs.models import Job

    return Job.objects.filter(task_path=TASK)


def start_worker(name, concurrency):
    return subprocess.Popen(
        [sys.executable, "manage.py", "worker", "--burst", "--concurrency", str(concurrency)],
        cwd=ROOT,
        env=worker_env(url(name)),
    )


def wait(proc):
    if proc.wait(timeout=3600) != 0:
        raise SystemExit(f"worker exited with {proc.returncode}")


def check_exactly_once(n, attempts_before):
    """Every measured job succeeded on its one attempt; no other job ran."""
    from django.db.models import Count

    from jobs.models import Attempt

    jobs = measured()
    succeeded = jobs.filter(state="succeeded", attempt=1).count()
    left = jobs.exclude(state="succeeded").count()
    repeated = (
        Attempt.objects.filter(job__task_path=TASK)
        .values("job_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    others = Attempt.objects.count() - attempts_before - n
    if succeeded != n or left or repeated or others:
        raise SystemExit(
            f"correctness check failed: {succeeded}/{n} succeeded once, {left} not succeeded, "
            f"{repeated} with more than one attempt, {others} attempts of other jobs"
        )


def span():
    """(first attempt's start, last finish) of the measured jobs."""
    from django.db.models import Max, Min

    from jobs.models import Attempt

    first = Attempt.objects.filter(job__task_path=TASK).aggregate(t=Min("started_at"))["t"]
    last = measured().aggregate(t=Max("finished_at"))["t"]
    return first, last


def clear_measured():
    from jobs.models import Attempt

    Attempt.objects.filter(job__task_path=TASK).delete()
    measured().delete()
    vacuum()


def drain(name, n, concurrency, analyze):
    from jobs.models import Attempt

    use_database(name)
    attempts_before = Attempt.objects.count()
    enqueue_noops(n)
    if analyze:
        sql("ANALYZE jobs_job")
    wait(start_worker(name, concurrency))
    check_exactly_once(n, attempts_before)
    first, last = span()
    clear_measured()
    return n / (last - first).total_seconds()


# --- claim latency ----------------------------------------------------------------------------

STATS = (
    "SELECT n_live_tup, n_dead_tup, autovacuum_count, last_autovacuum, autoanalyze_count, "
    "pg_relation_size('job_claimable') FROM pg_stat_user_tables WHERE relname = 'jobs_job'"
)


def table_stats():
    live, dead, vacuums, last, analyzes, index = sql(STATS)[0]
    return {
        "n_live_tup": live,
        "n_dead_tup": dead,
        "autovacuum_count": vacuums,
        "last_autovacuum": last.strftime("%H:%M:%S") if last else "never",
        "autoanalyze_count": analyzes,
        "job_claimable size": f"{index / 2**20:.1f} MB",
    }


def probe_claim(limit, queues=None):
    """ms of one claim by the engine, rolled back; and how many rows it would have claimed."""
    from django.db import transaction

    from jobs import db

    with transaction.atomic():
        started = time.perf_counter()
        rows = db.claim(worker_id="scale-probe", queues=queues, limit=limit, lease_seconds=60)
        ms = (time.perf_counter() - started) * 1000
        transaction.set_rollback(True)
    return ms, len(rows)


def explain_claim(limit, queues=None):
    """The plan of the engine's claim (PostgreSQL: EXPLAIN ANALYZE of its one statement;
    SQLite: EXPLAIN QUERY PLAN of each statement of its walk), rolled back."""
    import uuid

    from django.db import connection, transaction

    from jobs import db

    engine = db.engine()
    if connection.vendor == "sqlite":
        queue = queues[0] if queues else None
        top, below, due, _ = engine.walk[1 if queue else 0]
        asked = [queue] if queue else []
        statements = [
            (top, asked),
            (below, [*asked, 0]),
            (due, [*asked, 0, limit]),
            (engine.claim_ids_sql, ["0" * 32, 60, "scale-explain", "[]"]),
        ]
        plans = []
        for statement, params in statements:
            rows = sql("EXPLAIN QUERY PLAN " + statement.replace("?", "%s"), params)
            plans.append(" / ".join(str(row[3]) for row in rows))
        return "\n".join(plans)
    with transaction.atomic():
        plan = sql(
            "EXPLAIN (ANALYZE, BUFFERS) " + engine.claim_sql(queues),
            engine.claim_params(uuid.uuid4(), 60, "scale-explain", queues, limit),
        )
        transaction.set_rollback(True)
    return "\n".join(" ".join(str(c) for c in row) for row in plan)


def latency(name, n, concurrency, interval, explain):
    from jobs.models import Attempt

    use_database(name)
    attempts_before = Attempt.objects.count()
    log(f"enqueueing {n:,} jobs ...")
    enqueue_noops(n)
    if explain:
        log("claim plan at the start:\n" + explain_claim(concurrency))
    before = table_stats()
    proc = start_worker(name, concurrency)
    samples = []  # (wall time, ms)
    probing, next_report = True, time.monotonic() + 10
    while proc.poll() is None:
        if probing:
            ms, got = probe_claim(concurrency)
            samples.append((datetime.now(UTC), ms))
            # Near the end the probe could hold the last due rows while the burst worker
            # looks for more and exits: stop before that.
            probing = got == concurrency
        if time.monotonic() >= next_report:
            log(f"  {measured().filter(state='succeeded').count():,} of {n:,} done ...")
            next_report += 10
        time.sleep(interval)
    wait(proc)
    after = table_stats()
    if explain:
        enqueue_noops(concurrency)
        log("claim plan at the end (with a few new due jobs):\n" + explain_claim(concurrency))
        measured().filter(state="pending").delete()
    check_exactly_once(n, attempts_before)
    finished = sorted(measured().values_list("finished_at", flat=True))
    first, _ = span()
    clear_measured()
    return samples, finished, first, before, after


def windows(finished, first, parts=10):
    """Drain rate of each successive tenth of the jobs, by their finish times."""
    size = len(finished) // parts
    rates, start = [], first
    for i in range(parts):
        end = finished[(i + 1) * size - 1]
        rates.append(size / max((end - start).total_seconds(), 1e-9))
        start = end
    return rates


def percentiles(values):
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    return statistics.median(values), statistics.quantiles(values, n=20, method="inclusive")[18]


def report_latency(samples, finished, first, before, after, n, table):
    t10, t90 = finished[len(finished) // 10], finished[len(finished) * 9 // 10]
    early = [ms for t, ms in samples if first <= t <= t10]
    late = [ms for t, ms in samples if t >= t90]
    (p50a, p95a), (p50b, p95b) = percentiles(early), percentiles(late)
    rates = windows(finished, first)
    total = n / (finished[-1] - first).total_seconds()
    print()
    print(f"claim latency through a {n:,}-job drain on the {table} ({len(samples)} probes)")
    print("| part of the drain | probes | p50 ms | p95 ms |")
    print("|---|---:|---:|---:|")
    print(f"| first 10% | {len(early)} | {p50a:.2f} | {p95a:.2f} |")
    print(f"| last 10% | {len(late)} | {p50b:.2f} | {p95b:.2f} |")
    print()
    print(f"drain rate per tenth of the jobs ({n // 10:,} each), jobs/s; whole drain {total:,.0f}")
    print("| " + " | ".join(str(i + 1) for i in range(len(rates))) + " |")
    print("|" + "---:|" * len(rates))
    print("| " + " | ".join(f"{r:,.0f}" for r in rates) + " |")
    print()
    print("| jobs_job | at the start | at the end |")
    print("|---|---:|---:|")
    for key in before:
        print(f"| {key} | {before[key]} | {after[key]} |")
    return {
        "early_p50": p50a,
        "early_p95": p95a,
        "late_p50": p50b,
        "late_p95": p95b,
        "first_window": rates[0],
        "last_window": rates[-1],
        "latency_drain": total,
    }


# --- the run ----------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="100k rows, 2k drains, 10k latency")
    parser.add_argument("--fill", type=int, help="jobs in the full table (default 1,000,000)")
    parser.add_argument("--jobs", type=int, help="jobs per measured drain (default 10,000)")
    parser.add_argument("--latency-jobs", type=int, help="jobs of the latency drain (100,000)")
    parser.add_argument("--rounds", type=int, default=2, help="drains per table, interleaved")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--probe-interval", type=float, default=0.1, help="seconds")
    parser.add_argument("--only", choices=["drain", "latency"], help="run one scenario")
    parser.add_argument(
        "--latency-on",
        choices=["full", "empty", "both"],
        default="full",
        help="the table of the latency drain (both: the full one, then the empty one)",
    )
    parser.add_argument(
        "--stale-stats",
        action="store_true",
        help="no ANALYZE between enqueueing and draining (see the module's docstring)",
    )
    parser.add_argument("--explain", action="store_true", help="print the claim's plan")
    parser.add_argument(
        "--live-priority",
        type=int,
        default=0,
        help="priority of the live rows not yet due (the measured jobs have 0)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch databases")
    args = parser.parse_args()
    fill_n = args.fill or (100_000 if args.quick else 1_000_000)
    n = args.jobs or (2_000 if args.quick else 10_000)
    latency_n = args.latency_jobs or (10_000 if args.quick else 100_000)

    for name in (EMPTY, FULL):
        recreate_database(SERVER, name)
    try:
        setup_django(url(EMPTY))
        from django.core.management import call_command

        use_database(FULL)
        call_command("migrate", verbosity=0)
        fill(fill_n, args.live_priority)
        result = {}
        if args.explain and args.only == "drain":
            enqueue_noops(args.concurrency)
            log(f"claim plan on the {fill_n:,}-job table:\n" + explain_claim(args.concurrency))
            measured().delete()
        if args.only != "latency":
            rates = {EMPTY: [], FULL: []}
            for i in range(args.rounds):
                for name in (EMPTY, FULL):
                    log(f"drain {i + 1}/{args.rounds}, {name}: {n:,} jobs ...")
                    rates[name].append(drain(name, n, args.concurrency, not args.stale_stats))
                    log(f"  {rates[name][-1]:,.0f} jobs/s")
            empty, full = statistics.mean(rates[EMPTY]), statistics.mean(rates[FULL])
            print()
            print(f"drain of {n:,} no-op jobs, worker --burst --concurrency {args.concurrency}")
            print(
                "| table | "
                + " | ".join(f"round {i + 1}" for i in range(args.rounds))
                + " | mean |"
            )
            print("|---|" + "---:|" * (args.rounds + 1))
            for name, label in ((EMPTY, "empty"), (FULL, f"{fill_n:,} jobs, half finished")):
                cells = " | ".join(f"{r:,.0f}" for r in rates[name])
                print(f"| {label} | {cells} | {statistics.mean(rates[name]):,.0f} |")
            ratio = full / empty
            flag = "met" if ratio >= TARGET_RATIO else "MISSED"
            print(f"\nfull / empty = {ratio:.2f} (target >= {TARGET_RATIO}: {flag})")
            result.update(empty=empty, full=full, ratio=ratio)
        if args.only != "drain":
            tables = {"full": FULL, "empty": EMPTY}
            for key in ("full", "empty") if args.latency_on == "both" else (args.latency_on,):
                table = "empty table" if key == "empty" else f"{fill_n:,}-job table"
                log(f"latency drain on the {table} ...")
                outcome = latency(
                    tables[key], latency_n, args.concurrency, args.probe_interval, args.explain
                )
                found = report_latency(*outcome, latency_n, table)
                result.update({f"{key}_{k}": v for k, v in found.items()})
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"\nload average {load} on {os.cpu_count()} CPUs")
        print("RESULT " + " ".join(f"{k}={v:.2f}" for k, v in result.items()))
    finally:
        if not args.keep:
            from django.db import connection

            connection.close()
            import psycopg

            with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
                for name in (EMPTY, FULL):
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
