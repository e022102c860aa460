"""A trial: job ids made at random (UUID version 4, as jobsite makes them) against ids in
creation order (version 7, RFC 9562).

    .venv/bin/python bench/job_ids.py --db sqlite                  # 3 rounds, 30,000 jobs
    .venv/bin/python bench/job_ids.py --db postgres --retry

A random id lands anywhere in every index that holds it: the job's primary key, the attempts'
(job, number) key, and on PostgreSQL the search text's key. Ids in creation order put a batch's
entries side by side. Each round runs both kinds of id, in alternating order, each in a fresh
database of its own (a child process per run). The table first holds `--base` finished jobs
with ids of the same kind (a table that has been in use); then one-at-a-time enqueues and
`enqueue_many` are timed, then the burst drain of `bench/baseline.py` (checked exactly-once;
with `--retry`, every job failing once). The "ordered" runs make ids with `ordered_id` below
(CPython 3.14's `uuid.uuid7` algorithm) in place of `uuid.uuid4`; nothing else differs. Not
part of the test suite, and not adopted: see bench/README.md, "Job ids in creation order".
"""

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KINDS = ("random", "ordered")
_last = [0, 0]  # the last id's millisecond and counter


def ordered_id() -> uuid.UUID:
    """A version 7 UUID: the time in ms, a 42-bit counter within the ms (started at random each
    new ms), 32 random bits. Ids made by one process rise."""
    ms = max(time.time_ns() // 1_000_000, _last[0])
    rand = int.from_bytes(os.urandom(10))
    counter = _last[1] + 1 if ms == _last[0] else (rand >> 32) & ((1 << 41) - 1)
    _last[:] = ms, counter
    value = ms << 80 | (counter >> 30) << 64 | (counter & 0x3FFF_FFFF) << 32 | rand & 0xFFFF_FFFF
    return uuid.UUID(int=value | (7 << 76) | (0x8000 << 48))


def one_run(kind, db, base, count, concurrency, retry):
    """In this process: a fresh database whose jobs get `kind` ids; prints one RESULT line."""
    from bench.checkout_ab import fresh_database_run

    def use_ordered_ids():
        uuid.uuid4 = ordered_id  # read at each call by jobs.backend, which makes the job ids

    def check_version(Job):
        made = Job.objects.values_list("id", flat=True).first()
        if made is not None and made.version != (7 if kind == "ordered" else 4):
            raise SystemExit(f"the {kind} run made a version {made.version} id")

    before = use_ordered_ids if kind == "ordered" else None
    fresh_database_run(db, base, count, concurrency, retry, before=before, made=check_version)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--base", type=int, default=100_000, help="finished jobs already there")
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per kind of id")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--retry", action="store_true", help="every job failing once")
    parser.add_argument("--kind", choices=KINDS, help=argparse.SUPPRESS)  # one child run
    args = parser.parse_args()
    if args.kind:
        one_run(args.kind, args.db, args.base, args.jobs, args.concurrency, args.retry)
        return
    from bench.throughput import alternated_runs, print_rounds_table

    args_ = ["--db", args.db, "--base", str(args.base), "--jobs", str(args.jobs)]
    args_ += ["--concurrency", str(args.concurrency)] + (["--retry"] if args.retry else [])
    results = alternated_runs(__file__, "--kind", KINDS, args.rounds, args_)
    print(f"\n{args.db}, {args.base:,} finished jobs, {args.jobs:,} drained, c{args.concurrency}")
    print_rounds_table("job ids", "retry-heavy drain" if args.retry else "drain", results)


if __name__ == "__main__":
    main()
