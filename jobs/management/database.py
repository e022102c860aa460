"""What a command says when the database fails it: not reached, not migrated, or refusing."""

from contextlib import contextmanager

from django.core.management.base import CommandError
from django.db import DatabaseError, connection

from .. import schema
from ..reconnect import first_line


@contextmanager
def database_errors_explained(*, migrated=False):
    """A database error inside becomes a CommandError saying what is wrong in one line, and
    what to do where that is known (migrate), instead of a traceback. `migrated`: first make
    sure the database holds every migration this code needs (a command that writes jobs must
    not write them into tables a worker of this version then refuses to run on)."""
    try:
        if migrated:
            schema.check_ready()
        yield
    except schema.SchemaNotReady as not_ready:
        raise CommandError(str(not_ready)) from None
    except DatabaseError as error:
        raise CommandError(_explained(error)) from None


def _explained(error: DatabaseError) -> str:
    try:
        schema.check_ready()
    except schema.SchemaNotReady as not_ready:
        return str(not_ready)
    except DatabaseError as unreachable:
        return f"cannot reach the database: {first_line(unreachable)}{_sqlite_file(unreachable)}"
    return f"the database refused: {first_line(error)}"


def _sqlite_file(error: DatabaseError) -> str:
    if connection.vendor != "sqlite" or "unable to open" not in str(error):
        return ""
    name = connection.settings_dict["NAME"]
    return (
        f" ({name}: its folder must exist and this user must be able to write there, as SQLite "
        "writes its -wal and -shm files beside it)"
    )


class ChecksExplained:
    """For a management command: Django's system checks, which open the database before the
    command runs, say what is wrong with it in one line instead of a traceback."""

    def check(self, *args, **kwargs):
        with database_errors_explained():
            return super().check(*args, **kwargs)  # type: ignore[misc]
