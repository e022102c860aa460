"""procrastinate: App.run_worker(concurrency=N, wait=False) for burst; defer() / batch_defer().

Its documented speed knob is the worker's `concurrency` (default 1): the concurrency axis
(1, 2, 4) is both its default and its fastest setting. LISTEN/NOTIFY is on by default.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class Spec:
    name = "procrastinate"
    module = "bench.peers.procrastinate_adapter"
    venv = "procrastinate"
    python = str(ROOT / "bench/.peers/procrastinate/bin/python")
    burst = True
    bulk = "batch_defer"
    retries = True
    configs = {"default": {}}
    notes = "one process, App.run_worker(concurrency=N, wait=False); sync tasks run in threads"

    def __init__(self, db_url):
        self.db_url = db_url

    def env(self, config, concurrency=1, retry=False):
        return {"BENCH_DB_URL": self.db_url}

    def worker_cmds(self, config, concurrency, burst):
        return [
            [
                self.python,
                "-m",
                self.module,
                "worker",
                "--concurrency",
                str(concurrency),
                "--burst",
                "1" if burst else "0",
            ]
        ]


def _app():
    from bench.peers.procrastinate_app import app

    return app


def setup():
    from bench.peers.common import recreate_pg_database

    recreate_pg_database(os.environ["BENCH_DB_URL"].rsplit("/", 1)[1])
    app = _app()
    with app.open():
        app.schema_manager.apply_schema()
    return {}


def reset():
    from bench.peers.common import pg_exec

    pg_exec(
        os.environ["BENCH_DB_URL"].rsplit("/", 1)[1],
        "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_periodic_defers,"
        " procrastinate_workers CASCADE",
    )
    return {}


def enqueue(mode, n, task="noop", start=0, cap=None):
    from bench.peers import procrastinate_app
    from bench.peers.common import timed, timed_calls

    app = _app()
    t = getattr(procrastinate_app, task)
    ids = range(start, start + n)
    with app.open():
        if mode == "single":
            return timed_calls(lambda i: t.defer(i=i), ids, cap)

        def bulk():
            for s in range(0, n, 10_000):
                t.batch_defer(*[{"i": i} for i in ids[s : s + 10_000]])

        return {"seconds": timed(bulk)}


def latency(n, task="noop"):
    from bench.peers import procrastinate_app
    from bench.peers.common import latency_loop

    app = _app()
    t = getattr(procrastinate_app, task)
    with app.open():
        stamps = latency_loop(n, lambda i: t.defer(i=i), os.environ["BENCH_EXEC_LOG"])
    return {"stamps": stamps}


def check():
    from bench.peers.common import pg_exec

    rows = pg_exec(
        os.environ["BENCH_DB_URL"].rsplit("/", 1)[1],
        "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1",
    )
    states = dict(rows)
    return {
        "states": states,
        "in_progress": states.get("doing", 0),
        "pending": states.get("todo", 0),
    }


def worker(concurrency, burst):
    import logging

    logging.basicConfig(level=logging.WARNING)
    app = _app()
    with app.open():
        app.run_worker(concurrency=int(concurrency), wait=burst == "0")
    return {}


def main():
    from bench.peers.common import run_driver

    run_driver(globals())


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
