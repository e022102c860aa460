"""jobsite's benchmark tasks (`manage.py worker` imports them: it runs from the repo root)."""

import asyncio
import time

from django.tasks import task

from bench.peers.common import await_seconds, run_job
from jobs.retry import Fixed


@task()
def noop(i):
    run_job(i)


# Retry scenarios: 3 attempts, the smallest backoff jobsite allows (no delay, no jitter).
@task(max_attempts=3, backoff=Fixed(0))
def retried(i):
    run_job(i)


@task()
def sleep_ms(ms):
    """A job that takes `ms` milliseconds of wall time (the mixed workload of bench/baseline.py)."""
    time.sleep(ms / 1000)


@task()
async def await_ms(ms):
    """An async job that awaits `ms` milliseconds (bench/async_jobs.py)."""
    await asyncio.sleep(ms / 1000)


@task()
async def awaiting(i):
    """The side-by-side "await" body: log the start, then await (bench/peers/common.py)."""
    run_job(i)
    await asyncio.sleep(await_seconds())
