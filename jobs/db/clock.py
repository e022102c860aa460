"""Which clock says "now" for decisions several machines must agree on (a schedule's fire times)."""

from datetime import datetime

from django.db import connection
from django.utils import timezone


def database_now() -> datetime:
    """The database server's clock (PostgreSQL), or this machine's (SQLite: one machine)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp()")
            return cursor.fetchone()[0]
    return timezone.now()
