"""How jobsite scales out: 1, 2, 4 and 8 worker processes on one PostgreSQL. PostgreSQL only.

    .venv/bin/python bench/scale_out.py                       # the table in bench/README.md
    .venv/bin/python bench/scale_out.py --workers 1 2 --jobs 1000 --routes direct

For each route (`direct` to PostgreSQL, `pgbouncer`: a PgBouncer this script starts in
transaction mode with --pool-size server sessions), each workload (`noop`: no-op jobs;
`mixed`: 1/10/100 ms jobs in turn, as bench/baseline.py --mixed) and each worker count, a
scratch database (`jobsite_scaleout`) gets --jobs jobs (the mixed workload a fifth of them),
enqueued in bulk, then that many `manage.py worker --burst --concurrency 2` processes drain
them together. Through PgBouncer the workers listen for wake-ups on a direct connection
(OPTIONS["LISTEN_DATABASE_URL"]), as the README advises.

Reported per run:
- jobs/s: jobs / (first attempt's start to last attempt's end); every job checked to have run
  exactly once.
- lock waits: the share of samples (every 50 ms, each backend of the scratch database) that
  found a backend waiting on a lock. Claims skip locked rows (FOR UPDATE SKIP LOCKED) instead
  of waiting, so workers competing for the same rows show up here only where they do wait.
- xacts/job: transactions committed per job, server-wide for the scratch database: the claim,
  finish and heartbeat round trips; claims that come back short or empty because other workers
  took the rows (the claim conflicts of SKIP LOCKED) raise it.
- db CPU ms/job: CPU time (user + system, from /proc) the PostgreSQL backends serving the
  scratch database spent during the drain, summed over every backend seen, per job. The server
  must run on this machine.

Exits non-zero on a failed check. Not part of the test suite.
"""

import argparse
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.throughput import PG_ADMIN, check_exactly_once, log, reset  # noqa: E402

NAME = os.environ.get("BENCH_DB_PREFIX", "") + "jobsite_scaleout"
DIRECT = f"postgres://postgres@127.0.0.1:5432/{NAME}"
MIX_MS = (1, 10, 100)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def scratch_database():
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{NAME}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{NAME}"')


def setup_django():
    os.environ["DATABASE_URL"] = DIRECT
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def start_pgbouncer(pool_size):
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(binary).exists():
        raise SystemExit("no pgbouncer binary (apt-get install pgbouncer), or use --routes direct")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    directory = Path(tempfile.mkdtemp(prefix="jobsite-pgbouncer-"))
    (directory / "users.txt").write_text('"postgres" ""\n')
    (directory / "pgbouncer.ini").write_text(
        "[databases]\n* = host=127.0.0.1 port=5432\n[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {directory}/users.txt\npool_mode = transaction\n"
        f"default_pool_size = {pool_size}\nmax_client_conn = 1000\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
    )
    command = [binary, str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        shutil.chown(directory, "postgres")
        for f in directory.iterdir():
            shutil.chown(f, "postgres")
        command[1:1] = ["-u", "postgres"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process, f"postgres://postgres@127.0.0.1:{port}/{NAME}"
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("pgbouncer did not start")


class DatabaseSampler(threading.Thread):
    """Samples the scratch database's backends: lock waits and CPU time (see the module)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.cpu = {}  # backend pid -> latest CPU seconds seen
        # Backends already there (PgBouncer keeps its server sessions from run to run): only
        # what they spend from now on counts.
        self.before = {pid: cpu_seconds(pid) or 0.0 for pid in backends()}
        self.samples = self.waiting = 0

    def run(self):
        import psycopg

        with psycopg.connect(DIRECT, autocommit=True) as conn:
            while not self.stop.is_set():
                rows = conn.execute(
                    "SELECT pid, wait_event_type = 'Lock' FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    [NAME],
                ).fetchall()
                for pid, waits in rows:
                    self.samples += 1
                    self.waiting += bool(waits)
                    seconds = cpu_seconds(pid)
                    if seconds is not None:
                        self.cpu[pid] = seconds
                time.sleep(0.05)

    def finish(self):
        self.stop.set()
        self.join()
        spent = sum(cpu - self.before.get(pid, 0.0) for pid, cpu in self.cpu.items())
        return spent, self.waiting / max(1, self.samples)


def backends():
    import psycopg

    with psycopg.connect(DIRECT, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [NAME],
        ).fetchall()
    return [pid for (pid,) in rows]


def cpu_seconds(pid):
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def committed():
    import psycopg

    with psycopg.connect(DIRECT, autocommit=True) as conn:
        return conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [NAME]
        ).fetchone()[0]


def run(workers, workload, n, url):
    from django.db import connection

    from bench.peers.jobsite_tasks import sleep_ms
    from jobs.models import Job
    from jobsite.tasks import noop

    reset()
    if workload == "noop":
        noop.enqueue_many([((), {})] * n)
    else:
        sleep_ms.enqueue_many([((MIX_MS[i % 3],), {}) for i in range(n)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    connection.close()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "JOBSITE_LOG_LEVEL": "WARNING",
        "JOBSITE_SCHEDULES": "{}",
        "JOBSITE_LISTEN_DATABASE_URL": DIRECT if url != DIRECT else "",
    }
    xacts = committed()
    sampler = DatabaseSampler()
    sampler.start()
    procs = [
        subprocess.Popen(
            [sys.executable, "manage.py", "worker", "--burst", "--concurrency", "2"],
            cwd=ROOT,
            env=env,
        )
        for _ in range(workers)
    ]
    for proc in procs:
        if proc.wait(timeout=1800) != 0:
            raise SystemExit(f"worker exited with {proc.returncode}")
    cpu, waiting = sampler.finish()
    time.sleep(0.6)  # pg_stat_database is updated about every 500 ms
    xacts = committed() - xacts
    done = Job.objects.filter(state="succeeded").order_by()
    first = done.order_by("started_at").values_list("started_at", flat=True).first()
    last = done.order_by("-finished_at").values_list("finished_at", flat=True).first()
    check_exactly_once(n)
    return n / (last - first).total_seconds(), waiting, xacts / n, cpu * 1000 / n


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--jobs", type=int, default=3000, help="no-op jobs per run (mixed: /5)")
    parser.add_argument("--routes", nargs="+", default=["direct", "pgbouncer"])
    parser.add_argument("--workloads", nargs="+", default=["noop", "mixed"])
    parser.add_argument("--pool-size", type=int, default=10, help="PgBouncer server sessions")
    args = parser.parse_args()

    scratch_database()
    setup_django()
    rows = []
    bouncer = None
    try:
        for route in args.routes:
            url = DIRECT
            if route == "pgbouncer":
                bouncer, url = start_pgbouncer(args.pool_size)
            for workload in args.workloads:
                n = args.jobs if workload == "noop" else max(100, args.jobs // 5)
                for workers in args.workers:
                    rate, waiting, xacts, cpu = run(workers, workload, n, url)
                    row = (route, workload, workers, n, rate, waiting, xacts, cpu)
                    rows.append(row)
                    log(
                        f"{route:9} {workload:5} {workers} workers x 2: {n} jobs, "
                        f"{rate:,.0f} jobs/s, lock waits {waiting:.1%}, "
                        f"{xacts:.2f} xacts/job, db CPU {cpu:.2f} ms/job"
                    )
            if bouncer:
                bouncer.terminate()
                bouncer.wait()
                bouncer = None
    finally:
        if bouncer:
            bouncer.terminate()
    log("")
    log("| route | workload | workers | jobs | jobs/s | lock waits | xacts/job | db CPU ms/job |")
    log("|---|---|---:|---:|---:|---:|---:|---:|")
    for route, workload, workers, n, rate, waiting, xacts, cpu in rows:
        log(
            f"| {route} | {workload} | {workers} | {n} | {rate:,.0f} | {waiting:.1%} "
            f"| {xacts:.2f} | {cpu:.2f} |"
        )


if __name__ == "__main__":
    main()
