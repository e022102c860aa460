"""jobs.timing: the worker's timing options, checked before a worker starts and by `check`."""

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from jobs import timing
from jobs.checks import check_timing
from jobs.worker_config import WorkerConfig


def test_the_defaults_and_a_lease_longer_than_the_heartbeat_are_fine():
    assert timing.problems(10, 60, 10) == []
    assert timing.problems(0.5, 1.5, 0) == []


@pytest.mark.parametrize(
    ("heartbeat", "lease", "grace", "named"),
    [
        (float("nan"), 60, 10, "HEARTBEAT_SECONDS"),
        (10, float("inf"), 10, "LEASE_SECONDS"),
        (10, 1e12, 10, "LEASE_SECONDS"),
        (0, 60, 10, "HEARTBEAT_SECONDS"),
        (-1, 60, 10, "HEARTBEAT_SECONDS"),
        (10, 60, -1, "CANCEL_GRACE_SECONDS"),
        (10, 60, float("nan"), "CANCEL_GRACE_SECONDS"),
    ],
)
def test_a_timing_option_that_is_not_a_number_of_seconds_within_a_day_is_named(
    heartbeat, lease, grace, named
):
    [problem] = timing.problems(heartbeat, lease, grace)
    assert problem.startswith(f"{named} must be a number of seconds ")
    assert "at most 86,400 (a day)" in problem


def test_a_heartbeat_shorter_than_a_tenth_of_a_second_is_refused():
    [problem] = timing.problems(1e-9, 60, 10)
    assert problem.startswith("HEARTBEAT_SECONDS must be at least 0.1, not 1e-09")


def test_a_lease_no_longer_than_the_heartbeat_says_why_it_must_be():
    [problem] = timing.problems(30, 10, 10)
    assert problem.startswith("LEASE_SECONDS (10) must be longer than HEARTBEAT_SECONDS (30)")


def test_a_worker_with_a_bad_timing_option_refuses_to_start_saying_which():
    with pytest.raises(ValueError, match="HEARTBEAT_SECONDS must be a number of seconds"):
        WorkerConfig(heartbeat_seconds=float("nan"))


@pytest.mark.django_db
def test_a_bad_timing_option_is_a_check_error():
    config = settings.TASKS["default"]
    options = {**config["OPTIONS"], "LEASE_SECONDS": 1e12}
    with override_settings(TASKS={"default": {**config, "OPTIONS": options}}):
        [error] = check_timing()
        assert error.id == "jobs.E006" and error.msg.startswith("LEASE_SECONDS must be")
        with pytest.raises(SystemCheckError, match="LEASE_SECONDS"):
            call_command("check")
