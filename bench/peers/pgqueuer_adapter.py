"""pgqueuer: QueueManager.run(mode=drain) over asyncpg; Queries.enqueue() single or with lists.

Concurrency N = N worker processes (one asyncio QueueManager each; the job body is the same
synchronous no-op, so in-process concurrency would not add parallelism). Its documented speed
knob is `batch_size` (jobs fetched per dequeue, default 10).
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class Spec:
    name = "pgqueuer"
    module = "bench.peers.pgqueuer_adapter"
    venv = "pgqueuer"
    python = str(ROOT / "bench/.peers/pgqueuer/bin/python")
    burst = True
    bulk = "enqueue(lists)"
    retries = True
    # "async": one process with N coroutines in flight at most (max_concurrent_tasks, which
    # must be at least twice the batch size); "async-unbounded": its default, no cap at all.
    configs = {
        "default": {"batch_size": 10},
        "fast": {"batch_size": 100},
        "async": {"batch_size": 100, "in_flight": True},
        "async-unbounded": {"batch_size": 100, "in_flight": False},
    }
    notes = "N processes, QueueManager.run(batch_size=B, mode=drain|continuous), asyncpg"

    def __init__(self, db_url):
        self.db_url = db_url

    def env(self, config, concurrency=1, retry=False):
        return {"BENCH_DB_URL": self.db_url}

    def worker_cmds(self, config, concurrency, burst):
        settings = self.configs[config]
        batch, processes, extra = settings["batch_size"], concurrency, []
        if "in_flight" in settings:  # one process; concurrency = coroutines in flight
            batch, processes = min(batch, max(1, concurrency // 2)), 1
            cap = concurrency if settings["in_flight"] else 0
            extra = ["--max-concurrent-tasks", str(cap)]
        cmd = [self.python, "-m", self.module, "worker", "--batch-size", str(batch)]
        cmd += ["--burst", "1" if burst else "0", *extra]
        return [list(cmd) for _ in range(processes)]


def _run(coro):
    import asyncio

    return asyncio.run(coro)


async def _queries():
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(os.environ["BENCH_DB_URL"])
    return conn, Queries(AsyncpgDriver(conn))


def setup():
    from bench.peers.common import recreate_pg_database

    recreate_pg_database(os.environ["BENCH_DB_URL"].rsplit("/", 1)[1])

    async def go():
        conn, q = await _queries()
        await q.install()
        await conn.close()

    _run(go())
    return {}


def reset():
    from bench.peers.common import pg_exec

    db = os.environ["BENCH_DB_URL"].rsplit("/", 1)[1]
    rows = pg_exec(
        db,
        "SELECT tablename FROM pg_tables WHERE schemaname='public' "
        "AND tablename LIKE 'pgqueuer%' AND tablename NOT LIKE '%schedules%'",
    )
    pg_exec(db, f"TRUNCATE {', '.join(r[0] for r in rows)}")
    return {}


def enqueue(mode, n, task="noop", start=0, cap=None):
    import time

    async def go():
        conn, q = await _queries()
        ids = range(start, start + n)
        t0, done = time.perf_counter(), n
        if mode == "single":
            done = 0
            for i in ids:
                await q.enqueue(task, str(i).encode())
                done += 1
                if cap and done % 64 == 0 and time.perf_counter() - t0 > float(cap):
                    break
        else:
            for s in range(0, n, 10_000):
                chunk = ids[s : s + 10_000]
                await q.enqueue(
                    [task] * len(chunk), [str(i).encode() for i in chunk], [0] * len(chunk)
                )
        elapsed = time.perf_counter() - t0
        await conn.close()
        return {"seconds": elapsed, "count": done}

    return _run(go())


def latency(n, task="noop"):
    import asyncio
    import random
    import time

    from bench.peers.common import IDLE_GAP, wait_for_starts

    log_path = os.environ["BENCH_EXEC_LOG"]
    pace = float(os.environ.get("BENCH_PACE") or 0)  # as common.latency_loop, in asyncio

    async def go():
        conn, q = await _queries()
        stamps, size = [], os.path.getsize(log_path) if os.path.exists(log_path) else 0
        rng, begin = random.Random(0), time.monotonic()
        for i in range(n):
            if pace and i:  # the first job waits for its start: the workers are up
                await asyncio.sleep(max(0.0, begin + i / pace - time.monotonic()))
                stamps.append(time.time())
                await q.enqueue(task, str(i).encode())
                continue
            await asyncio.sleep(rng.uniform(*IDLE_GAP))
            t0 = time.time()
            await q.enqueue(task, str(i).encode())
            stamps.append(t0)
            deadline = time.monotonic() + 30
            while True:
                new = os.path.getsize(log_path) if os.path.exists(log_path) else 0
                if new > size:
                    size = new
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"job {i} was not started within 30 s")
                await asyncio.sleep(0.0002)
            begin = time.monotonic()
        await conn.close()
        if pace:
            wait_for_starts(n, log_path, 30)
        return stamps

    return {"stamps": _run(go())}


def check():
    from bench.peers.common import pg_exec

    rows = pg_exec(
        os.environ["BENCH_DB_URL"].rsplit("/", 1)[1],
        "SELECT status::text, count(*) FROM pgqueuer GROUP BY 1",
    )
    states = dict(rows)
    return {
        "states": states,
        "in_progress": states.get("picked", 0),
        "pending": states.get("queued", 0),
    }


def worker(batch_size, burst, max_concurrent_tasks="0"):
    import asyncio
    import logging
    from datetime import timedelta

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("pgqueuer").setLevel(logging.WARNING)

    async def go():
        import asyncpg
        from pgqueuer import AsyncpgDriver, DatabaseRetryEntrypointExecutor, Queries, QueueManager
        from pgqueuer.domain.types import QueueExecutionMode

        from bench.peers.common import await_seconds, run_job

        conn = await asyncpg.connect(os.environ["BENCH_DB_URL"])
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint("noop")
        async def noop(job):
            run_job(int(job.payload))

        # Retry scenarios: retried in the database, 3 attempts in all, no delay.
        @qm.entrypoint(
            "retried",
            executor_factory=lambda p: DatabaseRetryEntrypointExecutor(
                parameters=p, max_attempts=2, initial_delay=timedelta(0)
            ),
        )
        async def retried(job):
            run_job(int(job.payload))

        @qm.entrypoint("awaiting")
        async def awaiting(job):
            run_job(int(job.payload))
            await asyncio.sleep(await_seconds())

        mode = QueueExecutionMode.drain if burst == "1" else QueueExecutionMode.continuous
        await qm.run(
            batch_size=int(batch_size),
            mode=mode,
            max_concurrent_tasks=int(max_concurrent_tasks) or None,
        )

    asyncio.run(go())
    return {}


def main():
    from bench.peers.common import run_driver

    run_driver(globals())


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
