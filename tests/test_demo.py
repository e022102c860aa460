"""`manage.py demo` seeds a living system: history, work due later, a long run, a flaky retry."""

import signal
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from jobs.models import Job
from jobs.states import DeadLetterReason, JobState
from tests.reliability_helpers import wait_for


@pytest.fixture
def seed(settings, tmp_path):
    settings.BASE_DIR = tmp_path  # the generated login is kept under BASE_DIR/.demo/

    def run():
        out = StringIO()
        call_command("demo", "--url", "http://127.0.0.1:8000/", stdout=out)
        return out.getvalue()

    return run


@pytest.mark.django_db
def test_seeds_history_and_work_still_to_come(seed):
    out = seed()

    now = timezone.now()
    assert "Login:   admin / " in out
    assert Job.objects.filter(
        state=JobState.DEAD_LETTER, dead_letter_reason=DeadLetterReason.UNRECOVERABLE
    ).exists()
    assert Job.objects.filter(rerun_of__isnull=False).exists()
    assert Job.objects.filter(state=JobState.SCHEDULED, parent__isnull=False).exists()
    assert Job.objects.filter(state=JobState.PENDING, run_after__gt=now).count() >= 4
    assert Job.objects.filter(task_path="jobsite.tasks.import_catalogue").exists()
    assert Job.objects.filter(task_path="jobsite.tasks.sync_inventory").exists()


@pytest.mark.django_db
def test_seeding_again_without_again_adds_no_jobs(seed):
    seed()
    count = Job.objects.count()

    out = seed()

    assert "no demo jobs added" in out
    assert Job.objects.count() == count


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_with_a_worker_the_import_keeps_running_and_the_sync_keeps_retrying(seed, start_worker):
    seed()
    worker = start_worker("--concurrency", "4", "--shutdown-timeout", "1")

    def living():
        states = dict(
            Job.objects.filter(
                task_path__in=["jobsite.tasks.import_catalogue", "jobsite.tasks.sync_inventory"]
            ).values_list("task_path", "state")
        )
        return states == {
            "jobsite.tasks.import_catalogue": JobState.RUNNING,
            "jobsite.tasks.sync_inventory": JobState.RETRYING,
        }

    try:
        wait_for(living, timeout=150, what="the import running and the sync retrying")
        assert Job.objects.filter(state=JobState.PENDING, run_after__gt=timezone.now()).exists()
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
