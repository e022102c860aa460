"""Does a worker serving named queues claim as fast as one serving every queue?

    .venv/bin/python bench/claim_queues.py --db postgres --jobs 100000
    .venv/bin/python bench/claim_queues.py --db sqlite --jobs 100000 --explain

A scratch database (bench.throughput.scratch_database) gets --jobs due no-op jobs in the queue
`bulk` and 100 in `mail`, then is ANALYZEd (--stale-stats: before the jobs went in, as on a new
installation's first burst or a server without autovacuum). The engine's own claim
(jobs.db.claim: the worker's statement; on PostgreSQL, on a connection set up as a worker's) is
timed in transactions it rolls back, --repeat times each, for: every queue (no filter), `bulk`
alone, `mail` alone, `mail` + `reports` (few due jobs beside a deep queue), `mail` + `bulk`, and
`mail` + `reports` + `bulk`, at limits 4 and 200. A claim that reads only what it returns costs
about the same whatever the queue list; one that reads every due job of its queues grows with
--jobs. --explain prints each multi-queue plan. --delayed N adds N jobs at a higher priority
(10) that are not due for a day, half in each queue: a claim that walks them costs as much as
they are many. --committed N instead makes N committed 4-job claims per queue set, as a worker
does (its prepared statement reused), and reports how PostgreSQL planned them. Not part of the
test suite.
"""

import argparse
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scale import explain_claim, probe_claim  # noqa: E402
from bench.throughput import enqueue_noops, log, scratch_database, setup_django  # noqa: E402

QUEUE_SETS = {
    "every queue": None,
    "bulk": ["bulk"],
    "mail": ["mail"],
    "mail+reports": ["mail", "reports"],
    "mail+bulk": ["mail", "bulk"],
    "mail+reports+bulk": ["mail", "reports", "bulk"],
}


def fill(jobs, stale, delayed=0):
    from django.db import connection
    from django.utils import timezone

    from jobsite.tasks import noop

    started = time.perf_counter()
    if stale:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    enqueue_noops(jobs)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_job SET queue_name = 'bulk'")
        noop.enqueue_many([((), {})] * 100)
        cursor.execute("UPDATE jobs_job SET queue_name = 'mail' WHERE queue_name <> 'bulk'")
        later = noop.using(priority=10, run_after=timezone.now() + timedelta(days=1))
        for queue in ("bulk", "mail"):
            for start in range(0, delayed // 2, 10_000):
                count = min(10_000, delayed // 2 - start)
                later.using(queue_name=queue).enqueue_many([((), {})] * count)
        # Each its own due time within the day, as real ones have (equal index keys would be
        # stored once, and read as fast as one).
        if connection.vendor == "postgresql":
            spread = "run_after + random() * interval '1 day'"
        else:
            spread = (
                "strftime('%Y-%m-%d %H:%M:%f', run_after, (abs(random()) % 86400) || ' seconds')"
            )
        cursor.execute(f"UPDATE jobs_job SET run_after = {spread} WHERE priority = 10")
        if connection.vendor == "postgresql":
            cursor.execute("VACUUM jobs_job")
        if not stale:
            cursor.execute("ANALYZE")
    log(
        f"{jobs:,} due jobs in `bulk`, 100 in `mail`, {delayed:,} at a higher priority due "
        f"tomorrow, in {time.perf_counter() - started:.0f} s"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--explain", action="store_true")
    parser.add_argument(
        "--stale-stats",
        action="store_true",
        help="statistics taken before the jobs were added (a first burst, no autovacuum yet)",
    )
    parser.add_argument(
        "--delayed", type=int, default=0, help="jobs at a higher priority, not due for a day"
    )
    parser.add_argument(
        "--committed",
        type=int,
        metavar="N",
        help="instead: N committed 4-job claims per queue set, and (PostgreSQL) how often the "
        "prepared claims were planned afresh (custom) or reused a generic plan",
    )
    args = parser.parse_args()
    if args.committed is not None and args.committed <= 5:
        parser.error("--committed: more than 5 claims (the first 5 are warm-up, left out)")
    setup_django(scratch_database(args.db))

    from django.db import connection

    from jobs import db

    fill(args.jobs, args.stale_stats, args.delayed)
    if connection.vendor == "postgresql":
        connection.ensure_connection()
        db.configure_worker_session(connection, lease_seconds=60, heartbeat_seconds=10)
    if args.committed:
        committed_claims(args.committed)
        return
    log(f"{connection.vendor}: claim ms (median of {args.repeat}, rolled back)")
    for limit in (4, 200):
        for label, queues in QUEUE_SETS.items():
            samples, got = [], 0
            for _ in range(args.repeat):
                ms, got = probe_claim(limit, queues)
                samples.append(ms)
            log(
                f"  limit {limit:>3}  {label:<18} {statistics.median(samples):8.2f} ms"
                f"  (max {max(samples):.2f}, {got} rows)"
            )
            if args.explain and queues and len(queues) > 1 and limit == 4:
                print(explain_claim(limit, queues))


def committed_claims(n):
    """As a worker claims: each claim commits, so a connection's prepared claim is reused."""
    from django.db import connection

    from jobs import db

    log(f"{connection.vendor}: committed 4-job claim ms (median of the last {n - 5} of {n})")
    for label, queues in QUEUE_SETS.items():
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            db.claim(worker_id="committed-probe", queues=queues, limit=4, lease_seconds=60)
            samples.append((time.perf_counter() - started) * 1000)
        log(f"  {label:<18} {statistics.median(samples[5:]):8.2f} ms")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT sum(generic_plans), sum(custom_plans) FROM pg_prepared_statements "
                "WHERE statement LIKE '%%SKIP LOCKED%%'"
            )
            generic, custom = cursor.fetchone()
        log(f"  prepared claims: {generic} runs on a generic plan, {custom} planned afresh")


if __name__ == "__main__":
    main()
