"""A trial of the next layout step on PostgreSQL: the list indexes on a table written once.

The console's three list indexes on `jobs_job` (`job_recent`, `job_queue_recent`,
`job_task_recent`) hold only columns a job never changes after its enqueue, yet every claim and
finish writes an entry into each, since the row is rewritten in full (the state is indexed, so
no update is HOT). The trial moves them, in a scratch database, onto `jobs_searchtext` (the
table the insert trigger already writes once per job, migration 0021): the trigger also copies
`enqueued_at`, `queue_name` and `task_path` there, and the three indexes are built on it. The
console's queries are not changed, so this measures the engine's writes only:

    .venv/bin/python bench/list_table_trial.py                  # 4 rounds of 20,000 jobs
    .venv/bin/python bench/list_table_trial.py --rounds 6 --jobs 10000

Each round runs both layouts, in alternating order, each in a fresh database of its own (a
child process per run): one-at-a-time enqueues, `enqueue_many`, and the burst drain of
`bench/baseline.py` (checked exactly-once). Not part of the test suite.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MOVED = r"""
ALTER TABLE jobs_searchtext ADD COLUMN enqueued_at timestamptz,
    ADD COLUMN queue_name varchar(100), ADD COLUMN task_path varchar(200);
CREATE OR REPLACE FUNCTION jobs_job_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jobs_jobcountdelta (queue_name, state, n)
    SELECT queue_name, state, count(*) FROM new_rows GROUP BY queue_name, state;
    INSERT INTO jobs_searchtext (job_id, text, enqueued_at, queue_name, task_path)
    SELECT id, lower(args::text || ' ' || kwargs::text || ' ' || coalesce(dedup_key, '')),
           enqueued_at, queue_name, task_path
    FROM new_rows;
    RETURN NULL;
END $$;
CREATE INDEX trial_recent ON jobs_searchtext (enqueued_at DESC, job_id DESC);
CREATE INDEX trial_queue_recent ON jobs_searchtext (queue_name, enqueued_at DESC, job_id DESC);
CREATE INDEX trial_task_recent ON jobs_searchtext (task_path, enqueued_at DESC, job_id DESC);
DROP INDEX job_recent;
DROP INDEX job_queue_recent;
DROP INDEX job_task_recent;
"""
LAYOUTS = ("on the job row", "moved")


def one_run(layout, jobs, concurrency):
    """In this process: a fresh database in `layout`, measured; prints one RESULT line."""
    from bench.baseline import jobsite_drain
    from bench.throughput import bench_enqueue, reset, scratch_database, setup_django

    url = scratch_database("postgres")
    setup_django(url)
    from django.db import connection

    if layout == "moved":
        with connection.cursor() as cursor:
            cursor.execute(MOVED)
    single, bulk = bench_enqueue(min(jobs, 3_000))
    reset()
    rate, _ = jobsite_drain(url, jobs, concurrency)
    print(f"RESULT {single:.0f} {bulk:.0f} {rate:.0f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=4, help="rounds per layout")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--layout", choices=LAYOUTS, help=argparse.SUPPRESS)  # one child run
    args = parser.parse_args()
    if args.layout:
        one_run(args.layout, args.jobs, args.concurrency)
        return
    from bench.throughput import alternated_runs, print_rounds_table

    args_ = ["--jobs", str(args.jobs), "--concurrency", str(args.concurrency)]
    results = alternated_runs(__file__, "--layout", LAYOUTS, args.rounds, args_)
    print()
    print_rounds_table("list indexes", "drain", results)


if __name__ == "__main__":
    main()
