"""Database errors a worker rides out: which ones pass (a cut connection, a lock), and
starting over with a fresh connection."""

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
