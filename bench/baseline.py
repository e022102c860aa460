"""jobsite against the naive loops a queue must beat, in one run, reported as ratios.

    .venv/bin/python bench/baseline.py --db postgres            # 10,000 jobs, concurrency 4
    .venv/bin/python bench/baseline.py --db sqlite --jobs 5000
    .venv/bin/python bench/baseline.py --db postgres --mixed    # plus the 1/10/100 ms mix
    .venv/bin/python bench/baseline.py --db postgres --memory   # plus the worker's PSS
    .venv/bin/python bench/baseline.py --db postgres --retry    # plus every job failing once
    .venv/bin/python bench/baseline.py --db postgres --enqueue-only --rounds 40

The baselines, written here so every run measures them beside jobsite in the same database:

- naive drain: one `UPDATE ... WHERE id = (SELECT ... LIMIT 1 [FOR UPDATE SKIP LOCKED])`
  claim plus one completion `UPDATE` per job, autocommit, from one process. PostgreSQL: on a
  temporary table (as the performance issue measured it: no write-ahead log, so no flush at
  commit) and on a regular table (durable, like jobsite's); SQLite: on a regular table in the
  same WAL database file as the jobs.
- naive insert: one single-row `INSERT` per job with a commit each, into the same tables;
  against jobsite's single enqueue it runs in alternating short rounds (see
  `single_enqueue_rounds`), and the ratio given is the median of the per-round ratios.

jobsite's side is `bench/throughput.py`'s: `manage.py worker --burst` processes draining
pre-enqueued no-op jobs (every job checked to have run exactly once), and `.enqueue()` one call
at a time. Not part of the test suite.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peers.common import marks_base  # noqa: E402
from bench.throughput import (  # noqa: E402
    check_exactly_once,
    log,
    reset,
    scratch_database,
    setup_django,
    worker_env,
)

NAIVE_TABLE = "bench_naive_jobs"
MIX_MS = (1, 10, 100)  # the mixed workload's job durations, in turn


def _naive_table(cursor, vendor, temporary, table=NAIVE_TABLE):
    if vendor == "postgresql":
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
        cursor.execute(
            f"CREATE {'TEMPORARY ' if temporary else ''}TABLE {table} "
            "(id bigserial PRIMARY KEY, "
            "state text NOT NULL DEFAULT 'pending', args jsonb NOT NULL DEFAULT '[]', "
            "run_after timestamptz NOT NULL DEFAULT now())"
        )
    else:
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
        cursor.execute(
            f"CREATE TABLE {table} (id integer PRIMARY KEY AUTOINCREMENT, "
            "state text NOT NULL DEFAULT 'pending', args text NOT NULL DEFAULT '[]', "
            "run_after text NOT NULL DEFAULT CURRENT_TIMESTAMP)"
        )
    cursor.execute(
        f"CREATE INDEX {table}_due ON {table} (state, run_after, id) WHERE state = 'pending'"
    )


def naive(n, *, temporary=False, body=None):
    """(inserts/s, claims+completions/s) of the naive loops, on Django's own connection.
    `body(i)`, when given, runs between the claim and the completion of the i-th job."""
    from django.db import connection

    vendor = connection.vendor
    connection.ensure_connection()
    with connection.cursor() as cursor:
        _naive_table(cursor, vendor, temporary)
        start = time.perf_counter()
        for _ in range(n):
            cursor.execute(f"INSERT INTO {NAIVE_TABLE} (args) VALUES ('[]')")  # autocommit
        inserts = n / (time.perf_counter() - start)
        lock = "FOR UPDATE SKIP LOCKED" if vendor == "postgresql" else ""
        now = "now()" if vendor == "postgresql" else "CURRENT_TIMESTAMP"
        claim = (
            f"UPDATE {NAIVE_TABLE} SET state = 'running' WHERE id = (SELECT id FROM {NAIVE_TABLE} "
            f"WHERE state = 'pending' AND run_after <= {now} ORDER BY run_after, id LIMIT 1 "
            f"{lock}) RETURNING id"
        )
        done = f"UPDATE {NAIVE_TABLE} SET state = 'succeeded' WHERE id = %s"
        start = time.perf_counter()
        drained = 0
        while True:
            cursor.execute(claim)
            row = cursor.fetchone()
            if row is None:
                break
            if body:
                body(drained)
            cursor.execute(done, [row[0]])
            drained += 1
        rate = drained / (time.perf_counter() - start)
        if drained != n:
            raise SystemExit(f"naive loop drained {drained} of {n}")
        cursor.execute(f"DROP TABLE {NAIVE_TABLE}")
    return inserts, rate


def sqlite_pragmas():
    """The connection settings both sides run with (the project's OPTIONS: one connection
    set-up for the naive loop, which runs on Django's connection, and for the worker)."""
    from django.db import connection

    with connection.cursor() as cursor:
        found = []
        for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys"):
            cursor.execute(f"PRAGMA {name}")
            found.append(f"{name}={cursor.fetchone()[0]}")
    found.append(f"transaction_mode={connection.transaction_mode}")
    return " ".join(found)


def jobsite_drain(
    url,
    n,
    concurrency,
    task="jobsite.tasks.noop",
    args_for=None,
    env=None,
    root=ROOT,
    enqueued=None,
):
    """Enqueue n jobs in bulk, then time burst workers over them from first start to last end.

    The worker runs from the checkout at `root` (another commit's, for a before/after);
    `enqueued`, when given, is called between the enqueue and the drain."""
    from django.tasks import task_backends  # noqa: F401  (the backend must be loaded)
    from django.utils.module_loading import import_string

    from jobs.models import Attempt, Job

    fn = import_string(task)
    calls = [((args_for(i) if args_for else ()), {}) for i in range(n)]
    fn.enqueue_many(calls)
    if enqueued:
        enqueued()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "worker", "--burst", "--concurrency", str(concurrency)],
        cwd=root,
        env={**worker_env(url), **(env or {})},
    )
    if proc.wait(timeout=3600) != 0:
        raise SystemExit(f"worker exited with {proc.returncode}")
    done = Job.objects.filter(state="succeeded").order_by()
    first = Attempt.objects.order_by("started_at").values_list("started_at", flat=True).first()
    last = done.order_by("-finished_at").values_list("finished_at", flat=True).first()
    if env:  # every job failed once: two attempts each, the second one succeeded
        check_failed_once_then_succeeded(n)
    else:
        check_exactly_once(n)
    pickups = sorted(
        (s - max(e, r)).total_seconds() * 1000
        for e, r, s in done.values_list("enqueued_at", "run_after", "started_at")
    )
    p99 = pickups[min(len(pickups) - 1, int(len(pickups) * 0.99))]
    return n / (last - first).total_seconds(), p99


def check_failed_once_then_succeeded(n):
    from django.db.models import Count

    from jobs.models import Attempt, Job

    succeeded = Job.objects.filter(state="succeeded", attempt=2).count()
    attempts = Attempt.objects.values("job_id").annotate(n=Count("id")).filter(n=2).count()
    if succeeded != n or attempts != n:
        raise SystemExit(
            f"correctness check failed: {succeeded}/{n} succeeded on their 2nd attempt, "
            f"{attempts}/{n} jobs with exactly 2 attempts"
        )


def jobsite_retry_drain(url, n, concurrency, root=ROOT, enqueued=None):
    """Every job fails its first attempt and succeeds on the second (backoff 0, no jitter)."""
    with tempfile.TemporaryDirectory(prefix="jobsite-retry-", dir=marks_base()) as marks:
        env = {
            "BENCH_MODE": "flaky",
            "BENCH_MARK_DIR": marks,
            "BENCH_EXEC_LOG": str(Path(marks) / "executions.log"),
        }
        rate, _ = jobsite_drain(
            url,
            n,
            concurrency,
            task="bench.peers.jobsite_tasks.retried",
            args_for=lambda i: (i,),
            env=env,
            root=root,
            enqueued=enqueued,
        )
    return rate


def single_enqueue_rounds(vendor, rounds, per_round):
    """jobsite's `.enqueue()` against the naive insert, alternated in short rounds.

    One commit per call on both sides, so each side's rate is dominated by the write-ahead
    log's flush, whose time swings several-fold within a minute on a shared machine. Timed in
    alternating rounds (A B, B A, ...) in one process and database, each round's ratio sees the
    same flush time on both sides; the median ratio is the figure. Returns {name: [rate of each
    round]} for "jobsite", "naive" and, on PostgreSQL, "naive_temp" (a temporary table).
    """
    from django.db import connection

    from jobsite.tasks import noop

    tables = {"naive": NAIVE_TABLE}
    if vendor == "postgresql":
        tables["naive_temp"] = NAIVE_TABLE + "_temp"
    with connection.cursor() as cursor:
        for name, table in tables.items():
            _naive_table(cursor, vendor, name == "naive_temp", table=table)

        def naive_loop(table):
            def loop():
                for _ in range(per_round):
                    cursor.execute(f"INSERT INTO {table} (args) VALUES ('[]')")  # autocommit

            return loop

        def jobsite_loop():
            for _ in range(per_round):
                noop.enqueue()

        sides = {"jobsite": jobsite_loop, **{n: naive_loop(t) for n, t in tables.items()}}
        for loop in sides.values():  # warm up: connections, prepared statements, caches
            loop()
        rates = {name: [] for name in sides}
        order = list(sides)
        for _ in range(rounds):
            for name in order:
                start = time.perf_counter()
                sides[name]()
                rates[name].append(per_round / (time.perf_counter() - start))
            order.reverse()
        for table in tables.values():
            cursor.execute(f"DROP TABLE {table}")
    return rates


def extra_us_summary(rates, of, to):
    """Median per-round extra time per call of `of` over `to`, in microseconds.

    The ratio of two rates that share one flush per call depends on the flush's own time (a
    slow disk pulls it towards 1); the difference does not.
    """
    extra = sorted(1e6 / a - 1e6 / b for a, b in zip(rates[of], rates[to], strict=True))
    q1, _, q3 = statistics.quantiles(extra, n=4)
    return f"{statistics.median(extra):+.0f} us per call (middle half {q1:+.0f} to {q3:+.0f})"


def ratio_summary(rates, of, to):
    """'0.93x (per-round 0.85-1.02, middle half 0.90-0.96)' and the median ratio."""
    ratios = sorted(a / b for a, b in zip(rates[of], rates[to], strict=True))
    median = statistics.median(ratios)
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    text = (
        f"{median:.2f}x (per-round {ratios[0]:.2f}-{ratios[-1]:.2f}, middle half {q1:.2f}-{q3:.2f})"
    )
    return text, median


def worker_memory_mb(url, concurrency, seconds=8.0):
    """Memory of a worker and every process it started, idle after start-up, in MB.

    Returns (PSS of them all, {role: [(PSS, USS) of each process]}), the roles being "worker",
    "executor", "fork server" and "resource tracker". PSS shares each shared page among the
    processes mapping it; USS is a process's private memory: what one more executor costs.
    """
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "worker", "--concurrency", str(concurrency)],
        cwd=ROOT,
        env=worker_env(url),
    )
    try:
        time.sleep(seconds)
        pids = [proc.pid] + _children(proc.pid)
        roles: dict[str, list] = {}
        for pid in pids:
            roles.setdefault(_role(pid, proc.pid), []).append(_memory_kb(pid))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    roles = {role: [(p / 1024, u / 1024) for p, u in found] for role, found in roles.items()}
    return sum(p for found in roles.values() for p, _ in found), roles


def _role(pid, worker_pid):
    if pid == worker_pid:
        return "worker"
    with open(f"/proc/{pid}/cmdline") as f:
        cmdline = f.read()
    if "resource_tracker" in cmdline:
        return "resource tracker"
    with open(f"/proc/{pid}/stat") as f:
        parent = int(f.read().rsplit(")", 1)[1].split()[1])
    if "forkserver" in cmdline and parent == worker_pid:
        return "fork server"
    return "executor"


def _children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    found = [int(p) for p in out.split()]
    return found + [c for p in found for c in _children(p)]


def _memory_kb(pid):
    """(PSS, USS) of one process in kB."""
    pss = uss = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                pss += int(line.split()[1])
            elif line.startswith(("Private_Clean:", "Private_Dirty:")):
                uss += int(line.split()[1])
    return pss, uss


def single_enqueue_report(vendor, args):
    """Logs the interleaved single-enqueue comparison; returns (jobsite's rate, its ratios)."""
    rates = single_enqueue_rounds(vendor, args.rounds, args.per_round)
    reset()
    single = statistics.median(rates["jobsite"])
    text, single_ratio = ratio_summary(rates, "jobsite", "naive")
    log(
        f"jobsite single enqueue: {single:,.0f}/s = {text} the naive insert "
        f"({statistics.median(rates['naive']):,.0f}/s), median of {args.rounds} interleaved "
        f"rounds of {args.per_round}"
    )
    log(f"  jobsite's extra time over it: {extra_us_summary(rates, 'jobsite', 'naive')}")
    temp_single_ratio = None
    if "naive_temp" in rates:
        text, temp_single_ratio = ratio_summary(rates, "jobsite", "naive_temp")
        log(
            f"  = {text} the naive insert on a temporary table "
            f"({statistics.median(rates['naive_temp']):,.0f}/s); extra time "
            f"{extra_us_summary(rates, 'jobsite', 'naive_temp')}"
        )
    return single, single_ratio, temp_single_ratio


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--mixed", action="store_true", help="also a 1/10/100 ms job mix")
    parser.add_argument("--memory", action="store_true", help="also the worker's PSS")
    parser.add_argument("--retry", action="store_true", help="also every job failing once")
    parser.add_argument("--rounds", type=int, default=20, help="single-enqueue rounds")
    parser.add_argument("--per-round", type=int, default=200, help="enqueues per round")
    parser.add_argument(
        "--enqueue-only", action="store_true", help="only the interleaved single enqueue"
    )
    args = parser.parse_args()
    url = scratch_database(args.db)
    setup_django(url)
    from django.db import connection

    if args.enqueue_only:
        single, ratio, temp_ratio = single_enqueue_report(connection.vendor, args)
        print(
            f"RESULT {args.db} single={single:.0f} single_ratio={ratio:.2f}"
            + (f" temp_single_ratio={temp_ratio:.2f}" if temp_ratio else "")
        )
        return
    log(f"== {args.db}: {args.jobs} jobs, worker --concurrency {args.concurrency}")
    if args.db == "sqlite":
        log(f"SQLite settings of the naive loop and of jobsite's worker alike: {sqlite_pragmas()}")
    naive_insert, naive_drain = naive(args.jobs)
    log(f"naive loop: {naive_insert:,.0f} inserts/s, {naive_drain:,.0f} claims+completions/s")
    temp_insert = temp_drain = None
    if args.db == "postgres":
        temp_insert, temp_drain = naive(args.jobs, temporary=True)
        log(
            f"naive loop on a temporary table: {temp_insert:,.0f} inserts/s, "
            f"{temp_drain:,.0f} claims+completions/s"
        )
    single, single_ratio, temp_single_ratio = single_enqueue_report(connection.vendor, args)
    rate, p99 = jobsite_drain(url, args.jobs, args.concurrency)
    reset()
    log(f"jobsite drain: {rate:,.0f} jobs/s = {rate / naive_drain:.2f}x the naive loop")
    if temp_drain:
        log(f"  = {rate / temp_drain:.2f}x the naive loop on a temporary table")
    result = (
        f"RESULT {args.db} naive_insert={naive_insert:.0f} naive_drain={naive_drain:.0f} "
        f"single={single:.0f} drain={rate:.0f} drain_ratio={rate / naive_drain:.2f} "
        f"single_ratio={single_ratio:.2f}"
    )
    if temp_drain:
        result += (
            f" temp_naive_insert={temp_insert:.0f} temp_naive_drain={temp_drain:.0f}"
            f" temp_drain_ratio={rate / temp_drain:.2f}"
            f" temp_single_ratio={temp_single_ratio:.2f}"
        )
    if args.retry:
        retry = jobsite_retry_drain(url, args.jobs, args.concurrency)
        reset()
        log(f"jobsite retry-heavy: {retry:,.0f} jobs/s = {retry / rate:.0%} of the no-op drain")
        result += f" retry={retry:.0f} retry_share={retry / rate:.2f}"
    if args.mixed:
        n = max(300, args.jobs // 20)
        mixed, mixed_p99 = jobsite_drain(
            url,
            n,
            args.concurrency,
            task="bench.peers.jobsite_tasks.sleep_ms",
            args_for=lambda i: (MIX_MS[i % 3],),
        )
        reset()
        # The naive loop runs the same mix one job after another (150 jobs: its rate is the
        # mix's average duration plus the loop's own cost, whatever the count).
        _, naive_mixed = naive(150, body=lambda i: time.sleep(MIX_MS[i % 3] / 1000))
        log(
            f"jobsite mixed 1/10/100 ms ({n} jobs): {mixed:,.0f} jobs/s, "
            f"pickup p99 {mixed_p99:.0f} ms; the naive loop over the same mix "
            f"{naive_mixed:,.1f} jobs/s: {mixed / naive_mixed:.1f}x"
        )
        result += (
            f" mixed={mixed:.0f} mixed_p99_ms={mixed_p99:.0f} naive_mixed={naive_mixed:.1f}"
            f" mixed_ratio={mixed / naive_mixed:.2f}"
        )
    if args.memory:
        total, roles = worker_memory_mb(url, args.concurrency)
        executors = roles.get("executor", [])
        per_pss = statistics.mean(p for p, _ in executors) if executors else 0.0
        per_uss = statistics.mean(u for _, u in executors) if executors else 0.0
        parts = ", ".join(
            f"{role} {' + '.join(f'{p:.0f}' for p, _ in found)}"
            for role, found in roles.items()
            if role != "executor"
        )
        log(
            f"worker PSS at --concurrency {args.concurrency}: {total:.0f} MB ({parts}; "
            f"{len(executors)} executors, each {per_pss:.0f} MB PSS, {per_uss:.0f} MB private)"
        )
        result += f" pss_mb={total:.0f} executor_pss_mb={per_pss:.1f} executor_uss_mb={per_uss:.1f}"
    print(result)


if __name__ == "__main__":
    main()
