import itertools

import pytest

from jobs.states import (
    CANCEL_OVERRIDES,
    CLAIMABLE,
    DISCARDABLE,
    FAILED_ATTEMPT,
    RERUNNABLE,
    RETRYABLE,
    TERMINAL,
    TRANSITIONS,
    WAITING,
    AttemptOutcome,
    IllegalTransition,
    JobState,
    can_transition,
    check_transition,
    sources_of,
)

ALLOWED = {(s, t) for s, targets in TRANSITIONS.items() for t in targets}
FORBIDDEN = [(s, t) for s, t in itertools.product(JobState, JobState) if (s, t) not in ALLOWED]


@pytest.mark.parametrize(("source", "target"), FORBIDDEN)
def test_every_forbidden_transition_is_refused(source, target):
    assert not can_transition(source, target)
    with pytest.raises(IllegalTransition):
        check_transition(source, target)


@pytest.mark.parametrize(("source", "target"), sorted(ALLOWED))
def test_every_allowed_transition_is_accepted(source, target):
    check_transition(source, target)


def test_succeeded_is_final_and_other_terminal_states_only_go_back_to_pending():
    assert TRANSITIONS[JobState.SUCCEEDED] == frozenset()
    assert TRANSITIONS[JobState.DEAD_LETTER] == {JobState.PENDING}
    # A workflow node cancelled by its upstream node's failure waits again on that one's retry.
    assert TRANSITIONS[JobState.CANCELLED] == {JobState.PENDING, JobState.SCHEDULED}


def test_only_claimable_states_lead_to_running():
    assert set(sources_of(JobState.RUNNING)) == {JobState.PENDING, JobState.RETRYING}


def test_only_a_retried_or_re_armed_workflow_node_goes_back_to_scheduled():
    assert set(sources_of(JobState.SCHEDULED)) == {JobState.PENDING, JobState.CANCELLED}


def test_the_guards_of_the_operator_actions_are_those_of_the_contract():
    assert set(RETRYABLE) == {JobState.DEAD_LETTER, JobState.CANCELLED}
    assert set(WAITING) == {JobState.PENDING, JobState.SCHEDULED, JobState.RETRYING}
    assert set(RERUNNABLE) == set(DISCARDABLE) == TERMINAL
    assert set(CLAIMABLE) == {JobState.PENDING, JobState.RETRYING}


def test_every_guard_is_a_set_of_sources_in_the_transition_table():
    for target, guard in [
        (JobState.RUNNING, CLAIMABLE),
        (JobState.CANCELLED, WAITING),
        (JobState.PENDING, RETRYABLE),
    ]:
        assert all(can_transition(source, target) for source in guard)


def test_a_cancel_requested_while_running_overrides_every_ending_a_dead_letter_included():
    endings = TRANSITIONS[JobState.RUNNING]
    assert set(CANCEL_OVERRIDES) == endings - {JobState.CANCELLED}
    assert JobState.DEAD_LETTER in CANCEL_OVERRIDES


def test_a_failed_attempt_is_any_attempt_that_neither_returned_nor_was_cancelled_nor_snoozed():
    ended_otherwise = {AttemptOutcome.SUCCEEDED, AttemptOutcome.CANCELLED, AttemptOutcome.SNOOZED}
    assert set(AttemptOutcome) - ended_otherwise == FAILED_ATTEMPT
