"""jobs.reconnect: an operator action that PostgreSQL rolled back as a deadlock's victim."""

import pytest
from django.db import OperationalError, transaction

from jobs.reconnect import DEADLOCK_TRIES, again_after_deadlock


class DriverError(Exception):
    """What the driver raises beneath Django's OperationalError."""

    def __init__(self, sqlstate):
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


def failing(times, sqlstate="40P01"):
    """An action that fails `times` times with `sqlstate`, then answers "done"; its calls."""
    calls = []

    @again_after_deadlock
    def action():
        calls.append(1)
        if len(calls) <= times:
            raise OperationalError("deadlock detected") from DriverError(sqlstate)
        return "done"

    return action, calls


def test_an_action_rolled_back_by_a_deadlock_is_made_again():
    action, calls = failing(DEADLOCK_TRIES - 1)
    assert action() == "done"
    assert len(calls) == DEADLOCK_TRIES


def test_an_action_rolled_back_every_time_gives_up_with_the_error():
    action, calls = failing(DEADLOCK_TRIES)
    with pytest.raises(OperationalError, match="deadlock"):
        action()
    assert len(calls) == DEADLOCK_TRIES


def test_any_other_database_error_is_not_made_again():
    action, calls = failing(1, sqlstate="57P01")  # the server shut the connection down
    with pytest.raises(OperationalError):
        action()
    assert len(calls) == 1


@pytest.mark.django_db
def test_an_action_inside_a_callers_transaction_leaves_the_deadlock_to_the_caller():
    action, calls = failing(1)
    with pytest.raises(OperationalError), transaction.atomic():
        action()
    assert len(calls) == 1
