"""The webhook scenario of flow control: per-tenant limits against a partner that answers 429.

    .venv/bin/python bench/limits_webhook.py                     # 20,000 jobs, jobsite and pgqueuer
    .venv/bin/python bench/limits_webhook.py --jobs 4000 --systems jobsite,pgqueuer --rounds 2

Jobs for 200 tenants, the largest holding half of them (its jobs enqueued first, so its backlog
is the oldest), each GET a partner on 127.0.0.1 started here (bench/limits_webhook_partner.py):
it answers in 20 ms, and 429 when the tenant has 2 requests in flight or 20 answered within the
last second. A 429 fails the attempt, and the job is retried.

- jobsite (PostgreSQL): LIMITS {"key:tenant-*": {"concurrency": 2, "rate": [20, 1]}}, each job's
  limit_key its tenant; one `worker --concurrency 2 --async-concurrency 100` (an async task).
- pgqueuer: its only limit is an entrypoint's `concurrency_limit` (global across workers), so
  one entrypoint per tenant with `concurrency_limit=2`. It has no rate limit: 20 a second
  cannot be said. Two worker processes (QueueManager.run, batch_size 10), retries through
  DatabaseRetryEntrypointExecutor (50 attempts, from 50 ms doubling up to 2 s).

Measured from the partner's log, alike for both, from its first request (every job is due
by then; the workers' start-up is left out): responses 429; the time to the last 200, against
the time the limits allow (the largest tenant's jobs at 20 a second); and the wait to a job's
first request, p99 over the small tenants' jobs and over the largest tenant's. Not part of the test
suite: figures go to bench/README.md ("Flow control").
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.limits_webhook_partner import (  # noqa: E402
    ANSWER_SECONDS,
    IN_FLIGHT,
    PER_SECOND,
    read_log,
)

TENANTS = 200
JOBSITE_LIMITS = {"key:tenant-*": {"concurrency": IN_FLIGHT, "rate": [PER_SECOND, 1]}}
PGQUEUER_PYTHON = ROOT / "bench/.peers/pgqueuer/bin/python"


def log(text):
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def tenant_counts(n: int) -> list[tuple[str, int]]:
    """(tenant, jobs): the largest holds half, the others share the rest evenly."""
    big, small = n // 2, TENANTS - 1
    rest = n - big
    counts = [big] + [rest // small + (1 if i < rest % small else 0) for i in range(small)]
    return [(f"tenant-{i}", c) for i, c in enumerate(counts)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_partner(log_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench/limits_webhook_partner.py"), "--port", str(port)]
        + ["--log", str(log_path)]
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("the partner did not start") from None
            time.sleep(0.05)


def delivered(log_path) -> int:
    """How many distinct jobs got a 200 so far."""
    with open(log_path) as f:
        return len({line.split()[2] for line in f if line.endswith(" 200\n")})


def wait_delivered(log_path, n, timeout, workers):
    deadline = time.monotonic() + timeout
    while delivered(log_path) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {delivered(log_path)} of {n} delivered within {timeout:.0f} s")
        if all(w.poll() is not None for w in workers):
            raise SystemExit(f"the workers exited with {delivered(log_path)} of {n} delivered")
        time.sleep(0.5)


def stop(workers):
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
    for w in workers:
        try:
            w.wait(60)
        except subprocess.TimeoutExpired:
            w.kill()


def percentile(values, share):
    values = sorted(values)
    return values[min(len(values) - 1, int(share * len(values)))] if values else float("nan")


def measure(system, log_path, counts) -> dict:
    """The figures of one run, from the partner's log; times count from its first request."""
    rows = read_log(log_path)
    origin = min(at for at, *_ in rows)
    first: dict[int, float] = {}
    last_ok = 0.0
    for at, _, job, status in rows:
        first[job] = min(first.get(job, at), at)
        if status == 200:
            last_ok = max(last_ok, at)
    biggest = counts[0][1]
    allowed = biggest / PER_SECOND
    seconds = last_ok + ANSWER_SECONDS - origin
    small_waits = [at - origin for job, at in first.items() if job >= biggest]
    big_waits = [first[job] - origin for job in range(biggest) if job in first]
    result = {
        "system": system,
        "jobs": sum(c for _, c in counts),
        "responses_429": sum(1 for r in rows if r[3] == 429),
        "seconds": seconds,
        "allowed_seconds": allowed,
        "of_allowed": seconds / allowed,
        "p99_wait_small": percentile(small_waits, 0.99),
        "p99_wait_largest": percentile(big_waits, 0.99),
    }
    result["small_over_largest"] = result["p99_wait_small"] / result["p99_wait_largest"]
    log(
        f"RESULT {system}: {result['jobs']} jobs, {result['responses_429']} responses 429, "
        f"{seconds:.1f} s ({result['of_allowed']:.2f}x the {allowed:.0f} s the limits allow), "
        f"p99 wait small tenants {result['p99_wait_small']:.1f} s, largest "
        f"{result['p99_wait_largest']:.1f} s (ratio {result['small_over_largest']:.3f})"
    )
    return result


# --- jobsite -----------------------------------------------------------------------------------


def run_jobsite(counts, port, log_path, timeout):
    from django.db import connection

    from bench.limits_webhook_tasks import webhook
    from bench.throughput import reset, worker_env

    reset()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_limitstart")
    job = 0
    for tenant, c in counts:
        calls = [((port, tenant, j), {}) for j in range(job, job + c)]
        webhook.using(limit_key=tenant).enqueue_many(calls)
        job += c
    env = {**worker_env(os.environ["DATABASE_URL"]), "JOBSITE_LIMITS": json.dumps(JOBSITE_LIMITS)}
    workers = [
        subprocess.Popen(
            [sys.executable, "manage.py", "worker", "--concurrency", "2"]
            + ["--async-concurrency", "100"],
            cwd=ROOT,
            env=env,
        )
    ]
    try:
        wait_delivered(log_path, job, timeout, workers)
    finally:
        stop(workers)


# --- pgqueuer (run in its own venv: `limits_webhook.py pgqueuer enqueue|worker ...`) -------------


def pgqueuer_side(argv):
    import asyncio
    from datetime import timedelta

    import asyncpg
    from pgqueuer import AsyncpgDriver, DatabaseRetryEntrypointExecutor, Queries, QueueManager
    from pgqueuer.domain.types import QueueExecutionMode

    from bench.limits_webhook_partner import deliver

    action, url, port, n = argv[0], argv[1], int(argv[2]), int(argv[3])
    counts = tenant_counts(n)

    async def enqueue():
        conn = await asyncpg.connect(url)
        q = Queries(AsyncpgDriver(conn))
        await q.install()
        job = 0
        for tenant, c in counts:
            payloads = [f"{port} {tenant} {j}".encode() for j in range(job, job + c)]
            await q.enqueue([f"hook-{tenant}"] * c, payloads, [0] * c)
            job += c
        await conn.close()

    def retried(parameters):
        return DatabaseRetryEntrypointExecutor(
            parameters=parameters,
            max_attempts=50,
            initial_delay=timedelta(seconds=0.05),
            max_delay=timedelta(seconds=2),
        )

    async def handler(job):
        port_, tenant, j = job.payload.decode().split()
        await deliver(int(port_), tenant, int(j))

    async def work():
        conn = await asyncpg.connect(url)
        qm = QueueManager(Queries(AsyncpgDriver(conn)))
        for tenant, _ in counts:
            qm.entrypoint(f"hook-{tenant}", concurrency_limit=IN_FLIGHT, executor_factory=retried)(
                handler
            )
        await qm.run(batch_size=10, mode=QueueExecutionMode.continuous)

    asyncio.run(enqueue() if action == "enqueue" else work())


def run_pgqueuer(counts, port, log_path, timeout, python, url):
    from bench.peers.common import recreate_pg_database

    recreate_pg_database(url.rsplit("/", 1)[1])
    n = str(sum(c for _, c in counts))
    me = [str(python), str(Path(__file__).resolve()), "pgqueuer"]
    subprocess.run([*me, "enqueue", url, str(port), n], check=True, cwd=ROOT)
    workers = [subprocess.Popen([*me, "worker", url, str(port), n], cwd=ROOT) for _ in range(2)]
    try:
        wait_delivered(log_path, int(n), timeout, workers)
    finally:
        stop(workers)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--systems", default="jobsite,pgqueuer")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--pgqueuer-python", default=str(PGQUEUER_PYTHON))
    parser.add_argument("--keep-logs", help="a folder to keep the partner's request logs in")
    args = parser.parse_args()
    counts = tenant_counts(args.jobs)
    timeout = 3 * counts[0][1] / PER_SECOND + 120
    systems = args.systems.split(",")
    if "pgqueuer" in systems and not Path(args.pgqueuer_python).exists():
        from bench.run_all import ensure_venv

        ensure_venv("pgqueuer", ROOT / "bench/requirements-pgqueuer.txt")
    from bench.throughput import scratch_database, setup_django

    url = scratch_database("postgres")
    setup_django(url)
    pgqueuer_url = url + "_pgqueuer"
    results = []
    for round_ in range(args.rounds):
        for system in systems:
            with tempfile.TemporaryDirectory(prefix="jobsite-webhook-") as scratch:
                log_path = Path(scratch) / "requests.log"
                partner, port = start_partner(log_path)
                try:
                    log(f"round {round_ + 1}: {system}, {args.jobs} jobs, {TENANTS} tenants")
                    if system == "jobsite":
                        run_jobsite(counts, port, log_path, timeout)
                    else:
                        run_pgqueuer(
                            counts, port, log_path, timeout, args.pgqueuer_python, pgqueuer_url
                        )
                finally:
                    partner.send_signal(signal.SIGTERM)
                    partner.wait(30)
                results.append(measure(system, log_path, counts))
                if args.keep_logs:
                    kept = Path(args.keep_logs) / f"{system}-{round_ + 1}.log"
                    kept.write_text(log_path.read_text())
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    if sys.argv[1:2] == ["pgqueuer"]:
        pgqueuer_side(sys.argv[2:])
    else:
        main()
