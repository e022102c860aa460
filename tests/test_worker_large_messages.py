"""Jobs with large arguments and return values, queued behind short ones, through a real worker.

The worker writes jobs into its executors' pipes while the executors write outcomes back: with
messages bigger than a pipe's buffer, neither side may wait for the other.
"""

import pytest

from jobs import payload
from jobs.models import Job
from jobs.states import JobState
from tests import tasks

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def drain(run_worker, *args):
    proc = run_worker(*args, timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def enqueue_short_then_large(short, large, size):
    for n in range(short):
        tasks.echo.enqueue(n)
    body = "x" * size
    return [tasks.echo.enqueue(body, n).id for n in range(large)]


def test_large_jobs_behind_short_ones_drain_at_concurrency_1(run_worker):
    large = enqueue_short_then_large(30, 20, 70_000)
    drain(run_worker, "--concurrency", "1")
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.SUCCEEDED}
    assert Job.objects.count() == 50
    job = Job.objects.get(id=large[-1])
    assert job.return_value == {"args": ["x" * 70_000, 19], "kwargs": {}}


def test_300_kb_jobs_behind_short_ones_drain_at_concurrency_4(run_worker):
    enqueue_short_then_large(40, 40, 300_000)
    drain(run_worker, "--concurrency", "4")
    assert Job.objects.filter(state=JobState.SUCCEEDED).count() == 80
    assert not Job.objects.exclude(state=JobState.SUCCEEDED).exists()


def test_a_return_value_over_the_size_limit_dead_letters_with_a_clear_error(run_worker):
    over = tasks.returns_text.enqueue(payload.MAX_BYTES)
    within = tasks.returns_text.enqueue(payload.MAX_BYTES - 2)  # the quotes count
    drain(run_worker)
    job = Job.objects.get(id=over.id)
    assert (job.state, job.dead_letter_reason, job.attempt) == ("dead_letter", "unrecoverable", 1)
    assert job.error_type == "ResultTooLarge"
    assert "over the limit of 1,048,576" in job.error_message
    assert job.return_value is None
    assert len(Job.objects.get(id=within.id).return_value) == payload.MAX_BYTES - 2
