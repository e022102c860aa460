"""The supervisor (jobs.pool.supervisor): how long the worker may sleep while coroutines wait in
an executor for the child to start them. The executors are the dispatcher tests' bookkeeping
without a child process."""

import time

import pytest

from jobs.pool.dispatcher import AHEAD_LIMIT, SEEN_BEFORE_SHORT
from jobs.pool.supervisor import Supervisor
from tests import test_pool_dispatcher
from tests.test_pool_dispatcher import COROUTINE, LONG, job, started_coroutines

executors = test_pool_dispatcher.executors  # the dispatcher tests' fixture


def supervisor(of):
    s = Supervisor(
        worker_id="w", settings_module=None, async_slots=4, cancel_grace=1.0, held={},
        settle=lambda stopped: None,
    )  # fmt: skip
    s.executors.extend(of)
    return s


def test_a_coroutine_waiting_within_the_limit_wakes_the_worker_as_the_limit_passes(executors):
    (only,) = executors(1, async_slots=4)
    only.send(1, job(COROUTINE), None, coroutine=True)
    sent = only.coroutines[1]
    assert supervisor([only]).wait_limit(sent + 0.1, 5.0) == pytest.approx(AHEAD_LIMIT - 0.095)


def test_a_coroutine_slow_to_start_beside_a_free_slot_does_not_wake_the_worker_every_few_ms(
    executors,
):
    (only,) = executors(1, async_slots=4)
    only.send(1, job(COROUTINE), None, coroutine=True)
    sent = only.coroutines[1]
    assert only.free_async_slots() == 3  # the child's loop is busy: it has not taken the job
    assert supervisor([only]).wait_limit(sent + 1.0, 5.0) == pytest.approx(AHEAD_LIMIT)


def test_an_executor_held_back_for_a_sync_job_shows_no_free_coroutine_slot(executors):
    sooner, later = executors(2, async_slots=4)
    s = supervisor([sooner, later])
    d = s.dispatcher
    for _ in range(SEEN_BEFORE_SHORT):
        d.observe(COROUTINE, 1.0)
    now = time.monotonic()
    started_coroutines(later, [now, now])
    started_coroutines(sooner, [now - 0.5])
    assert s.free_slots() == {"free_sync_slots": 0, "free_async_slots": 5}
    d.seq = 2
    d.ready.append(job(LONG))
    d.dispatch()  # no executor is idle: the sync job is handed back, the sooner one held
    assert d.held_for_sync() is sooner
    assert s.free_slots() == {"free_sync_slots": 0, "free_async_slots": 2}
