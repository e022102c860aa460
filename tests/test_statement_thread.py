"""The worker's statement thread: one call in flight, on a connection of its own, its end woken
through a socket, a failed connection replaced, everything closed at the end."""

import select
import threading
import time

import pytest
from django.db import DataError, OperationalError, connection, transaction

from jobs.db.pooler import is_pooled
from jobs.statement_thread import StatementThread
from tests.reliability_helpers import skip_unless_postgres

pytestmark = pytest.mark.django_db(transaction=True)


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def live_backends(pids) -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", [list(pids)])
        return {pid for (pid,) in cursor.fetchall()}


def skip_unless_own_sessions():
    skip_unless_postgres("a connection per thread")
    if is_pooled(connection):
        pytest.skip("a transaction pooler shares server sessions between connections")


def readable(thread: StatementThread, timeout: float) -> bool:
    return bool(select.select([thread.fileno()], [], [], timeout)[0])


@pytest.fixture
def statements():
    skip_unless_own_sessions()
    thread = StatementThread(unpooled=False)
    yield thread
    thread.close()


def test_a_call_runs_on_a_connection_of_its_own_and_the_next_on_the_same(statements):
    statements.send(backend_pid)
    theirs = statements.take()
    statements.send(backend_pid)

    assert theirs != backend_pid()
    assert statements.take() == theirs


def test_the_socket_wakes_the_loop_once_the_call_is_done_and_not_before(statements):
    go = threading.Event()
    statements.send(lambda: go.wait(10) and "done")

    assert not readable(statements, 0.2)
    assert not statements.done()
    go.set()
    assert readable(statements, 10)
    assert statements.done()
    assert statements.take() == "done"
    assert not readable(statements, 0)  # taken: the wake-up is consumed with it


def test_one_call_at_a_time(statements):
    go = threading.Event()
    statements.send(go.wait, 10)
    with pytest.raises(AssertionError, match="one call in flight"):
        statements.send(backend_pid)
    go.set()
    assert statements.take() is True


def test_a_call_cut_off_raises_at_take_and_the_next_one_gets_a_fresh_connection(statements):
    statements.send(backend_pid)
    first = statements.take()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [first])

    statements.send(backend_pid)
    with pytest.raises(OperationalError):
        statements.take()
    statements.send(backend_pid)
    second = statements.take()

    assert second != first
    assert live_backends([second]) == {second}


def test_an_error_of_the_call_itself_comes_back_at_take(statements):
    def broken():
        raise ValueError("not storable")

    statements.send(broken)
    with pytest.raises(ValueError, match="not storable"):
        statements.take()
    statements.send(backend_pid)
    assert statements.take() > 0  # the thread goes on


def test_a_statement_the_database_refuses_keeps_the_threads_connection(statements):
    def refused():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT %s::int", ["not a number"])

    statements.send(backend_pid)
    before = statements.take()
    statements.send(refused)
    with pytest.raises(DataError):
        statements.take()
    statements.send(backend_pid)

    assert statements.take() == before  # only a cut connection is replaced


def test_closing_waits_for_the_call_in_flight_and_closes_the_threads_connection():
    skip_unless_own_sessions()
    thread = StatementThread(unpooled=False)
    thread.send(backend_pid)
    pid = thread.take()
    go = threading.Event()
    finished = []
    thread.send(lambda: finished.append(go.wait(10)))
    threading.Timer(0.2, go.set).start()

    thread.close()

    assert finished == [True]
    gone_by = time.monotonic() + 10  # the server ends the session a moment after the client
    while live_backends([pid]) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert live_backends([pid]) == set()
