"""Tasks the tests enqueue; the worker subprocess imports them from here."""

import os
import time
from pathlib import Path

from django.tasks import task

from jobs.errors import Unrecoverable
from jobs.retry import Fixed, NoRetry

NO_WAIT = Fixed(0)


def _ledger(name):
    """Append a line to the file named by $JOBSITE_TEST_LEDGER (one line per execution)."""
    path = os.environ.get("JOBSITE_TEST_LEDGER")
    if path:
        with Path(path).open("a") as f:
            f.write(f"{name} {os.getpid()} {time.time()}\n")


@task(backoff=NO_WAIT)
def add(a, b):
    return a + b


@task(backoff=NO_WAIT)
def record(key):
    _ledger(key)
    return key


@task(backoff=NO_WAIT, takes_context=True)
def flaky(context, key):
    _ledger(key)
    if context.attempt < 2:
        raise ConnectionError(f"attempt {context.attempt} of {key} failed")
    return {"key": key, "attempt": context.attempt}


@task(backoff=NO_WAIT, max_attempts=3, takes_context=True)
def always_fails(context, key):
    _ledger(key)
    raise ValueError(f"{key} failed on attempt {context.attempt}")


@task(backoff=NO_WAIT, max_attempts=5)
def gives_up(key):
    _ledger(key)
    raise Unrecoverable(f"{key} cannot succeed")


@task(backoff=NoRetry())
def fails_once_no_retry(key):
    raise RuntimeError(key)


@task(backoff=NO_WAIT)
def sleepy(seconds, key=""):
    time.sleep(seconds)
    _ledger(key or f"sleepy-{seconds}")
    return seconds


@task(backoff=NO_WAIT, max_attempts=2, timeout=1)
def ignores_timeout(key):
    _ledger(key)
    while True:  # a CPU loop that never yields
        pass


@task(backoff=NO_WAIT)
def returns_object():
    return object()


@task(backoff=NO_WAIT)
def echo(*args, **kwargs):
    return {"args": list(args), "kwargs": kwargs}
