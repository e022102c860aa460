"""I/O-bound jobs: `async def` jobs as coroutines against sync jobs in processes.

    .venv/bin/python bench/async_jobs.py                     # PostgreSQL, the figures of the README
    .venv/bin/python bench/async_jobs.py --db sqlite --jobs 2000 --sync-jobs 500

Every job waits `--ms` milliseconds (100): the async path awaits asyncio.sleep, then (second
variant) makes a real HTTP GET with aiohttp to a local server answering in `--ms`
(bench/slow_http.py), in a worker of `--concurrency 2 --async-concurrency 100`; the process
path sleeps in a sync job under `--concurrency 8, 32, 64`. Each drain is one burst worker over
pre-enqueued jobs; the rate runs from the first start to the last finish, and the memory is the
highest PSS of the worker and every process it started, sampled through the drain. Every drain
checks that each job ran exactly once and none is left running. Not part of the test suite:
numbers go to bench/README.md.
"""

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.baseline import _memory_kb  # noqa: E402
from bench.throughput import (  # noqa: E402
    check_exactly_once,
    log,
    reset,
    scratch_database,
    setup_django,
    worker_env,
)


def descendants(pid) -> list[int]:
    """Every process below `pid`, from one pass over /proc (no subprocess per sample)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def drain(url, task, n, argument, *worker_args):
    """(jobs/s, highest PSS in MB) of one burst worker over n jobs of `task(argument)`."""
    from jobs.models import Job

    reset()
    task.enqueue_many([((argument,), {})] * n)
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "worker", "--burst", *worker_args],
        cwd=ROOT,
        env=worker_env(url),
    )
    peak = [0.0]

    def sample():
        while proc.poll() is None:
            total = 0
            for pid in [proc.pid, *descendants(proc.pid)]:
                try:
                    total += _memory_kb(pid)[0]
                except OSError:
                    pass  # an executor that ended meanwhile
            peak[0] = max(peak[0], total / 1024)
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    if proc.wait(timeout=1800) != 0:
        raise SystemExit(f"worker exited with {proc.returncode}")
    sampler.join()
    done = Job.objects.filter(state="succeeded").order_by()
    first = done.order_by("started_at").values_list("started_at", flat=True).first()
    last = done.order_by("-finished_at").values_list("finished_at", flat=True).first()
    check_exactly_once(n)
    return n / (last - first).total_seconds(), peak[0]


def http_server(port, ms):
    """bench/slow_http.py in a process of its own, once it answers."""
    import urllib.request

    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "slow_http.py"), "--port", str(port), "--ms", str(ms)]
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read()
            return proc
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit("the local HTTP server did not start") from None
            time.sleep(0.2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--jobs", type=int, default=10_000, help="async jobs (10,000)")
    parser.add_argument("--sync-jobs", type=int, default=2_000, help="jobs per sync drain")
    parser.add_argument("--ms", type=int, default=100)
    parser.add_argument("--async-concurrency", type=int, default=100)
    parser.add_argument("--sync-concurrency", type=int, nargs="*", default=[8, 32, 64])
    parser.add_argument("--no-http", action="store_true", help="leave out the HTTP variant")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    url = scratch_database(args.db)
    setup_django(url)
    from bench.peers.jobsite_http_tasks import http_get
    from bench.peers.jobsite_tasks import await_ms, sleep_ms

    log(f"== {args.db}: every job waits {args.ms} ms")
    coroutines = ("--concurrency", "2", "--async-concurrency", str(args.async_concurrency))
    rate, pss = drain(url, await_ms, args.jobs, args.ms, *coroutines)
    log(
        f"async def awaiting asyncio.sleep, {' '.join(coroutines)}: "
        f"{args.jobs} jobs, {rate:,.0f} jobs/s, PSS {pss:,.0f} MB"
    )
    if not args.no_http:
        server = http_server(args.port, args.ms)
        try:
            page = f"http://127.0.0.1:{args.port}/"
            rate, pss = drain(url, http_get, args.jobs, page, *coroutines)
        finally:
            server.terminate()
            server.wait(30)
        log(
            f"async def making an HTTP GET (aiohttp), {' '.join(coroutines)}: "
            f"{args.jobs} jobs, {rate:,.0f} jobs/s, PSS {pss:,.0f} MB"
        )
    for concurrency in args.sync_concurrency:
        rate, pss = drain(url, sleep_ms, args.sync_jobs, args.ms, "--concurrency", str(concurrency))
        log(
            f"sync def, --concurrency {concurrency}: {args.sync_jobs} jobs, "
            f"{rate:,.0f} jobs/s, PSS {pss:,.0f} MB"
        )


if __name__ == "__main__":
    main()
