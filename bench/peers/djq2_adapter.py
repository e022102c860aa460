"""django-q2 with its ORM broker: `manage.py qcluster` (no burst mode: the harness stops the
cluster once every job has run); async_task() to enqueue (no bulk enqueue API).

Concurrency N = Q_CLUSTER["workers"] = N (worker processes of one cluster). Retries: a task that
raises is not acknowledged (ack_failures False, the default) and the ORM broker hands it out again
once its `retry` lease lapses; `max_attempts` caps the deliveries.
"""

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class Spec:
    name = "django-q2"
    module = "bench.peers.djq2_adapter"
    venv = "django-q2"
    python = str(ROOT / "bench/.peers/django-q2/bin/python")
    burst = False
    bulk = None
    retries = True
    # default: poll 0.2 s, bulk 1, queue_limit workers**2, save_limit 250 (successes saved).
    # fast (its docs: bulk for fewer broker round trips, lower poll; save_limit -1 = no success
    # storage at all).
    configs = {
        "default": {},
        "fast": {"bulk": 50, "poll": 0.01, "queue_limit": 200, "save_limit": -1},
        # fast + persistent database connections (CONN_MAX_AGE = None)
        "fast-persistent": {"bulk": 50, "poll": 0.01, "queue_limit": 200, "save_limit": -1},
    }
    # retry scenarios: the shortest lease the ORM broker accepts (retry > timeout).
    retry_config = {"timeout": 1, "retry": 2, "max_attempts": 3}
    notes = "one `qcluster` with workers=N (ORM broker)"
    stop_grace = 5  # its cluster takes ~25 s to stop on SIGTERM; the jobs are all acked by then
    lease_on_stop = True  # stopped mid-queue, handed-out packages keep their lease

    def __init__(self, db_url):
        self.db_url = db_url

    def env(self, config, concurrency=1, retry=False):
        q = dict(self.configs.get(config, {}), workers=concurrency)
        if retry:
            q.update(self.retry_config)
        env = {
            "BENCH_DB_URL": self.db_url,
            "BENCH_APP": "django_q",
            "DJANGO_SETTINGS_MODULE": "bench.peers.django_settings",
            "BENCH_Q_CLUSTER": json.dumps(q),
        }
        if config == "fast-persistent":
            env["BENCH_CONN_MAX_AGE"] = "none"
        return env

    def worker_cmds(self, config, concurrency, burst):
        return [[self.python, "-m", "django", "qcluster"]]


def _django():
    import django

    django.setup()


def setup():
    from bench.peers.common import recreate_pg_database

    recreate_pg_database(os.environ["BENCH_DB_URL"].rsplit("/", 1)[1])
    _django()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return {}


def reset():
    from bench.peers.common import pg_exec

    pg_exec(os.environ["BENCH_DB_URL"].rsplit("/", 1)[1], "TRUNCATE django_q_ormq, django_q_task")
    return {}


FUNC = "bench.peers.common.run_job"


def enqueue(mode, n, task="noop", start=0, cap=None):
    from bench.peers.common import timed, timed_calls

    _django()
    from django_q.tasks import async_task

    ids = range(start, start + n)
    if mode == "single":
        return timed_calls(lambda i: async_task(FUNC, i), ids, cap)
    if mode == "bulk":
        raise SystemExit("django-q2 has no bulk enqueue API")
    # fill: pre-enqueue for the drain scenarios: async_task() builds and signs each package
    # exactly as usual, a collecting broker keeps them, one bulk_create inserts the OrmQ rows.
    from django.utils import timezone
    from django_q.brokers import get_broker
    from django_q.models import OrmQ

    real = get_broker()

    class Collector:
        list_key = real.list_key
        packs = []

        def enqueue(self, pack):
            self.packs.append(pack)
            return len(self.packs)

    def fill():
        c = Collector()
        for i in ids:
            async_task(FUNC, i, broker=c)
        now = timezone.now()
        OrmQ.objects.bulk_create(
            [OrmQ(key=real.list_key, payload=p, lock=now) for p in c.packs], batch_size=1000
        )

    return {"seconds": timed(fill)}


def latency(n, task="noop"):
    from bench.peers.common import latency_loop

    _django()
    from django_q.tasks import async_task

    return {"stamps": latency_loop(n, lambda i: async_task(FUNC, i), os.environ["BENCH_EXEC_LOG"])}


def check():
    from bench.peers.common import pg_exec

    db = os.environ["BENCH_DB_URL"].rsplit("/", 1)[1]
    ((queued,),) = pg_exec(db, "SELECT count(*) FROM django_q_ormq WHERE lock <= now()")
    ((leased,),) = pg_exec(db, "SELECT count(*) FROM django_q_ormq WHERE lock > now()")
    ((ok,),) = pg_exec(db, "SELECT count(*) FROM django_q_task WHERE success")
    ((failed,),) = pg_exec(db, "SELECT count(*) FROM django_q_task WHERE NOT success")
    # A package handed out but not acknowledged keeps its lease (lock in the future) until
    # `retry` seconds pass: that is django-q2's "running".
    return {
        "states": {"queued": queued, "leased": leased, "saved_success": ok, "saved_failed": failed},
        "in_progress": leased,
        "pending": queued,
    }


def main():
    from bench.peers.common import run_driver

    run_driver(globals())


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
