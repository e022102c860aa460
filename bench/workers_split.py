"""The same executors in one worker or split among several: a burst drain's rate by shape.

    .venv/bin/python bench/workers_split.py                       # 1x4 against 2x2, PostgreSQL
    .venv/bin/python bench/workers_split.py --shape 1x2 --shape 2x1 --jobs 20000
    .venv/bin/python bench/workers_split.py --db sqlite --jobs 20000

A shape WxC is W burst workers (`manage.py worker --burst --concurrency C`) started together
over the same pre-enqueued no-op jobs. Every shape drains the same number of jobs in one
scratch database, vacuumed before each round, the shapes alternated from round to round so
that none always runs on a warmer machine; each round checks that every job ran exactly once.
A worker's loop writes its outcomes and claims its next jobs in one transaction and waits for
it: split among workers, those waits overlap. Not part of the test suite.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.throughput import (  # noqa: E402
    drain,
    enqueue_noops,
    log,
    reset,
    rounds_cell,
    scratch_database,
    setup_django,
    vacuum,
)


def shape(text):
    workers, _, concurrency = text.partition("x")
    try:
        parsed = int(workers), int(concurrency)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a shape is WORKERSxCONCURRENCY, such as 2x2: {text!r}"
        ) from None
    if min(parsed) < 1:
        raise argparse.ArgumentTypeError(f"a shape needs at least 1x1: {text!r}")
    return parsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--jobs", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shape", type=shape, action="append", help="WxC (default 1x4, 2x2)")
    args = parser.parse_args()
    shapes = args.shape or [(1, 4), (2, 2)]
    url = scratch_database(args.db)
    setup_django(url)
    rates: dict = {s: [] for s in shapes}
    for round_ in range(args.rounds):
        for workers, concurrency in shapes if round_ % 2 == 0 else shapes[::-1]:
            reset()
            vacuum()
            enqueue_noops(args.jobs)
            rate = drain(url, args.jobs, concurrency, workers=workers)
            rates[(workers, concurrency)].append(rate)
            log(f"round {round_ + 1}: {workers}x{concurrency}: {rate:,.0f} jobs/s")
    log(f"\nno-op drain, {args.jobs:,} jobs, {args.db}:\n")
    log("| workers x concurrency | jobs/s, each round (median) |\n|---|---|")
    for (workers, concurrency), values in rates.items():
        log(f"| {workers} x {concurrency} | {rounds_cell(values)} |")


if __name__ == "__main__":
    main()
