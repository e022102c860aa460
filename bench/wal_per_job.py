"""What a burst drain writes to PostgreSQL's write-ahead log, per job, and of which kind.

Runs `bench/baseline.py`'s burst drain (no-op jobs, or with `--retry` jobs that each fail once
and then succeed) in a scratch database and reads the log the drain wrote with the server's
own `pg_walinspect`: bytes per job by resource manager (heap rows, B-tree and GIN index
entries, full-page images), then by record type. The enqueue before the drain is not counted.
A count, not a time: it does not move with the machine's load, so runs on different machines
and checkouts compare directly.

    .venv/bin/python bench/wal_per_job.py
    .venv/bin/python bench/wal_per_job.py --retry
    .venv/bin/python bench/wal_per_job.py --retry --drop-index job_search_errors

`--drop-index` drops an index of the job table before the drain (the scratch database is the
bench's own), to see its share. Other sessions writing to the same server while it runs are
counted too. Not part of the test suite.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.baseline import jobsite_drain, jobsite_retry_drain  # noqa: E402
from bench.count_triggers import fresh_database  # noqa: E402
from bench.throughput import log, setup_django, vacuum  # noqa: E402

DATABASE = "jobsite_wal_per_job"


def current_lsn() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn()")
        return cursor.fetchone()[0]


def wal_stats(start: str, end: str, per_record: bool) -> list[tuple[str, int, int, int]]:
    """(kind, records, bytes, of which full-page images) between two positions of the log."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        cursor.execute(
            'SELECT "resource_manager/record_type", count, combined_size, fpi_size '
            "FROM pg_get_wal_stats(%s, %s, %s) WHERE count > 0 ORDER BY combined_size DESC",
            [start, end, per_record],
        )
        return cursor.fetchall()


def table(rows, jobs: int, limit: int) -> list[str]:
    lines = [
        "| kind | records per job | bytes per job | of which full pages |",
        "|---|---:|---:|---:|",
    ]
    for kind, count, size, fpi in rows[:limit]:
        lines.append(f"| {kind} | {count / jobs:.1f} | {size / jobs:,.0f} | {fpi / jobs:,.0f} |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--retry", action="store_true", help="every job fails once")
    parser.add_argument("--drop-index", action="append", default=[], help="an index of jobs_job")
    parser.add_argument("--database", default=DATABASE)
    args = parser.parse_args()
    url = fresh_database(args.database)
    setup_django(url)
    from django.db import connection

    with connection.cursor() as cursor:
        for name in args.drop_index:
            cursor.execute(f'DROP INDEX "{name}"')
    marks = {}

    def enqueued():
        vacuum()
        marks["start"] = current_lsn()

    if args.retry:
        rate = jobsite_retry_drain(url, args.jobs, args.concurrency, enqueued=enqueued)
    else:
        rate, _ = jobsite_drain(url, args.jobs, args.concurrency, enqueued=enqueued)
    end = current_lsn()
    kind = "retry-heavy" if args.retry else "no-op"
    by_manager = wal_stats(marks["start"], end, per_record=False)
    total = sum(size for _, _, size, _ in by_manager)
    log(
        f"{kind} drain of {args.jobs:,} jobs at concurrency {args.concurrency}"
        + (f", without {', '.join(args.drop_index)}" if args.drop_index else "")
        + f": {rate:,.0f} jobs/s, {total / args.jobs:,.0f} bytes of log per job\n"
    )
    log("\n".join(table(by_manager, args.jobs, limit=8)) + "\n")
    log("\n".join(table(wal_stats(marks["start"], end, per_record=True), args.jobs, limit=12)))


if __name__ == "__main__":
    main()
