"""The worker's database round alone: CPU per job of `finish_and_claim`, no executors.

    .venv/bin/python bench/db_round.py --db sqlite
    .venv/bin/python bench/db_round.py --db postgres --jobs 3000 --reps 8

In one process: enqueue N no-op jobs, then record their successes and claim the next batch
(100-260 jobs, varying as the dispatcher's room does) until none is left, as the worker's
`_sync` does, the outcomes decided by `jobs.outcome.decide`. Repeated `--reps` times over
freshly enqueued jobs; prints the minimum and the median CPU per job (the minimum is what
survives other processes' load on a shared machine). Finished jobs stay in the table, so later
repetitions run over a larger table. Not part of the test suite.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.throughput import scratch_database, setup_django, worker_env  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=8)
    args = parser.parse_args()
    url = scratch_database(args.db)
    os.environ.update(worker_env(url))  # the worker runs in this process
    setup_django(url)

    import jobs.db as db
    from jobs import outcome as oc
    from jobsite.tasks import noop

    per_job = []
    for _ in range(args.reps):
        noop.enqueue_many([((), {})] * args.jobs)
        finishes, recorded, rounds = [], 0, 0
        start = time.process_time()
        while True:
            rounds += 1
            applied, claimed = db.finish_and_claim(
                finishes,
                worker_id="bench",
                queues=None,
                limit=100 + (rounds * 37) % 161,
                lease_seconds=60,
            )
            recorded += len(applied)
            if not claimed and not finishes:
                break
            now = oc.now()
            finishes = [
                oc.decide(
                    c,
                    oc.Ran(c.id, "ok", return_json="null", started_at=now, finished_at=now),
                    worker_id="bench",
                )
                for c in claimed
            ]
        spent = time.process_time() - start
        assert recorded == args.jobs, recorded
        per_job.append(spent / args.jobs * 1e6)
    print(
        f"{args.db}: finish_and_claim {min(per_job):.1f} µs/job CPU at least, "
        f"median {statistics.median(per_job):.1f} ({args.reps} drains of {args.jobs} jobs: "
        + " ".join(f"{x:.0f}" for x in per_job)
        + ")"
    )


if __name__ == "__main__":
    main()
