"""jobsite: `manage.py worker --burst --concurrency N`, enqueue() / enqueue_many()."""

import os
import secrets
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH_SECRET_KEY = secrets.token_urlsafe(50)


class Spec:
    name = "jobsite"
    module = "bench.peers.jobsite_adapter"
    python = str(ROOT / ".venv/bin/python")
    venv = None  # the project's own venv
    burst = True
    bulk = "enqueue_many"
    retries = True
    # "async": N coroutines in flight, as --concurrency 2 --async-concurrency N/2.
    configs = {"default": {}, "async": {"executors": 2}}
    notes = "manage.py worker --burst --concurrency N (one process); JOBSITE_LOG_LEVEL=WARNING"

    def __init__(self, db_url):
        self.db_url = db_url
        # BENCH_JOBSITE_SRC: run jobsite from a snapshot (run_all.py --jobsite-ref), so that
        # edits to the working tree during a long run do not change what is measured.
        self.cwd = Path(os.environ.get("BENCH_JOBSITE_SRC") or ROOT)

    def env(self, config, concurrency=1, retry=False):
        return {
            "DATABASE_URL": self.db_url,
            "DJANGO_SETTINGS_MODULE": "jobsite.settings",
            # The settings refuse to start without one; a measurement needs no lasting key.
            "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or BENCH_SECRET_KEY,
            "JOBSITE_LOG_LEVEL": "WARNING",
            "JOBSITE_SCHEDULES": "{}",  # no demo schedules firing during a measurement
        }

    def worker_cmds(self, config, concurrency, burst):
        executors = self.configs[config].get("executors")
        cmd = [self.python, "manage.py", "worker", "--concurrency", str(executors or concurrency)]
        if executors:  # concurrency = coroutines in flight, spread over the executors
            cmd += ["--async-concurrency", str(max(1, concurrency // executors))]
        return [cmd + (["--burst"] if burst else [])]


# ---- driver (runs in the system's own venv) ----


def _django():
    import django

    django.setup()


def setup():
    from bench.peers.common import recreate_database

    recreate_database(os.environ["DATABASE_URL"])
    _django()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return {}


def reset():
    _django()
    from django.db import connection

    tables = ["jobs_attempt", "jobs_auditentry", "jobs_job", "jobs_counterdelta", "jobs_workernode"]
    existing = set(connection.introspection.table_names())
    tables = [t for t in tables if t in existing]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"TRUNCATE {', '.join(tables)} CASCADE")
        else:
            for table in tables:
                cursor.execute(f"DELETE FROM {table}")
    return {}


def _task(name):
    from bench.peers import jobsite_tasks

    return getattr(jobsite_tasks, name)


def enqueue(mode, n, task="noop", start=0, cap=None):
    from bench.peers.common import timed, timed_calls

    _django()
    t = _task(task)
    ids = range(start, start + n)
    if mode == "single":
        return timed_calls(lambda i: t.enqueue(i), ids, cap)
    return {"seconds": timed(lambda: t.enqueue_many([((i,), {}) for i in ids]))}


def latency(n, task="noop"):
    from bench.peers.common import latency_loop

    _django()
    t = _task(task)
    return {"stamps": latency_loop(n, lambda i: t.enqueue(i), os.environ["BENCH_EXEC_LOG"])}


def check():
    _django()
    from django.db.models import Count

    from jobs.models import Job

    states = dict(Job.objects.values_list("state").annotate(n=Count("id")).order_by())
    return {
        "states": states,
        "in_progress": states.get("running", 0),
        "pending": states.get("pending", 0) + states.get("retrying", 0),
    }


def main():
    from bench.peers.common import run_driver

    run_driver(globals())


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
