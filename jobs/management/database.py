"""What a command says when the database fails it: not reached, not migrated, or refusing."""

from contextlib import contextmanager

from django.core.management.base import CommandError
from django.db import DatabaseError

from .. import schema
from ..reconnect import first_line


@contextmanager
def database_errors_explained():
    """A database error inside becomes a CommandError saying what is wrong in one line, and
    what to do where that is known (migrate), instead of a traceback."""
    try:
        yield
    except DatabaseError as error:
        raise CommandError(_explained(error)) from None


def _explained(error: DatabaseError) -> str:
    try:
        schema.check_ready()
    except schema.SchemaNotReady as not_ready:
        return str(not_ready)
    except DatabaseError as unreachable:
        return f"cannot reach the database: {first_line(unreachable)}"
    return f"the database refused: {first_line(error)}"
