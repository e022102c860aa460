"""An executor's side of the pipe (jobs.executor_loop), driven in the test process: coroutines
sent beyond its free slots wait there, in order, and start as slots free.

The loop runs in a thread on one end of a real pipe; the test is the worker on the other end.
"""

import asyncio
import json
import multiprocessing
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jobs.executor_loop import RELEASE_UP_TO, TAKEN, ExecutorLoop, new_status, started_jobs
from jobs.outcome import RanKind
from jobs.pool.wire import _dumps, _job_codec, _ran_codec
from tests.factories import make_claimed
from tests.reliability_helpers import wait_for

AWAITS = "tests.tasks.awaits"


@pytest.fixture
def executor(tmp_path, monkeypatch):
    """(send, answers, status, stop_flag) of an executor loop with 2 coroutine slots."""
    monkeypatch.setenv("JOBSITE_TEST_LEDGER", str(tmp_path / "ledger"))
    ours, theirs = multiprocessing.Pipe()
    status = new_status(2)
    stop_flag = threading.Event()
    loop = ExecutorLoop(
        theirs,
        status,
        threading.Lock(),
        stop_flag,
        "test-worker",
        codecs=(_job_codec(), _ran_codec()),
        dumps=_dumps,
        tidy=lambda claimed=None: None,
    )
    serving = threading.Thread(target=loop.serve, daemon=True)
    serving.start()
    answers: dict[int, object] = {}

    def read():
        while ours.poll(0):
            seq, *values = pickle.loads(ours.recv_bytes())
            answers[seq] = _ran_codec().build(values)
        return answers

    def send(seq, key, seconds, task_path=AWAITS, timeout=None):
        claimed = make_claimed(task_path)
        claimed.args_json = json.dumps([key, seconds])
        claimed.timeout = timeout
        claimed.lease_until = time.monotonic() + 60
        ours.send_bytes(_dumps((seq, *_job_codec().flat(claimed))))

    def cancel(seq):
        ours.send_bytes(_dumps((-seq,)))

    yield send, cancel, read, status, stop_flag
    stop_flag.set()
    ours.send_bytes(_dumps(None))
    serving.join(10)
    ours.close()


def ledger(tmp_path):
    path = tmp_path / "ledger"
    return path.read_text().split() if path.exists() else []


def test_coroutines_beyond_the_free_slots_wait_and_start_in_order_as_slots_free(executor, tmp_path):
    send, _, read, status, _ = executor
    send(1, "first", 0.3)
    send(2, "second", 0.6)
    send(3, "third", 0)
    wait_for(lambda: len(started_jobs(status)) == 2, timeout=10, what="two coroutines started")
    assert status[TAKEN] == 2.0  # the third waits: not started, so the worker may take it back
    wait_for(lambda: 3 in read(), timeout=10, what="the third to end")
    assert [read()[seq].kind for seq in (1, 3)] == [RanKind.OK, RanKind.OK]
    started = [line for line in ledger(tmp_path) if line.startswith("start:")]
    assert started == ["start:first", "start:second", "start:third"]
    assert "end:second" not in ledger(tmp_path)  # the third took the first's slot


def test_a_cancelled_waiting_coroutine_fails_as_cancelled_without_running(executor, tmp_path):
    send, cancel, read, status, _ = executor
    send(1, "first", 0.3)
    send(2, "second", 0.3)
    send(3, "doomed", 0)
    cancel(3)
    wait_for(lambda: 3 in read(), timeout=10, what="the cancelled one to answer")
    assert read()[3].error_type == "JobCancelled"
    assert "start:doomed" not in ledger(tmp_path)


def test_a_stop_hands_back_the_waiting_coroutines_unstarted(executor, tmp_path):
    send, _, read, status, stop_flag = executor
    send(1, "first", 1)
    send(2, "second", 1)
    send(3, "waiting", 0)
    wait_for(lambda: len(started_jobs(status)) == 2, timeout=10, what="two coroutines started")
    stop_flag.set()
    wait_for(lambda: 3 in read(), timeout=10, what="the waiting one handed back")
    assert read()[3].kind == RanKind.RELEASED
    assert 1 not in read() and 2 not in read()  # the started ones run on to their end
    wait_for(lambda: {1, 2} <= set(read()), timeout=10, what="the started ones to end")
    assert "start:waiting" not in ledger(tmp_path)


def test_a_waiting_coroutine_the_worker_took_back_is_answered_released_and_never_runs(
    executor, tmp_path
):
    send, _, read, status, _ = executor
    send(1, "first", 0.5)
    send(2, "second", 0.5)
    send(3, "taken-back", 0)
    wait_for(lambda: len(started_jobs(status)) == 2, timeout=10, what="two coroutines started")
    # What the worker's take-back writes (Executor.take_back_waiting): every job after the last
    # one the child started is the worker's again.
    assert status[TAKEN] == 2.0
    status[RELEASE_UP_TO] = 3.0
    wait_for(lambda: {1, 2, 3} <= set(read()), timeout=10, what="all three answered")
    assert [read()[seq].kind for seq in (1, 2, 3)] == [RanKind.OK, RanKind.OK, RanKind.RELEASED]
    assert "start:taken-back" not in ledger(tmp_path)


def test_a_coroutine_that_returns_after_holding_the_loop_past_its_timeout_timed_out(
    executor, tmp_path
):
    # Its timeout's timer cannot run while it holds the loop: the cancel never reaches it.
    send, _, read, _, _ = executor
    send(1, "blocker", 0.6, task_path="tests.tasks.blocks_loop", timeout=0.2)
    send(2, "in-time", 0, timeout=5)
    wait_for(lambda: {1, 2} <= set(read()), timeout=10, what="both answered")
    assert (read()[1].kind, read()[1].error_type) == (RanKind.ERROR, "JobTimeout")
    assert read()[2].kind == RanKind.OK
    assert "end:blocker" in ledger(tmp_path)  # it did return, too late


def test_a_sync_job_that_returns_past_its_timeout_before_it_is_stopped_timed_out(
    executor, tmp_path
):
    # The worker stops a sync job at its timeout from outside; one whose end it sees first
    # (here there is no worker to stop it) is judged by the same rule as a coroutine.
    send, _, read, _, _ = executor
    send(1, "late", 0.6, task_path="tests.tasks.ledger_span", timeout=0.2)
    send(2, "in-time", 0, task_path="tests.tasks.ledger_span", timeout=5)
    wait_for(lambda: {1, 2} <= set(read()), timeout=10, what="both answered")
    assert (read()[1].kind, read()[1].error_type) == (RanKind.ERROR, "JobTimeout")
    assert read()[2].kind == RanKind.OK
    assert "end:late" in ledger(tmp_path)  # it did return, too late


def _run_a_loop_that_a_job_closed():
    ours, theirs = multiprocessing.Pipe()
    executor = ExecutorLoop(
        theirs,
        new_status(1),
        threading.Lock(),
        threading.Event(),
        "test-worker",
        codecs=(_job_codec(), _ran_codec()),
        dumps=_dumps,
        tidy=lambda claimed=None: None,
    )
    executor.loop = asyncio.new_event_loop()
    # As if a job stopped the loop and another thread of it closed the loop before it ran again.
    executor.loop.run_forever = executor.loop.close
    executor._run_loop()


def test_an_event_loop_a_job_closed_ends_the_executor_instead_of_spinning(subprocess_env):
    # A stopped loop runs again (tests/test_async_execution.py); a closed one cannot, and
    # running it again would fail at once, for ever. The process ends, and the worker settles
    # its jobs as for any executor that dies.
    code = (
        "import django; django.setup(); "
        "from tests.test_executor_loop import _run_a_loop_that_a_job_closed as run; run()"
    )
    child = subprocess.run(
        [sys.executable, "-c", code],
        env=subprocess_env,
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 70, child.stderr[-2000:]
    assert "this executor's event loop was closed" in child.stderr
