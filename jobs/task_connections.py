"""Django's connections in an executor, put right between jobs: what one task leaves behind
must not reach the next.

A task may leave a transaction open: autocommit switched off and never back on, or an atomic
block entered and never left. Django itself, after a request, drops a connection whose
autocommit was changed (`close_if_unusable_or_obsolete`); an executor runs job after job on
the same connection, so without this every later job would run inside that transaction: its
writes never committed on PostgreSQL, the database locked for every other process on SQLite.
Closing rolls back what the task did not commit, as the end of a request does.
"""

import logging

from django.db import connections

logger = logging.getLogger(__name__)


def tidy(claimed=None) -> None:
    """After a job (`claimed`; None when it cannot be told, as coroutines share a connection):
    give the next one a connection in autocommit, outside any transaction, and working."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if _left_open(conn):
            _roll_back(conn, claimed)
        elif conn.errors_occurred and not conn.is_usable():
            conn.close()


def release_all() -> None:
    """Close every connection (an idle executor holds none), leaving each ready to reopen."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and _left_open(conn):
            _roll_back(conn, None)
        else:
            conn.close()


def _left_open(conn) -> bool:
    return conn.in_atomic_block or conn.autocommit != conn.settings_dict["AUTOCOMMIT"]


def _roll_back(conn, claimed) -> None:
    """Close `conn` (the database rolls back its open transaction) and put a new wrapper in
    its place: inside an atomic block, Django's close() keeps the wrapper marked as closed in
    a transaction, and every later query on it would fail."""
    who = "a job" if claimed is None else f"job {claimed.id} ({claimed.task_path})"
    logger.warning(
        "%s left a database transaction open on %r: rolled back what it did not commit "
        "(commit inside the task, or use transaction.atomic() around the writes)",
        who,
        conn.alias,
    )
    try:
        conn.close()
    except Exception:
        logger.debug("closing a connection left in a transaction failed", exc_info=True)
    connections[conn.alias] = connections.create_connection(conn.alias)
