"""The LIMITS option: entries read, malformed ones reported by name (jobs.limit_spec)."""

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from jobs.checks import check_limits
from jobs.limit_spec import LimitError, check, parse
from tests.test_limits import with_limits


def test_an_entry_reads_as_its_kind_target_and_numbers():
    spec = parse("key:tenant-*", {"concurrency": 2, "rate": [20, 1]})
    assert (spec.kind, spec.target) == ("key", "tenant-*")
    assert (spec.concurrency, spec.rate) == (2, (20, 1.0))
    assert spec.limits_claims
    breaker = parse("queue:webhooks", {"pause_after_failures": [50, 60]})
    assert breaker.pause_after_failures == (50, 60.0) and not breaker.limits_claims


@pytest.mark.parametrize(
    ("name", "entry", "says"),
    [
        ("bucket:x", {"concurrency": 1}, "unknown prefix"),
        ("emails", {"concurrency": 1}, "queue:NAME"),
        ("queue:", {"concurrency": 1}, "1-255 characters"),
        ("queue:a", {"concurrency": 0}, "concurrency must be a whole number from 1"),
        ("queue:a", {"concurrency": -3}, "concurrency must be a whole number from 1"),
        ("queue:a", {"concurrency": True}, "concurrency must be a whole number from 1"),
        ("queue:a", {"rate": 10}, "rate must be [n, seconds]"),
        ("queue:a", {"rate": [10]}, "rate must be [n, seconds]"),
        ("queue:a", {"rate": [0, 1]}, "rate's n must be a whole number from 1"),
        ("queue:a", {"concurrency": 2**31}, "from 1 to 2,147,483,647, not 2147483648"),
        ("queue:a", {"rate": [10**22, 1]}, "rate's n must be a whole number from 1"),
        ("queue:a", {"rate": [1, 1e11]}, "rate's seconds must be at most 31,536,000 (a year)"),
        ("queue:a", {"rate": [1, float("nan")]}, "rate's seconds must be a number > 0"),
        ("queue:a", {"rate": [1, float("inf")]}, "rate's seconds must be at most"),
        ("queue:a", {"pause_after_failures": [1, 1e300]}, "pause_after_failures's seconds"),
        ("queue:a", {"rate": [10, 0]}, "rate's seconds must be a number > 0"),
        ("queue:a", {"rate": [10, "1"]}, "rate's seconds must be a number > 0"),
        ("queue:a", {"burst": 3}, "unknown key burst"),
        ("queue:a", {}, "says nothing"),
        ("queue:a", 5, "expected a dict"),
        ("task:x.y", {"pause_after_failures": [5, 60]}, "queue: entries only"),
        ("queue:a", {"pause_after_failures": [5, -60]}, "pause_after_failures's seconds"),
    ],
)
def test_a_malformed_entry_is_refused_with_a_message_naming_it(name, entry, says):
    with pytest.raises(LimitError) as caught:
        parse(name, entry)
    assert says in str(caught.value)
    assert repr(name) in str(caught.value)


def test_a_window_of_a_year_and_a_count_the_columns_hold_are_accepted():
    spec = parse("queue:a", {"concurrency": 2**31 - 1, "rate": [2**31 - 1, 365 * 24 * 3600]})
    assert spec.rate == (2**31 - 1, 31_536_000.0)


def test_check_reports_every_malformed_entry_and_nothing_for_good_ones():
    problems = check(
        {"queue:a": {"concurrency": 2}, "queue:b": {"concurrency": 0}, "nope:c": {"rate": [1, 1]}}
    )
    assert len(problems) == 2
    assert "'queue:b'" in problems[0] and "'nope:c'" in problems[1]
    assert check(None) == [] and check({}) == []
    assert check([1]) == ["LIMITS must be a dict of limit name -> entry"]


@pytest.mark.django_db
def test_manage_py_check_fails_on_a_malformed_limits_option():
    with with_limits({"queue:a": {"concurrency": -1}}):
        errors = check_limits()
        assert [e.id for e in errors] == ["jobs.E002"]
        assert "'queue:a'" in errors[0].msg
        with pytest.raises(SystemCheckError, match="queue:a"):
            call_command("check")


@pytest.mark.slow
def test_the_worker_refuses_to_start_on_a_malformed_limits_option(subprocess_env, run_worker):
    subprocess_env["JOBSITE_LIMITS"] = '{"key:tenant-*": {"rate": [20, 0]}}'
    result = run_worker(timeout=60)
    assert result.returncode != 0
    assert "key:tenant-*" in result.stderr and "seconds must be a number > 0" in result.stderr
