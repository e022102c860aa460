"""Shared by every adapter: the job body, the execution log, scratch databases.

Stdlib (+ psycopg for PostgreSQL admin) only: this module is imported inside each peer's own
virtualenv. Every system runs the same job body, `run_job(i)`, which appends "i t_start" to the
execution log named by BENCH_EXEC_LOG (one O_APPEND write, no database). The harness counts
executions per job id from that log (exactly-once check) and takes the drain rate and the
enqueue-to-start latency from its timestamps, the same way for every system.

BENCH_MODE selects the job's behaviour: "ok" (no-op), "flaky" (the first execution of each job
id raises, later ones succeed: a marker file created with O_EXCL decides, in a directory under
`marks_base()`), "fail" (always raises),
"mixed" (job i sleeps 1, 10 or 100 ms by i % 3, after its start is logged), "await" (the body
is an `async def` task that logs its start, then awaits `await_seconds()`). BENCH_PACE (jobs/s),
when set, makes `latency_loop` enqueue at that steady rate instead of one job after another.
"""

import json
import os
import sys
import time
from pathlib import Path

PG_ADMIN = "postgres://postgres@127.0.0.1:5432/postgres"
IDLE_GAP = (0.010, 0.030)  # seconds between one job's start and the next enqueue (uniform)
MIX = (0.001, 0.010, 0.100)  # the mixed workload's job durations, in turn
TMPFS = "/dev/shm"
_fd = None


class BenchFailure(Exception):
    """Raised by the job body in the retry scenarios."""


def run_job(i):
    global _fd
    if _fd is None:
        _fd = os.open(os.environ["BENCH_EXEC_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, b"%d %.6f\n" % (i, time.time()))
    mode = os.environ.get("BENCH_MODE", "ok")
    if mode in ("ok", "await"):
        return None
    if mode == "mixed":
        time.sleep(MIX[i % len(MIX)])
        return None
    if mode == "flaky":
        try:
            os.close(
                os.open(
                    os.path.join(os.environ["BENCH_MARK_DIR"], str(i)),
                    os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                )
            )
        except FileExistsError:
            return None
        raise BenchFailure(f"job {i} fails on its first execution")
    raise BenchFailure(f"job {i} always fails")


def await_seconds():
    """How long each job of the "await" mode awaits asyncio.sleep (BENCH_AWAIT_MS, 100 ms)."""
    return float(os.environ.get("BENCH_AWAIT_MS") or 100) / 1000


def marks_base():
    """Where the flaky body's marker directories go: tmpfs, where the machine has one.

    Creating a file on a disk file system costs kernel CPU that swings from one directory to
    the next (ext4 here: 20-160 us a file, measured back to back) and was, in some runs, more
    than the rest of a failing attempt; on tmpfs it is ~10 us. The body is the same for every
    system either way, but a retry scenario should measure the systems, not the disk.
    """
    return TMPFS if os.path.isdir(TMPFS) and os.access(TMPFS, os.W_OK) else None


def pg_url(dbname):
    return f"postgres://postgres@127.0.0.1:5432/{dbname}"


def recreate_pg_database(dbname):
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{dbname}"')


def pg_exec(dbname, *statements):
    import psycopg

    with psycopg.connect(pg_url(dbname), autocommit=True) as conn:
        out = None
        for sql in statements:
            cur = conn.execute(sql)
            out = cur.fetchall() if cur.description else None
        return out


def emit(result):
    """Drivers print one JSON line prefixed with RESULT; the harness parses it."""
    print("RESULT " + json.dumps(result), flush=True)


def recreate_database(url):
    """A fresh, empty scratch database for a driver: PostgreSQL by name, or an SQLite file."""
    if url.startswith("postgres"):
        recreate_pg_database(url.rsplit("/", 1)[1])
        return
    path = Path(url.split("sqlite://", 1)[1])
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)


def run_driver(commands):
    """A driver's entry point: run the command named on the command line, print its result."""
    command, opts = argv_options()
    for key in ("n", "start"):
        if key in opts:
            opts[key] = int(opts[key])
    emit(commands[command](**opts))


def argv_options(argv=None):
    """Tiny --key value parser shared by the driver entry points."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command, opts = argv[0], {}
    it = iter(argv[1:])
    for key in it:
        opts[key.lstrip("-").replace("-", "_")] = next(it)
    return command, opts


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def timed_calls(call, ids, cap=None):
    """Call `call(i)` for each id, stopping early once `cap` seconds have passed."""
    cap = float(cap) if cap else None
    start, done = time.perf_counter(), 0
    for i in ids:
        call(i)
        done += 1
        if cap and done % 64 == 0 and time.perf_counter() - start > cap:
            break
    return {"seconds": time.perf_counter() - start, "count": done}


def latency_loop(n, enqueue_one, log_path, timeout=30.0):
    """Enqueue n jobs one after another into an idle worker, each after the previous one
    started (or, with BENCH_PACE set, at that steady rate). Returns the wall-clock enqueue
    timestamps (the harness pairs them with the execution log's start times)."""
    import random

    pace = float(os.environ.get("BENCH_PACE") or 0)
    if pace:
        return paced_loop(n, enqueue_one, log_path, pace, timeout)
    rng = random.Random(0)
    stamps = []
    size = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    for i in range(n):
        time.sleep(rng.uniform(*IDLE_GAP))  # the previous job finishes, the worker goes idle
        t0 = time.time()
        enqueue_one(i)
        stamps.append(t0)
        deadline = time.monotonic() + timeout
        while True:
            new = os.path.getsize(log_path) if os.path.exists(log_path) else 0
            if new > size:
                size = new
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"job {i} was not started within {timeout} s")
            time.sleep(0.0002)
    return stamps


def paced_loop(n, enqueue_one, log_path, pace, timeout=30.0):
    """Enqueue the first job and wait for it to start (the workers are up), then each next one
    at `pace` jobs/s whether or not earlier ones started; wait until all n have started."""
    stamps = [time.time()]
    enqueue_one(0)
    wait_for_starts(1, log_path, timeout)
    begin = time.monotonic()
    for i in range(1, n):
        delay = begin + i / pace - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        stamps.append(time.time())
        enqueue_one(i)
    wait_for_starts(n, log_path, timeout)
    return stamps


def wait_for_starts(n, log_path, timeout):
    deadline = time.monotonic() + timeout
    while started(log_path) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {started(log_path)} of {n} jobs started within {timeout} s")
        time.sleep(0.01)


def started(log_path):
    try:
        with open(log_path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0
