"""The dispatcher (jobs.pool.dispatcher): which executor a claimed job goes to, or none.

The executors are the real `Executor` bookkeeping without a child process behind them: what
is sent lands in a pipe nobody reads, which is all the dispatcher sees of a child anyway.
"""

import pickle
import time

import pytest

from jobs.executor_loop import TAKEN, new_status, slot_fields
from jobs.pool.dispatcher import (
    AHEAD_BUDGET,
    MAX_PREFETCH,
    PREFETCH_BUDGET,
    SEEN_BEFORE_SHORT,
    Dispatcher,
)
from jobs.pool.executor import Executor, mp_context
from jobs.pool.wire import SEND_EVERY, Channel
from tests.factories import make_claimed

SHORT = "tests.tasks.add"
LONG = "tests.tasks.sleepy"
COROUTINE = "tests.tasks.awaits"


@pytest.fixture
def executors():
    made = []

    def make(n, async_slots=1):
        for index in range(n):
            e = object.__new__(Executor)
            ctx = mp_context()
            e.index = index
            e.conn, e.child_end = ctx.Pipe()
            e.status = ctx.RawArray("d", new_status(async_slots))
            e.taking = ctx.Lock()
            e.inflight, e.estimates = {}, {}
            e.coroutines, e.async_slots = {}, async_slots
            e._queued, e._unknown = 0.0, 0
            e.broken, e.completed, e.unwinding = False, 0, False
            e.channel, e._received = Channel(e.conn), []
            made.append(e)
        return made[-n:]

    yield make
    for e in made:
        e.conn.close()
        e.child_end.close()


def job(task_path=SHORT):
    return make_claimed(task_path)


def dispatcher(executors, short_seconds=0.001):
    d = Dispatcher(executors)
    for _ in range(SEEN_BEFORE_SHORT):
        d.observe(SHORT, short_seconds)
        d.observe(LONG, 2.0)
    d.recent = short_seconds
    return d


def test_a_job_goes_to_an_idle_executor_before_queuing_behind_a_busy_one(executors):
    busy, idle = executors(2)
    d = dispatcher([busy, idle])
    busy.send(99, job(), 0.001)
    d.ready.append(job())
    assert d.dispatch() == []
    assert len(idle.inflight) == 1 and len(busy.inflight) == 1


def test_known_short_jobs_queue_behind_a_short_one_within_the_prefetch_budget(executors):
    (only,) = executors(1)
    d = dispatcher([only], short_seconds=0.001)
    jobs = [job() for _ in range(100)]
    d.ready.extend(jobs)
    assert d.dispatch() == []  # what did not fit waits: the executor drains within the budget
    sent = len(only.inflight)
    assert 1 < sent < len(jobs)
    assert only.queued_seconds() <= PREFETCH_BUDGET + 0.001
    assert len(d.ready) == len(jobs) - sent


def test_tiny_jobs_queue_behind_one_only_up_to_the_count_cap(executors):
    (only,) = executors(1)
    d = dispatcher([only], short_seconds=0.000001)  # the budget alone would allow 2,000
    assert d.room() == 1 + MAX_PREFETCH  # the worker claims no more than this
    d.ready.extend(job() for _ in range(2 * MAX_PREFETCH))
    assert d.dispatch() == []
    assert len(only.inflight) == 1 + MAX_PREFETCH
    assert len(d.ready) == MAX_PREFETCH - 1


def test_every_job_dispatched_has_reached_its_child_when_the_round_ends(executors):
    (only,) = executors(1)
    d = dispatcher([only], short_seconds=0.0001)
    d.ready.extend(job() for _ in range(20))
    d.dispatch()
    seqs = []
    while only.child_end.poll():
        seqs.append(pickle.loads(only.child_end.recv_bytes())[0])
    assert seqs == sorted(only.inflight) and len(seqs) > SEND_EVERY


def test_nothing_queues_behind_a_task_of_unknown_length(executors):
    (only,) = executors(1)
    d = dispatcher([only])
    only.send(1, job("tests.tasks.never_seen"), None)
    waiting = job()
    d.ready.append(waiting)
    assert d.dispatch() == [waiting]  # handed back, not left waiting in running
    assert list(only.inflight) == [1]


def test_nothing_queues_behind_a_long_task(executors):
    (only,) = executors(1)
    d = dispatcher([only])
    assert d.short_estimate(LONG) is None
    d.ready.append(job(LONG))
    assert d.dispatch() == []
    behind = job()
    d.ready.append(behind)
    assert d.dispatch() == [behind]


def test_a_task_counts_as_short_only_once_seen_enough_times(executors):
    d = Dispatcher(executors(1))
    for seen in range(SEEN_BEFORE_SHORT):
        assert d.short_estimate("tests.tasks.new") is None, seen
        d.observe("tests.tasks.new", 0.001)
    assert d.short_estimate("tests.tasks.new") == pytest.approx(0.001)


def test_a_broken_executor_gets_nothing(executors):
    broken, healthy = executors(2)
    broken.broken = True
    d = dispatcher([broken, healthy])
    d.ready.append(job())
    assert d.dispatch() == []
    assert not broken.inflight and len(healthy.inflight) == 1


# --- coroutines (async def tasks) ---------------------------------------------------------


def test_coroutines_fill_the_async_slots_of_one_executor_before_the_next(executors):
    first, second = executors(2, async_slots=3)
    d = dispatcher([first, second])
    d.ready.extend(job(COROUTINE) for _ in range(4))
    assert d.dispatch() == []
    assert (len(first.inflight), len(second.inflight)) == (3, 1)
    d.ready.extend(job(COROUTINE) for _ in range(3))
    left = d.dispatch()
    assert (len(first.inflight), len(second.inflight)) == (3, 3)
    assert len(left) == 1  # no slot anywhere: handed back, not left waiting in running
    assert set(first.coroutines) == set(first.inflight)


def test_no_coroutine_joins_an_executor_unwinding_a_stopped_one(executors):
    unwinding, other = executors(2, async_slots=3)
    d = dispatcher([unwinding, other])
    d.ready.append(job(COROUTINE))
    d.dispatch()
    unwinding.unwinding = True  # its coroutine was cancelled and may cost it the process
    d.ready.extend(job(COROUTINE) for _ in range(2))
    assert d.dispatch() == []
    assert (len(unwinding.inflight), len(other.inflight)) == (1, 2)


def test_coroutines_leave_an_executor_idle_for_a_sync_job_while_one_has_room(executors):
    first, second = executors(2, async_slots=4)
    d = dispatcher([first, second])
    sync = job(LONG)
    d.ready.extend([job(COROUTINE), job(COROUTINE), job(COROUTINE), sync])
    assert d.dispatch() == []
    assert len(first.coroutines) == 3 and list(second.inflight.values()) == [sync]


def test_a_sync_job_never_joins_coroutines_nor_a_coroutine_a_sync_job(executors):
    with_coroutine, with_sync = executors(2, async_slots=4)
    d = dispatcher([with_coroutine, with_sync])
    with_coroutine.send(1, job(COROUTINE), None, coroutine=True)
    with_sync.send(2, job(SHORT), 0.001)
    sync, coroutine = job(SHORT), job(COROUTINE)
    d.ready.extend([sync, coroutine])
    d.dispatch()
    assert sync not in with_coroutine.inflight.values()
    assert coroutine in with_coroutine.inflight.values()
    assert coroutine not in with_sync.inflight.values()
    assert with_coroutine.free_async_slots() == 2 and with_sync.free_async_slots() == 0


def test_a_sync_job_that_fits_nowhere_does_not_hold_up_the_coroutines_behind_it(executors):
    first, second = executors(2, async_slots=4)
    d = dispatcher([first, second])
    first.send(1, job(COROUTINE), None, coroutine=True)
    second.send(2, job(COROUTINE), None, coroutine=True)
    d.seq = 2
    stuck, behind = job(LONG), job(COROUTINE)
    d.ready.extend([stuck, behind])
    assert d.dispatch() == [stuck]
    assert behind in first.inflight.values() or behind in second.inflight.values()


def test_a_sync_job_with_no_idle_executor_holds_back_the_one_that_frees_first_for_it(executors):
    sooner, later = executors(2, async_slots=4)
    d = dispatcher([sooner, later])
    for _ in range(SEEN_BEFORE_SHORT):
        d.observe(COROUTINE, 1.0)
    now = time.monotonic()
    started_coroutines(later, [now, now])  # end in a second
    started_coroutines(sooner, [now - 0.5])  # ends in half a second
    d.seq = 2
    sync = job(LONG)
    d.ready.append(sync)
    assert d.dispatch() == [sync]  # handed back, not left waiting in running
    assert d.room() == 0  # claims wait for a place a sync job can start in
    assert not d.has_free_place()
    coroutine = job(COROUTINE)
    d.ready.append(coroutine)
    assert d.dispatch() == []
    assert coroutine in later.inflight.values()  # none joins the executor held back

    sooner.take(1)  # its coroutine ended
    sooner.status[slot_fields(0)[0]] = -1.0
    assert d.room() == 1  # the sync job, claimed again, starts there
    d.ready.append(sync)
    assert d.dispatch() == []
    assert list(sooner.inflight.values()) == [sync]
    sooner.take(d.seq)  # it ended: the executor takes coroutines again
    assert d.async_room(sooner, time.monotonic()) == 4


def test_one_coroutine_claimed_is_enough_to_claim_for_the_free_slots_beside_it(executors):
    (only,) = executors(1, async_slots=3)
    d = Dispatcher([only])
    assert d.room() == 1  # nothing seen yet: sized for a sync job
    d.add(job(COROUTINE))
    assert d.dispatch() == []
    assert d.room() == 2 and d.has_free_place()


def test_claims_are_sized_by_the_share_of_coroutines_seen(executors):
    pair = executors(2, async_slots=10)
    d = Dispatcher(pair)
    assert d.room() == 2  # nothing seen yet: sized for sync jobs, never more than can start
    for _ in range(30):
        d.add(job(COROUTINE))
    d.ready.clear()
    assert 18 <= d.room() <= 20
    assert d.has_free_place()


def test_the_slots_show_every_started_job_and_its_start(executors):
    (only,) = executors(1, async_slots=3)
    for seq in (4, 5, 6):
        only.send(seq, job(COROUTINE), None, coroutine=True)
    for slot, seq in ((0, 5), (2, 4)):  # as the child marks them, in any slot
        seq_at, start_at = slot_fields(slot)
        only.status[start_at] = 100.0 + seq
        only.status[seq_at] = float(seq)
    only.status[TAKEN] = 5.0
    assert only.started() == {4: 104.0, 5: 105.0}
    assert only.running() == (4, 104.0)


def started_coroutines(executor, begun):
    """Send one coroutine per start time in `begun` and mark each started, as the child does."""
    for slot, began in enumerate(begun):
        seq = slot + 1
        executor.send(seq, job(COROUTINE), None, coroutine=True)
        seq_at, start_at = slot_fields(slot)
        executor.status[start_at] = began
        executor.status[seq_at] = float(seq)
        executor.status[TAKEN] = float(seq)


def test_coroutines_are_sent_ahead_only_for_slots_expected_to_free_within_the_budget(executors):
    (only,) = executors(1, async_slots=3)
    d = dispatcher([only])
    for _ in range(SEEN_BEFORE_SHORT):
        d.observe(COROUTINE, 1.0)
    now = time.monotonic()
    # Ends within the budget; just began; overdue far beyond the budget (it may hang).
    started_coroutines(only, [now - 1.0 + AHEAD_BUDGET / 2, now, now - 5])
    d.seq = 3  # the seqs the dispatcher gave them
    ahead, too_many = job(COROUTINE), job(COROUTINE)
    d.ready.extend([ahead, too_many])
    assert d.dispatch() == [too_many]
    assert ahead in only.inflight.values()
    assert only.waiting() == [4]  # sent, and not started: the worker may take it back


def test_nothing_is_sent_ahead_of_coroutines_of_a_task_not_seen_enough(executors):
    (only,) = executors(1, async_slots=2)
    d = dispatcher([only])
    d.observe(COROUTINE, 0.001)
    now = time.monotonic()
    started_coroutines(only, [now - 1, now - 1])
    waiting = job(COROUTINE)
    d.ready.append(waiting)
    assert d.dispatch() == [waiting]


def test_a_slot_freed_counts_as_room_before_its_outcome_is_read(executors):
    (only,) = executors(1, async_slots=2)
    d = dispatcher([only])
    now = time.monotonic()
    started_coroutines(only, [now, now])
    only.status[slot_fields(0)[0]] = -1.0  # the child answered the first and freed its slot
    assert d.async_room(only, now) == 1


def test_claims_look_ahead_by_the_time_a_claim_takes_to_come_back(executors):
    (only,) = executors(1, async_slots=2)
    d = dispatcher([only])
    for _ in range(SEEN_BEFORE_SHORT):
        d.observe(COROUTINE, 1.0)
    now = time.monotonic()
    started_coroutines(only, [now - 1.0 + AHEAD_BUDGET + 0.2, now])  # ends after the budget
    assert d.async_room(only, now) == 0
    for _ in range(20):
        d.claim_took(0.3)  # jobs claimed now arrive after the first one has ended
    assert d.async_room(only, now) == 1
