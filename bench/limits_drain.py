"""The no-op drain with flow-control limits declared but never reached, against none at all.

    .venv/bin/python bench/limits_drain.py                       # both databases
    .venv/bin/python bench/limits_drain.py --db postgres --jobs 10000 --rounds 3

The same jobs (no-op tasks spread over 50 limit keys) are drained by one burst worker three
ways, round after round in turn so that a loaded machine weighs on each alike:
`none` (no LIMITS), `concurrency` (queue, task and key concurrency limits far above what runs)
and `rate` (the same plus a queue rate limit never reached, so every claim also records its
starts). Each drain is checked: every job ran exactly once, none left running. Figures go to
bench/README.md ("Flow control").
"""

import argparse
import json
import statistics
import subprocess
import sys

from throughput import ROOT, check_exactly_once, log, reset, scratch_database, setup_django

VARIANTS = {
    "none": {},
    "concurrency": {
        "queue:default": {"concurrency": 100_000},
        "task:jobsite.tasks.noop": {"concurrency": 100_000},
        "key:tenant-*": {"concurrency": 100_000},
    },
    "rate": {
        "queue:default": {"concurrency": 100_000, "rate": [1_000_000, 1]},
        "task:jobsite.tasks.noop": {"concurrency": 100_000},
        "key:tenant-*": {"concurrency": 100_000},
    },
}
KEYS = 50


def enqueue(n):
    from jobsite.tasks import noop

    for k in range(KEYS):
        noop.using(limit_key=f"tenant-{k}").enqueue_many([((), {})] * (n // KEYS))
    return (n // KEYS) * KEYS


def drain(url, n, concurrency, limits):
    import os

    from jobs.models import Job

    env = {
        **os.environ,
        "DATABASE_URL": url,
        "JOBSITE_LOG_LEVEL": "WARNING",
        "JOBSITE_SCHEDULES": "{}",
        "JOBSITE_LIMITS": json.dumps(limits),
    }
    proc = subprocess.run(
        [sys.executable, "manage.py", "worker", "--burst", "--concurrency", str(concurrency)],
        cwd=ROOT,
        env=env,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise SystemExit(f"worker exited with {proc.returncode}")
    done = Job.objects.filter(state="succeeded").order_by()
    first = done.order_by("started_at").values_list("started_at", flat=True).first()
    last = done.order_by("-finished_at").values_list("finished_at", flat=True).first()
    check_exactly_once(n)
    return n / (last - first).total_seconds()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.db == "both":
        for kind in ("sqlite", "postgres"):
            argv = [sys.executable, __file__, "--db", kind, "--jobs", str(args.jobs)]
            argv += ["--concurrency", str(args.concurrency), "--rounds", str(args.rounds)]
            subprocess.run(argv, check=True)
        return
    url = scratch_database(args.db)
    setup_django(url)
    rates = {name: [] for name in VARIANTS}
    for round_ in range(args.rounds):
        for name, limits in VARIANTS.items():
            reset()
            n = enqueue(args.jobs)
            rate = drain(url, n, args.concurrency, limits)
            rates[name].append(rate)
            log(f"{args.db} round {round_ + 1} {name:>11}: {rate:,.0f} jobs/s")
    base = statistics.median(rates["none"])
    for name, found in rates.items():
        median = statistics.median(found)
        log(
            f"RESULT {args.db} {name}: median {median:,.0f} jobs/s "
            f"({median / base:.0%} of no limits; runs {', '.join(f'{r:,.0f}' for r in found)})"
        )


if __name__ == "__main__":
    main()
