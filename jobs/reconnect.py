"""Database errors a worker rides out: which ones pass (a cut connection, a lock), and
starting over with a fresh connection; and an operator action made again when PostgreSQL chose
its transaction as a deadlock's victim."""

import functools
import logging

from django.db import (
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
    connection,
)

DB_ERRORS = (OperationalError, InterfaceError, DatabaseError)

# SQLSTATE of "deadlock detected": PostgreSQL rolled the transaction back to break a cycle.
DEADLOCK = "40P01"
DEADLOCK_TRIES = 5

logger = logging.getLogger(__name__)


def is_deadlock(error: BaseException) -> bool:
    return getattr(error.__cause__, "sqlstate", None) == DEADLOCK


def again_after_deadlock(action):
    """`action`, made again (up to DEADLOCK_TRIES times in all) when PostgreSQL rolled its
    transaction back as a deadlock's victim.

    Actions and a worker's finish lock the jobs of one kind in id order, but a finish holds
    the jobs it finishes while it locks the jobs after them, and an action over a graph may
    lock a job in the middle before the one before it: a cycle now and then cannot be ruled
    out, and PostgreSQL breaks it by rolling one side back.
    The worker writes its outcomes again; the action, rolled back whole, is made again the same
    way. Only an action that runs its own outermost transaction is made again: inside a
    caller's, the caller's transaction is the one rolled back, and the error is the caller's.
    """

    @functools.wraps(action)
    def made(*args, **kwargs):
        tries = 1
        while True:
            outermost = not connection.in_atomic_block
            try:
                return action(*args, **kwargs)
            except OperationalError as e:
                if not (outermost and is_deadlock(e)) or tries >= DEADLOCK_TRIES:
                    raise
                logger.info("%s: deadlock detected; made again", action.__name__)
                tries += 1

    return made


def is_transient(error) -> bool:
    if isinstance(error, OperationalError | InterfaceError):
        return True
    if isinstance(error, IntegrityError | DataError | ProgrammingError):
        return False  # a statement that is wrong stays wrong; retrying it would wedge us
    # Only the first line: DETAIL lines quote row data (tracebacks, messages).
    text = str(error).strip().splitlines()[0].lower() if str(error).strip() else ""
    # "received 2 results from command 'COMMIT'": a pooler (PgBouncer) passing on the error of
    # a server session killed under a transaction; the connection is unusable, and the retry
    # is fenced by the lease like any other.
    return any(
        word in text
        for word in (
            "locked",
            "connection",
            "terminat",
            "server closed",
            "shutdown",
            "could not",
            "results from command",
        )
    )


def reset_connection():
    try:
        connection.close()
    except Exception:
        connection.connection = None


def first_line(error: BaseException) -> str:
    """The first line of a database error's text (its details follow on the next ones)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
