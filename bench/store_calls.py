"""Where a drain's worker spends its time: the store calls, timed, and each process's CPU.

    .venv/bin/python bench/store_calls.py --db sqlite --jobs 20000
    .venv/bin/python bench/store_calls.py --db sqlite --jobs 2000   # the slope between the two
                                                                     # is the per-job cost

Enqueues N no-op jobs into a scratch database, runs `manage.py worker --burst` in this
process (so that the store calls can be wrapped and timed), checks every job ran exactly once,
and prints: the worker's CPU and its executors' CPU, each store call's count, total and share
per job, how many outcomes each finish carried and how many jobs each claim took, and the SQL
statements per job that go through Django's cursor (on SQLite the claim, the guarded finish and
the attempt rows run on sqlite3's own cursor and are not counted). The wrappers cost a little
CPU themselves. Not part of the test suite.
"""

import argparse
import collections
import os
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.throughput import (  # noqa: E402
    check_exactly_once,
    scratch_database,
    setup_django,
    worker_env,
)


def _cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    url = scratch_database(args.db)
    os.environ.update(worker_env(url))  # the worker runs in this process
    setup_django(url)

    from django.core.management import call_command
    from django.db import connection

    import jobs.db as db
    from jobs import worker
    from jobs.db.engine import Engine
    from jobsite.tasks import noop

    noop.enqueue_many([((), {})] * args.jobs)
    timed = collections.defaultdict(list)
    sizes = []

    def wrap(owner, name, label):
        original = getattr(owner, name)

        def timed_call(*a, **k):
            start = time.perf_counter()
            result = original(*a, **k)
            timed[label].append(time.perf_counter() - start)
            if name == "finish_and_claim":
                sizes.append((len(a[0]), len(result[1])))
            return result

        setattr(owner, name, timed_call)

    engine = type(db.engine())
    wrap(db, "finish_and_claim", "finish_and_claim (one transaction)")
    wrap(Engine, "finish", "  finish: every step")
    wrap(engine, "finish_chunk", "    the guarded update (+ attempt rows on SQLite)")
    wrap(engine, "after_finish", "    continuations and counters")
    wrap(engine, "claim", "  claim")
    statements = collections.Counter()

    def count(execute, sql, params, many, context):
        statements[sql.split()[0].upper()] += 1
        return execute(sql, params, many, context)

    executors_cpu = {}
    run, shutdown = worker.Worker.run, worker.Worker._shutdown

    def counted_run(self):
        with connection.execute_wrapper(count):
            return run(self)

    def measured_shutdown(self):
        for e in self.supervisor.executors:
            executors_cpu[e.pid] = _cpu_seconds(e.pid)
        return shutdown(self)

    worker.Worker.run, worker.Worker._shutdown = counted_run, measured_shutdown
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    call_command("worker", burst=True, concurrency=args.concurrency)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    check_exactly_once(args.jobs)
    n = args.jobs
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    print(f"{n} jobs in {wall:.2f} s (worker start-up included): {n / wall:,.0f} jobs/s")
    print(f"worker CPU {cpu:.2f} s ({cpu / n * 1e6:.0f} µs/job, start-up included)")
    spent = sum(executors_cpu.values())
    print(f"executors' CPU {spent:.2f} s over {len(executors_cpu)} ({spent / n * 1e6:.0f} µs/job)")
    for label, times in timed.items():
        print(
            f"{label:52s} {len(times):5d} calls, {sum(times):6.2f} s, "
            f"{statistics.mean(times) * 1e3:6.2f} ms each, {sum(times) / n * 1e6:5.1f} µs/job"
        )
    outcomes = [f for f, _ in sizes if f]
    claims = [c for _, c in sizes if c]
    print(
        f"outcomes per finish: mean {statistics.mean(outcomes):.0f}, max {max(outcomes)}; "
        f"jobs per claim: mean {statistics.mean(claims):.0f}, max {max(claims)}"
    )
    total = sum(statements.values())
    print(f"SQL statements through Django's cursor: {dict(statements)} = {total / n:.3f} per job")


if __name__ == "__main__":
    main()
