"""Sentry with the real SDK: a real worker subprocess sends through a transport that records
each envelope to a file (tests.telemetry)."""

import json
import subprocess
import sys

import pytest

from tests import tasks
from tests.conftest import ROOT
from tests.telemetry import read_lines

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def sentry_worker(subprocess_env, tmp_path):
    """Run a worker with sentry_sdk initialised; returns (process, recorded envelope items)."""
    recorded = tmp_path / "sentry.jsonl"

    def run(*args, capture="dead_letter", schedules=None):
        env = {
            **subprocess_env,
            "DJANGO_SETTINGS_MODULE": "tests.telemetry_settings",
            "JOBSITE_TEST_SENTRY": str(recorded),
            "JOBSITE_TEST_SENTRY_CAPTURE": capture,
        }
        if schedules:
            env["JOBSITE_TEST_SCHEDULES"] = json.dumps(schedules)
        proc = subprocess.run(
            [sys.executable, "manage.py", "worker", *(args or ["--burst"])],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return proc, read_lines(recorded)

    return run


def events(items):
    return [i["payload"] for i in items if i["type"] == "event"]


def test_a_dead_letter_reaches_sentry_once_with_its_tags(sentry_worker):
    job_id = tasks.always_fails.enqueue("to-sentry").id
    proc, items = sentry_worker()
    assert proc.returncode == 0, proc.stderr[-3000:]
    [event] = events(items)
    assert event["tags"] == {
        "job_id": job_id,
        "task": "tests.tasks.always_fails",
        "queue": "default",
        "attempt": "3",
    }
    [exception] = event["exception"]["values"]
    assert (exception["type"], exception["value"]) == (
        "ValueError",
        "to-sentry failed on attempt 3",
    )
    assert "Traceback" in event["extra"]["traceback"]


def test_every_failure_sends_each_failed_attempt_and_nothing_for_successes(sentry_worker):
    job_id = tasks.flaky.enqueue("to-sentry-flaky").id
    tasks.add.enqueue(1, 1)
    proc, items = sentry_worker(capture="every_failure")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [event] = events(items)
    assert (event["tags"]["job_id"], event["tags"]["attempt"]) == (job_id, "1")
    assert event["exception"]["values"][0]["type"] == "ConnectionError"


def test_a_schedule_fire_sends_a_check_in_named_after_the_schedule(sentry_worker):
    schedules = {"sentry-tick": {"task": "tests.tasks.add", "every": 1, "args": [1, 2]}}
    proc, items = sentry_worker("--max-jobs", "1", schedules=schedules)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_ins = [i["payload"] for i in items if i["type"] == "check_in"]
    assert check_ins and check_ins[0]["monitor_slug"] == "sentry-tick"
    assert check_ins[0]["status"] == "ok"


def test_an_unknown_capture_mode_stops_the_worker_saying_what_is_allowed(sentry_worker):
    proc, items = sentry_worker(capture="sometimes")
    assert proc.returncode != 0 and items == []
    assert "SENTRY_CAPTURE must be one of ('dead_letter', 'every_failure')" in proc.stderr


def test_an_unknown_capture_mode_is_a_check_error():
    from django.conf import settings
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError
    from django.test import override_settings

    from jobs.checks import check_sentry_capture

    config = settings.TASKS["default"]
    options = {**config["OPTIONS"], "SENTRY_CAPTURE": "sometimes"}
    with override_settings(TASKS={"default": {**config, "OPTIONS": options}}):
        [error] = check_sentry_capture()
        assert error.id == "jobs.E004" and "SENTRY_CAPTURE must be one of" in error.msg
        with pytest.raises(SystemCheckError, match="SENTRY_CAPTURE"):
            call_command("check")


def test_a_job_dead_lettered_by_lease_recovery_reaches_sentry_too(sentry_worker):
    from datetime import timedelta

    from django.utils import timezone

    from jobs.models import Job
    from jobs.states import JobState
    from tests.factories import make_job

    past = timezone.now() - timedelta(minutes=5)
    lost = make_job(
        JobState.RUNNING, task_path="tests.tasks.add", max_attempts=1, lease_expires_at=past
    )
    proc, items = sentry_worker()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert Job.objects.get(id=lost.id).state == JobState.DEAD_LETTER
    [event] = events(items)
    assert event["tags"]["job_id"] == str(lost.id)
    assert event["exception"]["values"][0]["type"] == "WorkerLost"
