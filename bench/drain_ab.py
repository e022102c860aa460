"""A before/after of the burst drain: the worker of two checkouts, in alternated rounds.

    git worktree add --detach /tmp/before <commit>
    .venv/bin/python bench/drain_ab.py --jobs 30000 /tmp/before .
    .venv/bin/python bench/drain_ab.py --retry --jobs 20000 /tmp/before . 2>/dev/null

Both sides drain the same number of pre-enqueued jobs (bench/baseline.py's drain, each checked
to have run exactly once; with `--retry`, each failing once and then succeeding) in one scratch
database, enqueued and migrated by this checkout, and vacuumed before each round, so both share
the machine's moods. Only the worker differs: `manage.py worker --burst` is started from each
checkout in turn. The two must share the schema. The workers log to stderr (each first
failure of `--retry`, as a warning). Not part of the test suite.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.baseline import jobsite_drain, jobsite_retry_drain  # noqa: E402
from bench.throughput import (  # noqa: E402
    log,
    reset,
    rounds_cell,
    scratch_database,
    setup_django,
    vacuum,
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs=2, type=Path, help="before and after")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--retry", action="store_true", help="every job failing once")
    args = parser.parse_args()
    url = scratch_database(args.db)
    setup_django(url)
    rates: list[list[float]] = [[], []]  # by side: the same checkout may be given twice
    for round in range(args.rounds):
        # Each round starts with the other side, so neither always runs on a warmer machine.
        for i in (0, 1) if round % 2 == 0 else (1, 0):
            side = args.checkouts[i]
            reset()
            vacuum()
            if args.retry:
                rate = jobsite_retry_drain(url, args.jobs, args.concurrency, root=side.resolve())
            else:
                rate, _ = jobsite_drain(url, args.jobs, args.concurrency, root=side.resolve())
            rates[i].append(rate)
            log(f"round {round + 1}: {side}: {rate:,.0f} jobs/s")
    kind = "retry-heavy" if args.retry else "no-op"
    log(f"\n{kind} drain, {args.jobs:,} jobs, concurrency {args.concurrency}, {args.db}:")
    for side, values in zip(args.checkouts, rates, strict=True):
        log(f"| {side} | {rounds_cell(values)} |")


if __name__ == "__main__":
    main()
