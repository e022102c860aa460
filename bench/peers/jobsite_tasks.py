"""jobsite's benchmark tasks (`manage.py worker` imports them: it runs from the repo root)."""

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
