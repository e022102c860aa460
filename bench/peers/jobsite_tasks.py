"""jobsite's benchmark tasks (`manage.py worker` imports them: it runs from the repo root)."""

import asyncio
import time

import aiohttp
from django.tasks import task

from bench.peers.common import run_job
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


_sessions: dict = {}


def _session():
    """One HTTP client session per event loop (an executor has one), kept for its lifetime."""
    loop = asyncio.get_running_loop()
    session = _sessions.get(loop)
    if session is None:
        connector = aiohttp.TCPConnector(limit=0)  # the worker's slots bound the concurrency
        session = _sessions[loop] = aiohttp.ClientSession(connector=connector)
    return session


@task()
async def http_get(url):
    """An async job that GETs `url` (bench/async_jobs.py --http: a server answering in 100 ms)."""
    async with _session().get(url) as response:
        response.raise_for_status()
        await response.read()
