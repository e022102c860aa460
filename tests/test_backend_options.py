"""jobs.backend_options: a backend's plain OPTIONS, each bad one a check error and a worker's
refusal, never a traceback in every process that touches the backend."""

import re
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from jobs import outcome, retry
from jobs.backend_options import DEFAULT_ASYNC_CONCURRENCY
from jobs.checks import check_plain_options, check_timing, database_problems
from jobs.compat import task, task_backends
from jobs.db import Claimed
from jobs.models import Job
from jobs.timing import Timing
from tests import tasks


@task()
def no_backoff_of_its_own():
    pass


README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def with_options(**options):
    config = settings.TASKS["default"]
    return override_settings(
        TASKS={"default": {**config, "OPTIONS": {**config.get("OPTIONS", {}), **options}}}
    )


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"BACKOFF": {"strategy": "bogus"}}, "BACKOFF strategy 'bogus' is unknown"),
        ({"BACKOFF": {"strategy": "exponential"}}, "missing 1 required positional argument"),
        ({"BACKOFF": {"strategy": "exponential", "base": 15, "jitter": -3}}, "jitter must be"),
        ({"BACKOFF": {"strategy": "fixed", "delay": 5, "bogus": 1}}, "unexpected keyword"),
        ({"BACKOFF": "exponential"}, "BACKOFF must be a dict such as"),
        ({"BACKOFF": {"strategy": "fixed", "delay": None}}, "delay must be a finite number"),
        ({"BACKOFF": {"strategy": "linear", "base": 1, "step": None}}, "step must be a finite"),
        ({"BACKOFF": {"strategy": "exponential", "base": 1, "multiplier": None}}, "multiplier"),
        ({"BACKOFF": {"strategy": None}}, "BACKOFF strategy must be one of"),
        ({"EAGER": "0"}, "EAGER must be True or False, not '0'"),
        ({"SENTRY_CRONS": "false"}, "SENTRY_CRONS must be True or False, not 'false'"),
        ({"LISTEN_DATABASE_URL": "not a url"}, "LISTEN_DATABASE_URL is not a PostgreSQL"),
        ({"LISTEN_DATABASE_URL": 5432}, "LISTEN_DATABASE_URL must be a PostgreSQL connection"),
        ({"ASYNC_CONCURRENCY": 0}, "ASYNC_CONCURRENCY must be a whole number from 1 to 10,000"),
        ({"ASYNC_CONCURRENCY": "5"}, "ASYNC_CONCURRENCY must be a whole number"),
    ],
)
@pytest.mark.django_db
def test_a_bad_option_is_a_check_error_and_the_backend_still_works_on_the_default(options, named):
    with with_options(**options):
        [error] = check_plain_options()
        assert error.id == "jobs.E005" and named in error.msg
        # The hint names the README section that describes the option.
        section = error.hint.split('"')[1]
        assert re.search(rf"^#+ {re.escape(section)}", README, re.MULTILINE), error.hint
        backend = task_backends["default"]
        assert backend.default_backoff == retry.policy_from_setting(None) or "BACKOFF" not in (
            options
        )
        assert backend.eager is False
        assert backend.async_concurrency in (DEFAULT_ASYNC_CONCURRENCY, 3)
        # Enqueue goes on, to the database, on the defaults.
        result = tasks.add.enqueue(1, 2)
        assert Job.objects.get(id=result.id).state == "pending"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"LEASE_SECONDS": "abc"}, "LEASE_SECONDS must be a number of seconds, not 'abc'"),
        ({"HEARTBEAT_SECONDS": True}, "HEARTBEAT_SECONDS must be a number of seconds, not True"),
        ({"LEASE_SECONDS": float("inf")}, "LEASE_SECONDS must be a number of seconds above 0"),
        ({"LEASE_SECONDS": 1e12}, "LEASE_SECONDS must be a number of seconds above 0"),
    ],
)
@pytest.mark.django_db
def test_a_bad_timing_option_is_a_check_error_and_pages_run_on_the_default_timing(
    options, named, admin_client
):
    with with_options(**options):
        [error] = check_timing()
        assert error.id == "jobs.E006" and named in error.msg
        assert check_plain_options() == []
        assert task_backends["default"].timing == Timing()
        for page in ("/", "/jobs/", "/workers/", "/queues/"):
            assert admin_client.get(page).status_code == 200, page
        with pytest.raises(CommandError, match=named.split(",")[0]):
            call_command("worker", "--burst")


@pytest.mark.django_db
def test_a_worker_refuses_a_bad_option_in_one_line():
    with with_options(BACKOFF={"strategy": "bogus"}), pytest.raises(CommandError) as refused:
        call_command("worker", "--burst")
    assert "BACKOFF strategy 'bogus' is unknown" in str(refused.value)


def test_options_that_are_not_a_dict_are_named():
    config = settings.TASKS["default"]
    with override_settings(TASKS={"default": {**config, "OPTIONS": []}}):
        [error] = check_plain_options()
        assert error.id == "jobs.E005" and error.msg == "OPTIONS must be a dict, not list"
        assert task_backends["default"].timing == Timing()


def test_an_unknown_option_is_a_warning_naming_it():
    with with_options(MAX_ATTEMPTZ=5):
        [warning] = check_plain_options()
        assert warning.id == "jobs.W002" and "'MAX_ATTEMPTZ'" in warning.msg
        assert "MAX_ATTEMPTS" in warning.hint


def test_the_documented_options_pass():
    assert check_plain_options() == []


def test_use_tz_off_and_a_sqlite_database_off_utc_are_refused_saying_what_to_set():
    def configured(use_tz, engine, zone):
        database = {"ENGINE": engine} | ({"TIME_ZONE": zone} if zone else {})
        return SimpleNamespace(USE_TZ=use_tz, DATABASES={"default": database})

    sqlite, postgres = "django.db.backends.sqlite3", "django.db.backends.postgresql"
    assert database_problems(configured(True, sqlite, None)) == []
    assert database_problems(configured(True, sqlite, "UTC")) == []
    assert database_problems(configured(True, sqlite, "Etc/UTC")) == []
    assert database_problems(configured(True, sqlite, "Zulu")) == []
    [(problem, *_)] = database_problems(configured(True, sqlite, "Europe/London"))
    assert "'Europe/London'" in problem
    assert database_problems(configured(True, postgres, "Asia/Tokyo")) == []
    [(problem, hint, _, check_id)] = database_problems(configured(False, postgres, None))
    assert check_id == "jobs.E007" and "needs USE_TZ = True" in problem
    [(problem, hint, _, check_id)] = database_problems(configured(True, sqlite, "Asia/Tokyo"))
    assert check_id == "jobs.E008" and "'Asia/Tokyo'" in problem and "'UTC'" in hint


def test_a_worker_refuses_use_tz_off():
    with override_settings(USE_TZ=False), pytest.raises(CommandError, match="USE_TZ = True"):
        call_command("worker", "--burst")


def test_a_job_retries_with_the_backoff_of_the_alias_it_was_enqueued_through():
    config = settings.TASKS["default"]
    two = {
        "default": {**config, "OPTIONS": {"BACKOFF": {"strategy": "fixed", "delay": 1}}},
        "critical": {**config, "OPTIONS": {"BACKOFF": {"strategy": "fixed", "delay": 500}}},
    }
    with override_settings(TASKS=two):
        task = no_backoff_of_its_own

        def claimed(backend):
            return Claimed(
                id=uuid.uuid4(),
                lease_id=uuid.uuid4(),
                task_path="tests.test_backend_options.no_backoff_of_its_own",
                args_json="[]",
                kwargs_json="{}",
                attempt=1,
                max_attempts=3,
                timeout=None,
                queue_name="default",
                priority=0,
                backend=backend,
            )

        assert outcome.policy_of(claimed("critical"), task) == retry.Fixed(500)
        assert outcome.policy_of(claimed("default"), task) == retry.Fixed(1)
        # An alias no longer configured: the task's own backend's.
        assert outcome.policy_of(claimed("gone"), task) == retry.Fixed(1)


def test_job_tables_routed_to_another_database_are_refused():
    [(problem, hint, _, check_id)] = database_problems(settings, job_alias="jobsdb")
    assert check_id == "jobs.E009" and "'jobsdb'" in problem
    assert database_problems(settings) == []


class KeepsJobsOut:
    def allow_migrate(self, db, app_label, **hints):
        return False if app_label in ("jobs", "dashboard") else None


def test_job_tables_kept_out_of_the_default_database_by_allow_migrate_are_refused():
    with override_settings(DATABASE_ROUTERS=["tests.test_backend_options.KeepsJobsOut"]):
        [(problem, hint, _, check_id)] = database_problems(settings)
        assert check_id == "jobs.E009" and "allow_migrate is False" in problem
        assert "run migrate" in hint
        with pytest.raises(CommandError, match="allow_migrate is False"):
            call_command("worker", "--burst")
    assert database_problems(settings) == []
