"""How late schedules fire: N workers fire an every-second schedule for a while.

    .venv/bin/python bench/schedule_lateness.py                       # SQLite and PostgreSQL
    .venv/bin/python bench/schedule_lateness.py --db postgres --workers 3 --seconds 120

Lateness is `enqueued_at - scheduled_at` of each fired job (one machine, so one clock). Each run
also checks that every fire time between the first and the last has exactly one job.
Not part of the test suite: numbers go to bench/README.md.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from datetime import timedelta

sys.path.insert(0, os.path.dirname(__file__))
from throughput import ROOT, log, scratch_database, setup_django

SCHEDULE = {"lateness": {"task": "jobsite.tasks.noop", "every": 1}}


def measure(url, workers, seconds):
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "JOBSITE_LOG_LEVEL": "WARNING",
        "JOBSITE_SCHEDULES": json.dumps(SCHEDULE),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "manage.py", "worker", "--concurrency", "1"], cwd=ROOT, env=env
        )
        for _ in range(workers)
    ]
    time.sleep(seconds)  # the measurement window itself
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(timeout=60)

    from jobs.models import Job

    jobs = list(Job.objects.filter(schedule="lateness").order_by("scheduled_at"))
    times = [job.scheduled_at for job in jobs]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False) if b - a != timedelta(seconds=1)]
    late = sorted((job.enqueued_at - job.scheduled_at).total_seconds() for job in jobs)
    p99 = late[min(len(late) - 1, int(0.99 * len(late)))]
    p50 = statistics.median(late)
    log(
        f"{workers} worker(s), {len(jobs)} fires: lateness p50 {p50 * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms, max {late[-1] * 1000:.0f} ms; "
        f"{'no gaps' if not gaps else f'{len(gaps)} gaps'}"
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    kinds = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    for kind in kinds:
        if kind != kinds[0]:
            # One Django per process: measure the next database in a fresh interpreter.
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    *("--db", kind, "--workers", str(args.workers)),
                    *("--seconds", str(args.seconds)),
                ],
                check=True,
            )
            continue
        setup_django(scratch_database(kind))
        log(f"== {kind}")
        measure(os.environ["DATABASE_URL"], args.workers, args.seconds)


if __name__ == "__main__":
    main()
