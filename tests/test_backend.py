import logging
import math
import sys
import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from jobs import payload
from jobs.backend import JobTask
from jobs.compat import (
    FRAMEWORK_SIGNALS,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
)
from jobs.errors import DuplicateJob
from jobs.models import CounterDelta, Job
from jobs.retry import Fixed
from jobs.states import JobState
from tests import tasks
from tests.factories import add_attempts, make_job

pytestmark = pytest.mark.django_db


def test_enqueue_stores_a_pending_job_and_returns_its_result():
    result = tasks.add.enqueue(2, 3)
    job = Job.objects.get(id=result.id)
    assert result.status == TaskResultStatus.READY
    assert (job.task_path, job.args, job.kwargs) == ("tests.tasks.add", [2, 3], {})
    assert (job.state, job.attempt, job.queue_name) == (JobState.PENDING, 0, "default")


def test_enqueue_counts_into_jobs_enqueued():
    tasks.add.enqueue(1, 1)
    tasks.add.enqueue(1, 2)
    assert CounterDelta.objects.totals()["jobs_enqueued"] == 2


def test_the_task_class_is_ours_with_its_extra_keywords():
    assert isinstance(tasks.always_fails, JobTask)
    assert tasks.always_fails.max_attempts == 3
    assert tasks.ignores_timeout.timeout == 1


def test_max_attempts_per_call_beats_per_task_beats_the_option():
    assert Job.objects.get(id=tasks.gives_up.enqueue("k").id).max_attempts == 5
    call = tasks.gives_up.using(max_attempts=9).enqueue("k")
    assert Job.objects.get(id=call.id).max_attempts == 9
    assert Job.objects.get(id=tasks.add.enqueue(1, 1).id).max_attempts == 3


@override_settings(
    TASKS={
        "default": {
            "BACKEND": "jobs.backend.JobsBackend",
            "QUEUES": [],
            "OPTIONS": {"MAX_ATTEMPTS": 7},
        }
    }
)
def test_max_attempts_falls_back_to_the_option():
    backend = task_backends["default"]
    assert backend.max_attempts_for(tasks.add) == 7
    assert backend.max_attempts_for(tasks.gives_up) == 5


@pytest.mark.parametrize("value", [0, 101, -3])
def test_max_attempts_outside_1_to_100_is_stored_as_3(value):
    result = tasks.add.using(max_attempts=value).enqueue(1, 1)
    assert Job.objects.get(id=result.id).max_attempts == 3


def test_using_keeps_every_option_it_was_not_given():
    t = tasks.always_fails.using(priority=5).using(queue_name="q")
    assert (t.priority, t.queue_name, t.max_attempts, t.backoff) == (5, "q", 3, Fixed(0))


def test_priority_queue_run_after_and_not_after_are_stored():
    later = timezone.now() + timedelta(hours=1)
    latest = later + timedelta(hours=1)
    result = tasks.add.using(
        priority=10, queue_name="emails", run_after=later, not_after=latest
    ).enqueue(1, 1)
    job = Job.objects.get(id=result.id)
    assert (job.priority, job.queue_name) == (10, "emails")
    assert abs(job.run_after - later) < timedelta(milliseconds=1)
    assert abs(job.not_after - latest) < timedelta(milliseconds=1)


@pytest.mark.parametrize(
    "bad",
    [
        object(),
        {1, 2},
        b"\xff\xfe",
        float("nan"),
        math.inf,
        -math.inf,
        "a\x00b",
        "lone \udc80 surrogate",
        {"nested": [1, {"deep": float("nan")}]},
        {1: "int key"},
        timezone.now(),
    ],
    ids=[
        "object",
        "set",
        "bytes",
        "nan",
        "inf",
        "-inf",
        "nul",
        "lone-surrogate",
        "nested-nan",
        "int-key",
        "datetime",
    ],
)
def test_non_json_arguments_are_refused_and_nothing_is_stored(bad):
    with pytest.raises((TypeError, ValueError)):
        tasks.echo.enqueue(bad)
    with pytest.raises((TypeError, ValueError)):
        tasks.echo.enqueue(key=bad)
    assert not Job.objects.exists()


def test_arguments_over_the_size_limit_are_refused_and_nothing_is_stored():
    half = "x" * (payload.MAX_BYTES // 2)
    with pytest.raises(ValueError, match="over the limit of 1,048,576"):
        tasks.echo.enqueue(half, key=half)
    with pytest.raises(ValueError, match="over the limit"):
        tasks.echo.enqueue_many([((half, half), {})])
    assert not Job.objects.exists()


def test_arguments_just_within_the_size_limit_are_stored():
    text = "x" * (payload.MAX_BYTES - len('[""]{}'))
    result = tasks.echo.enqueue(text)
    assert len(Job.objects.get(id=result.id).args[0]) == len(text)


def test_tuples_are_stored_as_lists():
    result = tasks.echo.enqueue((1, 2), nested={"t": (3,)})
    job = Job.objects.get(id=result.id)
    assert job.args == [[1, 2]] and job.kwargs == {"nested": {"t": [3]}}


def test_enqueue_in_a_rolled_back_transaction_leaves_no_job():
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.enqueue(1, 1)
        raise RuntimeError("roll back")
    assert not Job.objects.exists()
    assert "jobs_enqueued" not in CounterDelta.objects.totals()


def test_a_second_enqueue_with_a_held_dedup_key_raises_with_the_holder():
    first = tasks.add.using(dedup_key="welcome-42").enqueue(1, 1)
    with pytest.raises(DuplicateJob) as raised:
        tasks.add.using(dedup_key="welcome-42").enqueue(1, 1)
    assert str(raised.value.job_id) == first.id
    assert Job.objects.count() == 1


def test_a_duplicate_inside_a_transaction_leaves_the_transaction_usable():
    tasks.add.using(dedup_key="k").enqueue(1, 1)
    with transaction.atomic():
        with pytest.raises(DuplicateJob):
            tasks.add.using(dedup_key="k").enqueue(1, 1)
        tasks.add.enqueue(2, 2)
    assert Job.objects.count() == 2


def test_the_dedup_key_is_free_once_the_holder_is_terminal():
    first = tasks.add.using(dedup_key="k").enqueue(1, 1)
    Job.objects.filter(id=first.id).update(state=JobState.SUCCEEDED, finished_at=timezone.now())
    second = tasks.add.using(dedup_key="k").enqueue(1, 1)
    assert second.id != first.id


def test_a_continuation_waits_scheduled_for_its_parent():
    parent = tasks.add.enqueue(1, 1)
    child = tasks.add.using(after=parent.id).enqueue(2, 2)
    job = Job.objects.get(id=child.id)
    assert (job.state, str(job.parent_id)) == (JobState.SCHEDULED, parent.id)


def test_a_continuation_of_a_succeeded_parent_is_pending_at_once():
    parent = make_job(JobState.SUCCEEDED)
    child = tasks.add.using(after=parent.id).enqueue(2, 2)
    assert Job.objects.get(id=child.id).state == JobState.PENDING


def test_a_continuation_of_a_dead_parent_is_cancelled():
    parent = make_job(JobState.DEAD_LETTER)
    child = tasks.add.using(after=parent).enqueue(2, 2)
    assert Job.objects.get(id=child.id).state == JobState.CANCELLED


def test_a_continuation_of_a_dead_parent_counts_as_cancelled():
    parent = make_job(JobState.DEAD_LETTER)
    tasks.add.using(after=parent).enqueue(2, 2)
    assert CounterDelta.objects.totals().get("jobs_cancelled") == 1


def test_a_continuation_of_a_succeeded_parent_reads_its_parents_value():
    from jobs.workflows import upstream_values

    parent = make_job(JobState.SUCCEEDED, return_value=4)
    child = tasks.add.using(after=parent.id).enqueue(2, 2)
    assert upstream_values(child.id) == {"add": 4}


def test_a_continuation_of_a_dead_parent_says_why_and_is_re_armed_when_the_parent_is_retried():
    from jobs import actions

    parent = make_job(JobState.DEAD_LETTER)
    child = tasks.add.using(after=parent.id).enqueue(2, 2)
    job = Job.objects.get(id=child.id)
    assert (job.error_type, job.error_message) == (
        "ParentFailed",
        "a job it runs after did not succeed",
    )
    assert [(a.action, a.source) for a in job.audit_entries.all()] == [("cancel", "workflow")]
    assert actions.retry(parent.id)
    job.refresh_from_db()
    assert (job.state, job.waiting_for) == (JobState.SCHEDULED, 1)


def test_a_continuation_of_an_unknown_job_is_refused():
    with pytest.raises(ValueError, match="does not exist"):
        tasks.add.using(after=uuid.uuid4()).enqueue(1, 1)
    with pytest.raises(ValueError, match="job id"):
        tasks.add.using(after="not-an-id").enqueue(1, 1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"backoff": "fast"}, "backoff"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": "10"}, "timeout"),
        ({"dedup_key": ""}, "dedup_key"),
        ({"dedup_key": "x" * 256}, "dedup_key"),
        ({"dedup_key": "a\x00b"}, "dedup_key"),
        ({"dedup_key": "lone \udc80"}, "dedup_key.*without NUL or a lone surrogate"),
        ({"queue_name": "lone \udc80"}, "queue_name must be .* without NUL or a lone surrogate"),
        ({"limit_key": "lone \udc80"}, "limit_key must be .* without NUL or a lone surrogate"),
        ({"not_after": "tomorrow"}, "not_after"),
        ({"priority": 101}, "priority"),
        ({"run_after": "tomorrow"}, "run_after must be an aware datetime, not str"),
    ],
)
def test_bad_options_are_refused_with_a_clear_error(options, message):
    with pytest.raises(InvalidTask, match=message):
        tasks.add.using(**options).enqueue(1, 1)
    assert not Job.objects.exists()


def test_get_result_maps_states_to_django_statuses():
    states_of_status = {
        TaskResultStatus.READY: [JobState.PENDING, JobState.SCHEDULED, JobState.RETRYING],
        TaskResultStatus.RUNNING: [JobState.RUNNING],
        TaskResultStatus.SUCCESSFUL: [JobState.SUCCEEDED],
        TaskResultStatus.FAILED: [JobState.CANCELLED, JobState.DEAD_LETTER],
    }
    for status, states in states_of_status.items():
        for state in states:
            job = make_job(state, attempt=1 if state == JobState.RETRYING else 0)
            assert tasks.add.get_result(job.id).status == status, state


def test_get_result_lists_every_failed_attempt_as_an_error():
    job = make_job(JobState.SUCCEEDED, attempt=3, return_value=3)
    add_attempts(job, ["failed", "failed", "succeeded"])
    job.attempts.filter(outcome="failed").update(
        error_type="builtins.ValueError", error_traceback="Traceback ..."
    )
    result = tasks.add.get_result(job.id)
    assert len(result.errors) == 2
    assert result.return_value == 3
    assert result.attempts == 3


def test_get_result_of_an_unknown_or_malformed_id_raises_does_not_exist():
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(str(uuid.uuid4()))
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result("garbage")


def test_task_enqueued_is_sent():
    received = []

    def receiver(sender, task_result, **kwargs):
        received.append(task_result.id)

    task_enqueued.connect(receiver)
    try:
        result = tasks.add.enqueue(1, 1)
    finally:
        task_enqueued.disconnect(receiver)
    assert received == [result.id]


def tasks_logger():
    """The framework's own log receivers' logger: django.tasks, or the backport's django_tasks."""
    return next(sys.modules[m].logger.name for m in FRAMEWORK_SIGNALS if m in sys.modules)


def test_task_enqueued_is_logged_when_the_tasks_logger_shows_debug(caplog):
    # With no receiver of the project's, the signal goes out only if the framework's own log
    # receiver would write something.
    with caplog.at_level(logging.DEBUG, logger=tasks_logger()):
        result = tasks.add.enqueue(1, 1)
    assert any(result.id in r.getMessage() for r in caplog.records)


def test_task_enqueued_is_not_sent_when_nothing_would_hear_it(monkeypatch, caplog):
    sent = []
    monkeypatch.setattr(task_enqueued, "send", lambda *a, **k: sent.append(k))
    with caplog.at_level(logging.WARNING, logger=tasks_logger()):
        tasks.add.enqueue(1, 1)
    assert sent == []


def test_enqueue_many_stores_every_call_in_one_go():
    ids = tasks.add.enqueue_many([((i, i), {}) for i in range(250)])
    assert Job.objects.filter(id__in=ids).count() == 250
    assert CounterDelta.objects.totals()["jobs_enqueued"] == 250


def test_enqueue_many_stores_arguments_exactly_as_given():
    awkward = [
        "back\\slash \\N \\t",
        "tab\tnew\nline\rreturn",
        "quote \" and '",
        "ünïcödé ✓ \u2028",
        {"nested": ["\\", "\t", None, 1.5, True]},
    ]
    calls = [((value,), {"key": value}) for value in awkward]
    ids = tasks.echo.using(priority=7, queue_name="bulk").enqueue_many(calls)
    jobs = Job.objects.in_bulk(ids)
    assert [(jobs[i].args, jobs[i].kwargs) for i in ids] == [([v], {"key": v}) for v in awkward]
    job = jobs[ids[0]]
    assert (job.state, job.priority, job.queue_name, job.attempt) == ("pending", 7, "bulk", 0)
    assert abs(job.run_after - job.enqueued_at) < timedelta(seconds=1)
    assert job.finished_at is None and job.run_after <= timezone.now()


def test_enqueue_many_with_one_bad_call_among_thousands_stores_nothing():
    calls = [((i,), {}) for i in range(5000)] + [((float("nan"),), {})]
    with pytest.raises(ValueError):
        tasks.echo.enqueue_many(calls)
    assert not Job.objects.exists()
    ids = tasks.echo.enqueue_many(calls[:5000])
    assert Job.objects.count() == 5000 == len(set(ids))
    assert CounterDelta.objects.totals()["jobs_enqueued"] == 5000


def test_enqueue_many_with_a_bad_call_inside_a_transaction_leaves_the_transaction_usable():
    calls = [((i,), {}) for i in range(3000)] + [((float("nan"),), {})]
    with transaction.atomic():
        before = tasks.add.enqueue(1, 1)
        with pytest.raises(ValueError):
            tasks.echo.enqueue_many(calls)
        after = tasks.add.enqueue(2, 2)
    assert {str(i) for i in Job.objects.values_list("id", flat=True)} == {before.id, after.id}


@pytest.mark.parametrize("bad", [5, (1, 2, 3), "ab c", None, (5, {}), ((1,), [2]), ("ab", {})])
def test_enqueue_many_names_a_call_that_is_not_an_args_kwargs_pair(bad):
    calls = [((i,), {}) for i in range(3)] + [bad]
    with pytest.raises(TypeError, match=r"takes \(args, kwargs\) pairs.*call 4 is "):
        tasks.echo.enqueue_many(calls)
    assert not Job.objects.exists()


@pytest.mark.parametrize("calls", [5, None, 2.5])
def test_enqueue_many_of_something_other_than_a_list_of_calls_says_so(calls):
    with pytest.raises(TypeError, match=r"takes a list of \(args, kwargs\) pairs, not "):
        tasks.echo.enqueue_many(calls)


@pytest.mark.parametrize("priority", ["5", True, [1]])
def test_a_priority_that_is_not_a_number_is_refused_clearly(priority):
    with pytest.raises(InvalidTask) as refused:
        tasks.echo.using(priority=priority).enqueue(1)
    assert str(refused.value) == f"priority must be a whole number, not {priority!r}"
    assert not Job.objects.exists()


def test_enqueue_many_by_limit_key_names_a_bad_call_and_stores_nothing():
    by_parity = tasks.echo.using(limit_key=lambda args, kwargs: f"parity-{args[0] % 2}")
    with pytest.raises(TypeError, match="call 3 is 5"):
        by_parity.enqueue_many([((1,), {}), ((2,), {}), 5])
    assert not Job.objects.exists()
    assert len(by_parity.enqueue_many([((1,), {}), ((2,), {})])) == 2


def test_enqueue_many_refuses_non_json_and_stores_nothing():
    with pytest.raises(TypeError):
        tasks.echo.enqueue_many([((1,), {}), ((object(),), {})])
    assert not Job.objects.exists()


EAGER = {
    "default": {"BACKEND": "jobs.backend.JobsBackend", "QUEUES": [], "OPTIONS": {"EAGER": True}}
}


@override_settings(TASKS=EAGER)
def test_eager_mode_runs_the_job_inline_and_returns_its_result():
    result = tasks.add.enqueue(20, 22)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42


@override_settings(TASKS=EAGER)
def test_eager_mode_retries_through_the_policy_without_waiting():
    result = tasks.flaky.enqueue("eager-flaky")
    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempt) == (JobState.SUCCEEDED, 2)
    assert list(job.attempts.values_list("outcome", flat=True)) == ["failed", "succeeded"]


@override_settings(TASKS=EAGER)
def test_the_framework_s_line_for_a_failed_task_carries_no_empty_traceback(caplog):
    import logging

    import django

    name = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
    with caplog.at_level(logging.INFO, logger=name):
        tasks.gives_up.enqueue("eager-logged")
    [failed] = [r for r in caplog.records if r.name == name and r.levelno == logging.ERROR]
    assert "state=FAILED" in failed.getMessage()
    # The engine logs the error in one line; the framework's line adds no "NoneType: None".
    assert not (failed.exc_info and failed.exc_info[0] is None)
    assert "NoneType" not in caplog.text


@override_settings(TASKS=EAGER)
def test_eager_mode_dead_letters_after_max_attempts():
    result = tasks.always_fails.enqueue("eager-dead")
    job = Job.objects.get(id=result.id)
    assert (job.state, job.dead_letter_reason, job.attempt) == ("dead_letter", "exhausted", 3)
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 3


@override_settings(TASKS=EAGER)
def test_retry_and_dead_letter_signals_carry_attempt_delay_and_reason():
    from jobs.signals import job_dead_lettered, job_retry_scheduled

    events = []

    def on_retry(sender, **kw):
        events.append(("retry", kw["attempt"], kw["delay"], kw["error_type"]))

    def on_dead(sender, **kw):
        events.append(("dead", kw["attempt"], kw["reason"], kw["error_type"]))

    job_retry_scheduled.connect(on_retry)
    job_dead_lettered.connect(on_dead)
    try:
        tasks.always_fails.enqueue("signals")
    finally:
        job_retry_scheduled.disconnect(on_retry)
        job_dead_lettered.disconnect(on_dead)
    assert events == [
        ("retry", 1, 0.0, "ValueError"),
        ("retry", 2, 0.0, "ValueError"),
        ("dead", 3, "exhausted", "ValueError"),
    ]


@override_settings(TASKS=EAGER)
def test_task_started_and_finished_signals_are_sent_for_each_attempt():
    from jobs.compat import task_finished, task_started

    seen = []

    def started(sender, task_result, **kw):
        seen.append(("started", task_result.status))

    def finished(sender, task_result, **kw):
        seen.append(("finished", task_result.status))

    task_started.connect(started)
    task_finished.connect(finished)
    try:
        tasks.flaky.enqueue("signals")
    finally:
        task_started.disconnect(started)
        task_finished.disconnect(finished)
    assert seen == [
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.FAILED),
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.SUCCESSFUL),
    ]
