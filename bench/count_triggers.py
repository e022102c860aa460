"""What the job-count triggers (migration 0008) cost the engine's writes, on PostgreSQL.

Runs `bench/throughput.py`'s enqueue (one call at a time and `enqueue_many`) and burst drain in
one scratch database, alternately with the counting triggers enabled and disabled
(`ALTER TABLE jobs_job DISABLE TRIGGER USER`), so both sides share the machine's moods:

    .venv/bin/python bench/count_triggers.py                     # 4 rounds of 5,000 jobs
    .venv/bin/python bench/count_triggers.py --rounds 6 --jobs 10000
    .venv/bin/python bench/count_triggers.py --trigger jobs_count_update   # that one alone

Each drain is checked exactly-once as in throughput.py. Not part of the test suite.
"""

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.throughput import (  # noqa: E402
    bench_enqueue,
    drain,
    log,
    reset,
    rounds_cell,
    setup_django,
)

DATABASE = "jobsite_h14_triggers"
SERVER = "postgres://postgres@127.0.0.1:5432"


def fresh_database(name):
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    return f"{SERVER}/{name}"


def clear():
    from django.db import connection

    reset()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_jobcountdelta")


def set_triggers(enabled, trigger="USER"):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE jobs_job {'ENABLE' if enabled else 'DISABLE'} TRIGGER {trigger}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=4, help="rounds per side")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--database", default=DATABASE)
    parser.add_argument(
        "--trigger", default="USER", help="one trigger's name (default: every trigger on the table)"
    )
    args = parser.parse_args()
    url = fresh_database(args.database)
    setup_django(url)
    results = {True: [], False: []}
    for round_ in range(args.rounds):
        # Alternate which side goes first, so neither always runs on a warmer cache.
        for enabled in (True, False) if round_ % 2 == 0 else (False, True):
            set_triggers(enabled, args.trigger)
            clear()
            single, bulk = bench_enqueue(args.jobs)
            rate = drain(url, args.jobs, args.concurrency)
            clear()
            load = os.getloadavg()[0]
            side = "on " if enabled else "off"
            log(
                f"round {round_ + 1} triggers {side}: {single:,.0f} single/s, {bulk:,.0f} bulk/s,"
                f" drain {rate:,.0f} jobs/s (load {load:.1f})"
            )
            results[enabled].append((single, bulk, rate))
    set_triggers(True, args.trigger)
    print()
    print("| triggers | single enqueue/s | `enqueue_many`/s | drain jobs/s |")
    print("|---|---:|---:|---:|")
    for enabled in (True, False):
        columns = list(zip(*results[enabled], strict=True))
        cells = [rounds_cell(column) for column in columns]
        print(f"| {'on' if enabled else 'off'} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
