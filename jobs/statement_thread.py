"""A worker's finish-and-claim transaction on a thread of its own, with a connection of its own,
so that the worker's loop reads outcomes and feeds executors while the database works.

At most one call is in flight. The loop sends it, goes on, and takes its result on its own
thread once the socket here wakes it (`fileno`): what a result changes (held jobs, the
dispatcher, the log) is only ever touched by the loop.
"""

from concurrent.futures import Future, ThreadPoolExecutor

from django.db import DEFAULT_DB_ALIAS, connection, connections

from .db.unpooled import unpooled_connection
from .reconnect import DB_ERRORS, is_transient, reset_connection
from .wake_socket import WakeSocket


class StatementThread:
    def __init__(self, *, unpooled: bool):
        # With Django's pool the worker's loop works on a connection outside it (Worker.
        # _own_connection); the thread does the same.
        self.pool = ThreadPoolExecutor(
            1, "jobsite-statements", initializer=self._start, initargs=(unpooled,)
        )
        self.socket = WakeSocket()
        self.future: Future | None = None

    @staticmethod
    def _start(unpooled: bool):
        if unpooled:
            connections[DEFAULT_DB_ALIAS] = unpooled_connection(DEFAULT_DB_ALIAS)

    def fileno(self) -> int:
        """Readable once the call in flight is done."""
        return self.socket.fileno()

    def done(self) -> bool:
        return self.future is not None and self.future.done()

    def send(self, fn, *args, **kwargs) -> None:
        assert self.future is None, "one call in flight at a time"
        self.future = self.pool.submit(self._call, fn, args, kwargs)
        self.future.add_done_callback(lambda future: self.socket.wake())

    def take(self):
        """The result of the call in flight (waited for), or the exception it raised."""
        future, self.future = self.future, None
        assert future is not None, "no call in flight"
        try:
            return future.result()
        finally:
            self.socket.drain()

    def close(self) -> None:
        """Wait for the call in flight (its result is dropped), close the thread's connection and
        the thread."""
        if self.future is not None:
            self.future.exception()
            self.future = None
        try:
            # Looked up on the thread: `connection` is each thread's own.
            self.pool.submit(lambda: connection.close()).result()
        except DB_ERRORS:
            pass
        self.pool.shutdown(wait=True)
        self.socket.close()

    @staticmethod
    def _call(fn, args, kwargs):
        try:
            return fn(*args, **kwargs)
        except DB_ERRORS as e:
            if is_transient(e):  # a cut connection: the thread's next call starts on a fresh one
                reset_connection()
            raise
