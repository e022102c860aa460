"""procrastinate's benchmark app: the same job body as every other system."""

import os

from procrastinate import App, PsycopgConnector, RetryStrategy

from bench.peers.common import run_job

app = App(connector=PsycopgConnector(conninfo=os.environ["BENCH_DB_URL"]))


@app.task(name="noop")
def noop(i):
    run_job(i)


# Retry scenarios: 3 attempts in all (max_attempts counts the retries), no wait.
@app.task(name="retried", retry=RetryStrategy(max_attempts=2, wait=0))
def retried(i):
    run_job(i)
