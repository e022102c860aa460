import itertools

import pytest

from jobs.states import (
    TERMINAL,
    TRANSITIONS,
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
    for state in TERMINAL - {JobState.SUCCEEDED}:
        assert TRANSITIONS[state] == {JobState.PENDING}


def test_only_claimable_states_lead_to_running():
    assert set(sources_of(JobState.RUNNING)) == {JobState.PENDING, JobState.RETRYING}


def test_no_state_leads_back_to_scheduled():
    with pytest.raises(IllegalTransition):
        sources_of(JobState.SCHEDULED)
