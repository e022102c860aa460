"""The retry decision (jobs.outcome): what becomes of a job after an attempt, however it ended."""

import pytest

from jobs.errors import JobTimeout
from jobs.outcome import Outcome, Ran, decide, failure_from_outside
from jobs.retry import MAX_ATTEMPTS
from jobs.states import AttemptOutcome, DeadLetterReason, JobState
from tests.factories import make_claimed

WORKER = "w-outcome"


def claimed(task="tests.tasks.always_fails", attempt=1, max_attempts=3):
    return make_claimed(task, attempt=attempt, max_attempts=max_attempts)


def failed(c, delay=5.0, **fields):
    return Ran(c.id, "error", error_type="ValueError", error_message="boom", delay=delay, **fields)


def test_a_returned_attempt_succeeds_with_its_return_value():
    c = claimed()
    f = decide(c, Ran(c.id, "ok", return_json="42"), worker_id=WORKER)
    assert (f.state, f.outcome) == (JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED)
    assert f.return_json == "42"
    assert (f.job_id, f.lease_id, f.worker_id) == (c.id, c.lease_id, WORKER)


def test_a_job_handed_back_unstarted_is_pending_again_without_an_attempt():
    c = claimed()
    f = decide(c, Ran(c.id, "released"), worker_id=WORKER)
    assert (f.state, f.outcome) == (JobState.PENDING, None)
    assert f == Outcome.released(c, WORKER)


def test_a_job_that_cannot_run_is_dead_lettered_as_poison_at_once():
    c = claimed(attempt=1)
    f = decide(c, Ran(c.id, "poison", error_type="PoisonJob"), worker_id=WORKER)
    assert (f.state, f.outcome, f.reason) == (
        JobState.DEAD_LETTER,
        AttemptOutcome.POISON,
        DeadLetterReason.POISON,
    )


def test_a_failure_with_attempts_left_is_retried_after_the_policy_delay():
    c = claimed(attempt=1, max_attempts=3)
    f = decide(c, failed(c, delay=7.5), worker_id=WORKER)
    assert (f.state, f.outcome, f.delay) == (JobState.RETRYING, AttemptOutcome.FAILED, 7.5)
    assert (f.error_type, f.error_message) == ("ValueError", "boom")


def test_the_last_allowed_attempt_failing_dead_letters_the_job_as_exhausted():
    c = claimed(attempt=3, max_attempts=3)
    f = decide(c, failed(c), worker_id=WORKER)
    assert (f.state, f.reason) == (JobState.DEAD_LETTER, DeadLetterReason.EXHAUSTED)


def test_a_policy_that_says_stop_dead_letters_the_job_as_unrecoverable():
    c = claimed(attempt=1)
    f = decide(c, failed(c, delay=None), worker_id=WORKER)
    assert (f.state, f.reason) == (JobState.DEAD_LETTER, DeadLetterReason.UNRECOVERABLE)


def test_a_stop_reason_dead_letters_with_that_reason_whatever_attempts_remain():
    c = claimed(attempt=1, max_attempts=10)
    ran = failed(c, stop_reason=DeadLetterReason.UNRECOVERABLE)
    f = decide(c, ran, worker_id=WORKER)
    assert (f.state, f.reason) == (JobState.DEAD_LETTER, DeadLetterReason.UNRECOVERABLE)


def test_a_cancel_requested_while_it_ran_ends_the_job_cancelled():
    c = claimed()
    f = decide(c, failed(c), worker_id=WORKER, cancel_requested=True)
    assert (f.state, f.outcome) == (JobState.CANCELLED, AttemptOutcome.CANCELLED)


@pytest.mark.parametrize(
    "ran",
    [
        lambda c: failed(c),  # the last attempt: exhausted
        lambda c: failed(c, stop_reason=DeadLetterReason.UNRECOVERABLE),
        lambda c: Ran(c.id, "poison", error_type="PoisonJob"),
        lambda c: Ran(c.id, "crashed", error_type="ExecutorCrashed", stop_reason="crashed"),
        lambda c: Ran(c.id, "ok", return_json="1"),
    ],
    ids=["exhausted", "unrecoverable", "poison", "crashed", "succeeded"],
)
def test_a_cancel_the_worker_noticed_wins_over_however_the_last_attempt_ended(ran):
    c = claimed(attempt=3, max_attempts=3)
    assert decide(c, ran(c), worker_id=WORKER).state != JobState.CANCELLED
    f = decide(c, ran(c), worker_id=WORKER, cancel_requested=True)
    assert (f.state, f.outcome) == (JobState.CANCELLED, AttemptOutcome.CANCELLED)


def test_a_job_handed_back_unstarted_is_not_decided_cancelled_here():
    c = claimed()
    f = decide(c, Ran(c.id, "released"), worker_id=WORKER, cancel_requested=True)
    assert f.state == JobState.PENDING and f.outcome is None


def test_a_lost_attempt_is_retried_and_recorded_as_lost():
    c = claimed(attempt=1)
    f = decide(c, Ran(c.id, "lost", delay=3.0), worker_id=WORKER)
    assert (f.state, f.outcome, f.delay) == (JobState.RETRYING, AttemptOutcome.LOST, 3.0)


def test_an_interrupted_last_attempt_goes_back_now_with_one_more_attempt():
    c = claimed(attempt=3, max_attempts=3)
    f = decide(c, Ran(c.id, "interrupted"), worker_id=WORKER)
    assert (f.state, f.outcome, f.delay) == (JobState.RETRYING, AttemptOutcome.INTERRUPTED, 0)
    assert f.raise_max_attempts


def test_an_interrupted_attempt_at_the_hard_maximum_is_dead_lettered():
    c = claimed(attempt=MAX_ATTEMPTS, max_attempts=MAX_ATTEMPTS)
    f = decide(c, Ran(c.id, "interrupted"), worker_id=WORKER)
    assert (f.state, f.reason) == (JobState.DEAD_LETTER, DeadLetterReason.EXHAUSTED)


def test_a_timeout_takes_the_delay_of_the_tasks_backoff():
    c = claimed(task="tests.tasks.fails_with_unbounded_backoff", attempt=3, max_attempts=100)
    ran = failure_from_outside(c, JobTimeout("too slow"), worker_id=WORKER)
    assert ran.delay == 4.0  # Exponential(base=1): 1, 2, 4 for attempts 1, 2, 3
    f = decide(c, ran, worker_id=WORKER)
    assert (f.state, f.outcome, f.error_type) == (
        JobState.RETRYING,
        AttemptOutcome.FAILED,
        "JobTimeout",
    )


def test_a_crash_dead_letters_a_task_whose_on_crash_says_so():
    c = claimed(task="tests.tasks.segfaults_no_retry", attempt=1)
    ran = failure_from_outside(c, RuntimeError("executor died"), kind="crashed")
    f = decide(c, ran, worker_id=WORKER)
    assert (f.state, f.reason) == (JobState.DEAD_LETTER, DeadLetterReason.CRASHED)


def test_a_crash_is_retried_by_default():
    c = claimed(task="tests.tasks.segfaults_then_succeeds", attempt=1)
    ran = failure_from_outside(c, RuntimeError("executor died"), kind="crashed")
    f = decide(c, ran, worker_id=WORKER)
    assert (f.state, f.outcome) == (JobState.RETRYING, AttemptOutcome.FAILED)


@pytest.mark.django_db
def test_a_backoff_callable_that_raises_dead_letters_the_job_as_backoff_failed():
    c = claimed(task="tests.tasks.fails_with_broken_backoff", attempt=1)
    ran = failure_from_outside(c, ValueError("boom"), worker_id=WORKER)
    f = decide(c, ran, worker_id=WORKER)
    assert (f.state, f.reason) == (JobState.DEAD_LETTER, DeadLetterReason.BACKOFF_FAILED)
