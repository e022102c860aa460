"""django-tasks-db: Django's tasks ORM database backend. `manage.py db_worker --batch`.

No retries (a failed task is final) and no bulk enqueue API; concurrency means N worker
processes (a db_worker runs one task at a time).
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class Spec:
    name = "django-tasks-db"
    module = "bench.peers.dtdb_adapter"
    venv = "django-tasks-db"
    python = str(ROOT / "bench/.peers/django-tasks-db/bin/python")
    burst = True
    bulk = None
    retries = False
    # default: --interval 1 (poll once a second when idle) and a random start-up delay;
    # fast: poll every 10 ms, no start-up delay.
    # persistent: fast + persistent database connections (CONN_MAX_AGE = None).
    configs = {
        "default": {"args": []},
        "fast": {"args": ["--interval", "0.01", "--no-startup-delay"]},
        "fast-persistent": {"args": ["--interval", "0.01", "--no-startup-delay"]},
    }
    notes = "N x `db_worker --batch --queue-name '*' --verbosity 0` processes"

    def __init__(self, db_url):
        self.db_url = db_url

    def env(self, config, concurrency=1, retry=False):
        env = {
            "BENCH_DB_URL": self.db_url,
            "BENCH_APP": "django_tasks_db",
            "DJANGO_SETTINGS_MODULE": "bench.peers.django_settings",
        }
        if config == "fast-persistent":
            env["BENCH_CONN_MAX_AGE"] = "none"
        if self.db_url.startswith("sqlite") and config in ("fast", "fast-persistent"):
            env["BENCH_SQLITE_OPTIONS"] = (
                '{"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL", '
                '"transaction_mode": "IMMEDIATE"}'
            )
        return env

    def worker_cmds(self, config, concurrency, burst):
        cmd = [
            self.python,
            "-m",
            "django",
            "db_worker",
            "--queue-name",
            "*",
            "--verbosity",
            "0",
            "--no-reload",
            *self.configs[config]["args"],
        ]
        if burst:
            cmd.append("--batch")
        return [list(cmd) for _ in range(concurrency)]


def _django():
    import django

    django.setup()


def setup():
    from bench.peers.common import recreate_database

    recreate_database(os.environ["BENCH_DB_URL"])
    _django()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return {}


def reset():
    _django()
    from django_tasks_db.models import DBTaskResult

    DBTaskResult.objects.all().delete()
    return {}


def enqueue(mode, n, task="noop", start=0, cap=None):
    from bench.peers import dtdb_tasks
    from bench.peers.common import timed, timed_calls

    _django()
    t = getattr(dtdb_tasks, task)
    ids = range(start, start + n)
    if mode == "single":
        return timed_calls(lambda i: t.enqueue(i), ids, cap)
    if mode == "bulk":
        raise SystemExit("django-tasks-db has no bulk enqueue API")
    # fill: pre-enqueue for the drain scenarios: the same rows enqueue() writes (see
    # DatabaseBackend._task_to_db_task), inserted with bulk_create (not a public API).
    from django.tasks import task_backends
    from django_tasks_db.compat import normalize_json
    from django_tasks_db.models import DBTaskResult, get_date_max

    backend = task_backends["default"]

    def fill():
        rows = [
            DBTaskResult(
                id=backend._get_id(),
                args_kwargs=normalize_json({"args": [i], "kwargs": {}}),
                priority=t.priority,
                task_path=t.module_path,
                queue_name=t.queue_name,
                run_after=t.run_after or get_date_max(),
                backend_name=backend.alias,
            )
            for i in ids
        ]
        DBTaskResult.objects.bulk_create(rows, batch_size=1000)

    return {"seconds": timed(fill)}


def latency(n, task="noop"):
    from bench.peers import dtdb_tasks
    from bench.peers.common import latency_loop

    _django()
    t = getattr(dtdb_tasks, task)
    return {"stamps": latency_loop(n, lambda i: t.enqueue(i), os.environ["BENCH_EXEC_LOG"])}


def check():
    _django()
    from django.db.models import Count
    from django_tasks_db.models import DBTaskResult

    states = dict(DBTaskResult.objects.values_list("status").annotate(n=Count("id")).order_by())
    return {
        "states": states,
        "in_progress": states.get("RUNNING", 0),
        "pending": states.get("READY", 0),
    }


def main():
    from bench.peers.common import run_driver

    run_driver(globals())


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
