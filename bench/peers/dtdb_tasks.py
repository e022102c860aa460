from django.tasks import task

from bench.peers.common import run_job


@task()
def noop(i):
    run_job(i)
