"""`manage.py enqueue`: one job from the command line, or a clear error and nothing stored."""

import uuid
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from jobs.models import Job
from jobs.states import JobState

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.django_db


def enqueue(*args):
    out = StringIO()
    call_command("enqueue", *args, stdout=out)
    lines = out.getvalue().splitlines()
    return Job.objects.get(id=uuid.UUID(lines[-1])), lines


def test_prints_the_job_id_alone_on_the_last_line():
    job, lines = enqueue("tests.tasks.add", "2", "3")

    assert lines[-1] == str(job.id)
    assert job.task_path == "tests.tasks.add"
    assert job.state == JobState.PENDING


def test_arguments_are_json_when_they_parse_and_text_otherwise():
    job, _ = enqueue(
        "tests.tasks.echo", "42", "1.5", "true", "null", "[1, 2]", '{"a": 1}', "hello", '"42"'
    )

    assert job.args == [42, 1.5, True, None, [1, 2], {"a": 1}, "hello", "42"]


def test_kwargs_queue_priority_and_max_attempts_are_stored():
    job, _ = enqueue(
        "tests.tasks.echo",
        "--kwargs",
        '{"user_id": 7, "name": "Ada"}',
        "--queue",
        "emails",
        "--priority",
        "10",
        "--max-attempts",
        "5",
    )

    assert job.kwargs == {"user_id": 7, "name": "Ada"}
    assert (job.queue_name, job.priority, job.max_attempts) == ("emails", 10, 5)


def test_run_after_takes_a_delay_relative_to_now():
    before = timezone.now()
    job, _ = enqueue("tests.tasks.add", "1", "2", "--run-after", "+5m")

    assert before + timedelta(minutes=5) <= job.run_after <= timezone.now() + timedelta(minutes=5)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("2031-01-31T09:30:00+02:00", datetime(2031, 1, 31, 7, 30, tzinfo=UTC)),
        # Naive times are in the project's TIME_ZONE (UTC in the demo settings).
        ("2031-01-31 09:30", datetime(2031, 1, 31, 9, 30, tzinfo=UTC)),
    ],
)
def test_run_after_takes_an_iso_8601_time(given, expected):
    job, _ = enqueue("tests.tasks.add", "1", "2", "--run-after", given)

    assert job.run_after == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tests.tasks.no_such_task"], "unknown task"),
        (["no.such.module.task"], "unknown task"),
        (["tests.tasks.NO_WAIT"], "not a task"),
        (["tests.tasks.echo", "NaN"], "not enqueued"),
        (["tests.tasks.echo", "--queue", "x" * 101], "not enqueued"),
        (["tests.tasks.echo", "--run-after", "9999-12-31T23:59:59-14:00"], "out of range"),
        (["tests.tasks.echo", "--run-after", "0001-01-01T00:00:00+14:00"], "out of range"),
        (["tests.tasks.echo", "--run-after", "9999-12-31T00:00:00"], "out of range"),
    ],
)
def test_a_task_or_value_that_cannot_be_enqueued_is_an_error_with_exit_code_2(args, message):
    with pytest.raises(CommandError, match=message) as raised:
        call_command("enqueue", *args, stdout=StringIO())

    assert raised.value.returncode == 2
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--kwargs", "{not json"],
        ["--kwargs", "[1, 2]"],
        ["--run-after", "tomorrow-ish"],
        ["--run-after", "+5y"],
        ["--run-after", "+3000000d"],
        ["--run-after", "+1" + "0" * 400 + "s"],
        ["--priority", "1000"],
        ["--max-attempts", "0"],
        ["1" * 5000],
    ],
)
def test_bad_options_are_refused_before_anything_is_stored(args):
    with pytest.raises(CommandError, match="Error: argument"):
        call_command("enqueue", "tests.tasks.echo", *args, stdout=StringIO())

    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_from_a_shell_an_unknown_task_exits_2_with_the_reason(manage):
    proc = manage("enqueue", "tests.tasks.nope", "1")

    assert proc.returncode == 2
    assert "unknown task 'tests.tasks.nope'" in proc.stderr
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_from_a_shell_bad_kwargs_exit_2(manage):
    proc = manage("enqueue", "tests.tasks.echo", "--kwargs", "{oops")

    assert proc.returncode == 2
    assert "--kwargs is not valid JSON" in proc.stderr
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_an_enqueued_job_runs_through_the_worker(manage, run_worker):
    proc = manage("enqueue", "tests.tasks.add", "20", "22", check=True)
    job_id = proc.stdout.splitlines()[-1]

    assert run_worker().returncode == 0

    job = Job.objects.get(id=job_id)
    assert job.state == JobState.SUCCEEDED
    assert job.return_value == 42


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("when", ["+3000000d", "9999-12-31T23:59:59-14:00"])
def test_from_a_shell_a_time_out_of_range_is_one_error_line_and_exit_2(manage, when):
    proc = manage("enqueue", "tests.tasks.echo", "--run-after", when)

    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "rror" in line]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not Job.objects.exists()
