"""procrastinate's benchmark app: the same job body as every other system."""

import asyncio
import os

from procrastinate import App, PsycopgConnector, RetryStrategy

from bench.peers.common import await_seconds, run_job

app = App(connector=PsycopgConnector(conninfo=os.environ["BENCH_DB_URL"]))


@app.task(name="noop")
def noop(i):
    run_job(i)


# Retry scenarios: 3 attempts in all (max_attempts counts the retries), no wait.
@app.task(name="retried", retry=RetryStrategy(max_attempts=2, wait=0))
def retried(i):
    run_job(i)


@app.task(name="awaiting")
async def awaiting(i):
    """The "await" body: log the start, then await (async tasks run on the worker's loop)."""
    run_job(i)
    await asyncio.sleep(await_seconds())
