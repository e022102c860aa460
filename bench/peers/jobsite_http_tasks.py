"""jobsite's HTTP benchmark task (bench/async_jobs.py): apart from the others, so that only
the executors that run it import the HTTP client."""

import asyncio

import aiohttp
from django.tasks import task

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
    """An async job that GETs `url` (bench/async_jobs.py: a local server answering in 100 ms)."""
    async with _session().get(url) as response:
        response.raise_for_status()
        await response.read()
