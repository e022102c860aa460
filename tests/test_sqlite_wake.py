"""Wake-ups on SQLite: a socket per idle worker beside the database file."""

import os
import select
import signal
import socket
import tempfile
from pathlib import Path

import pytest
from django.db import connection, transaction

from jobs.db.sqlite_wake import MAX_SOCKET_PATH, SUFFIX, Waker, Wakeups, folder_for
from jobs.models import Job
from jobs.states import JobState
from tests import tasks
from tests.reliability_helpers import skip_unless_sqlite, wait_for


def readable(wakeups, timeout=0.0) -> bool:
    ready, _, _ = select.select([wakeups.fileno_or_none()], [], [], timeout)
    return bool(ready)


@pytest.fixture
def wakeups(tmp_path):
    w = Wakeups(tmp_path / "db.sqlite3-wake")
    assert w.fileno_or_none() is not None
    yield w
    w.close()


def test_a_wake_reaches_every_waiting_socket_and_drain_empties_it(tmp_path, wakeups):
    other = Wakeups(wakeups.folder)
    other.fileno_or_none()
    try:
        assert Waker(wakeups.folder).wake() == 2
        assert readable(wakeups, 5) and readable(other, 5)
        wakeups.drain()
        assert not readable(wakeups)
    finally:
        other.close()


def test_closing_removes_the_socket_file(wakeups):
    path = Path(wakeups.path)
    assert path.exists()
    wakeups.close()
    assert not path.exists()


def test_a_socket_left_by_a_worker_that_died_is_removed_at_the_next_wake(tmp_path):
    folder = tmp_path / "db.sqlite3-wake"
    folder.mkdir()
    stale = folder / f"12345-dead{SUFFIX}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(stale))
    s.close()  # the file stays, nobody reads it

    assert Waker(folder).wake() == 0
    assert not stale.exists()


def test_a_full_socket_buffer_neither_blocks_nor_fails_the_sender(wakeups):
    waker = Waker(wakeups.folder)
    for _ in range(10_000):
        waker.wake()  # never blocks: the worker is awake already

    assert readable(wakeups)


def test_a_database_in_memory_has_no_wake_up_folder():
    assert folder_for(":memory:") is None
    assert folder_for("file:memorydb_default?mode=memory&cache=shared") is None


def test_the_folder_sits_beside_the_database_file(tmp_path):
    short = Path(tempfile.mkdtemp(prefix="w", dir="/tmp"))
    try:
        assert folder_for(str(short / "app.sqlite3")) == short / "app.sqlite3-wake"
    finally:
        short.rmdir()


def test_a_path_too_long_for_a_socket_falls_back_to_the_temporary_directory(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "app.sqlite3"

    folder = folder_for(str(deep))

    assert folder.parent != deep.parent
    assert len(str(folder / f"{'9' * 10}-{'f' * 8}{SUFFIX}")) <= MAX_SOCKET_PATH


def test_an_unwritable_folder_leaves_the_worker_polling(tmp_path, caplog):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")

    assert Wakeups(blocked / "x-wake").fileno_or_none() is None
    assert "polling for new jobs" in caplog.text


# --- through the engine, on the test database ------------------------------------------------


@pytest.fixture
def database_wakeups():
    skip_unless_sqlite()
    from jobs import db

    w = db.listener({})
    assert w is not None and w.fileno_or_none() is not None
    yield w
    w.close()


@pytest.mark.django_db(transaction=True)
def test_enqueueing_a_job_wakes_a_waiting_worker_socket(database_wakeups):
    tasks.add.enqueue(1, 2)

    assert readable(database_wakeups, 5)


@pytest.mark.django_db(transaction=True)
def test_a_transaction_wakes_only_once_it_commits(database_wakeups):
    with transaction.atomic():
        for i in range(50):
            tasks.add.enqueue(i, i)
        assert not readable(database_wakeups)
        pending = [f for _, f, _ in connection.run_on_commit]
        assert len(pending) == 1  # one wake-up for the whole transaction

    assert readable(database_wakeups, 5)


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_enqueue_wakes_nobody_and_later_ones_still_do(database_wakeups):
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.enqueue(1, 1)
        raise RuntimeError("rolled back")
    assert not readable(database_wakeups)

    with transaction.atomic():
        tasks.add.enqueue(2, 2)
    assert readable(database_wakeups, 5)


@pytest.mark.django_db(transaction=True)
def test_a_running_worker_binds_its_socket_and_removes_it_when_it_stops(start_worker):
    skip_unless_sqlite()
    folder = folder_for(connection.settings_dict["NAME"])
    proc = start_worker("--concurrency", "1")
    wait_for(
        lambda: any(n.endswith(SUFFIX) for n in os.listdir(folder)) if folder.exists() else False,
        timeout=60,
        what="the worker's wake-up socket",
    )
    result = tasks.add.enqueue(20, 22)
    wait_for(
        lambda: Job.objects.get(id=result.id).state == JobState.SUCCEEDED,
        timeout=60,
        what="the job to run",
    )

    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert not [n for n in os.listdir(folder) if n.endswith(SUFFIX)]
