"""What some of the job table's indexes cost the burst drain, on PostgreSQL.

Runs `bench/baseline.py`'s burst drain (jobs enqueued in bulk, then drained) in one scratch
database, alternately with the named indexes in place and dropped (each dropped one is created
again, on the then empty table, for the next round), so both sides share the machine's moods.
The tables are vacuumed before each round, so no round walks past the last one's dead rows:

    .venv/bin/python bench/index_cost.py --index job_state_recent     # the list by state
    .venv/bin/python bench/index_cost.py --retry --index job_search_errors

`--retry` drains jobs that each fail once and then succeed (bench/baseline.py's retry-heavy
drain) instead of no-op jobs. Each drain is checked as its own bench checks it. Dropping an
index the console needs is for measuring only: the scratch database is the bench's own. Not
part of the test suite.
"""

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.baseline import jobsite_drain, jobsite_retry_drain  # noqa: E402
from bench.count_triggers import fresh_database  # noqa: E402
from bench.throughput import log, reset, rounds_cell, setup_django, vacuum  # noqa: E402

DATABASE = "jobsite_index_cost"


def definitions(names):
    """Each named index's CREATE INDEX statement, read from the catalog."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE tablename = 'jobs_job' AND indexname = ANY(%s)",
            [list(names)],
        )
        found = dict(cursor.fetchall())
    missing = sorted(set(names) - set(found))
    if missing:
        raise SystemExit(f"no such index on jobs_job: {', '.join(missing)}")
    return found


def set_indexes(present, found):
    from django.db import connection

    with connection.cursor() as cursor:
        for name, statement in found.items():
            if present:
                cursor.execute(statement.replace(" INDEX ", " INDEX IF NOT EXISTS ", 1))
            else:
                cursor.execute(f"DROP INDEX IF EXISTS {name}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", action="append", required=True, help="an index of jobs_job")
    parser.add_argument("--jobs", type=int, default=15_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per side")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--retry", action="store_true", help="every job fails once")
    parser.add_argument("--database", default=DATABASE)
    args = parser.parse_args()
    url = fresh_database(args.database)
    setup_django(url)
    found = definitions(args.index)
    results = {True: [], False: []}
    for round_ in range(args.rounds):
        # Alternate which side goes first, so neither always runs on a warmer cache.
        for present in (True, False) if round_ % 2 == 0 else (False, True):
            reset()
            vacuum()
            set_indexes(present, found)
            if args.retry:
                rate = jobsite_retry_drain(url, args.jobs, args.concurrency)
            else:
                rate, _ = jobsite_drain(url, args.jobs, args.concurrency)
            load = os.getloadavg()[0]
            side = "in place" if present else "dropped "
            log(f"round {round_ + 1} indexes {side}: drain {rate:,.0f} jobs/s (load {load:.1f})")
            results[present].append(rate)
    reset()
    set_indexes(True, found)
    print()
    print(f"| {', '.join(args.index)} | drain jobs/s |")
    print("|---|---:|")
    for present in (True, False):
        print(f"| {'in place' if present else 'dropped'} | {rounds_cell(results[present])} |")


if __name__ == "__main__":
    main()
