"""NOTIFY and LISTEN on PostgreSQL: how a statement that makes a job due wakes idle workers.

Every such statement sends one NOTIFY on NOTIFY_CHANNEL (ids never in the payload; for an
insert, the job table's insert trigger sends it: migration 0022); an idle worker waits on a
`Listener`, a connection of its own that LISTENs there.
"""

import logging
import time

from .pooler import direct_listen_url, is_pooled, raw_params

logger = logging.getLogger(__name__)

NOTIFY_CHANNEL = "jobsite_jobs"
NOTIFY = f"SELECT pg_notify('{NOTIFY_CHANNEL}', '')"

# Seconds before trying again after the listening connection failed to open, or broke.
RETRY_AFTER_FAILED_CONNECT = 5
RETRY_AFTER_BREAK = 1


def listener_for(connection, options):
    """The worker's Listener: on the connection's database, or on OPTIONS['LISTEN_DATABASE_URL'];
    None through a transaction-mode pooler (LISTEN needs a session of its own)."""
    url = options.get("LISTEN_DATABASE_URL")
    if url:
        import psycopg

        try:
            return Listener(connect_params={"conninfo": direct_listen_url(url)})
        except psycopg.OperationalError as e:
            # As for the database itself, a server not up yet is waited for, not fatal: the
            # listener checks the URL again each time it tries to connect.
            logger.warning(
                "LISTEN_DATABASE_URL does not answer (%s): polling for new jobs until it does",
                str(e).strip(),
            )
            return Listener(connect_params=lambda: {"conninfo": direct_listen_url(url)})
    if is_pooled(connection):
        logger.warning(
            "the database is reached through a transaction-mode pooler: polling for new "
            "jobs (set OPTIONS['LISTEN_DATABASE_URL'] to a direct connection to be woken)"
        )
        return None
    return Listener(connect_params=lambda: raw_params(connection))


class Listener:
    """LISTEN for new-job notifications; reconnects when cut off (jobs.db.records.Listener)."""

    def __init__(self, connect_params):
        # psycopg.connect() arguments, or a callable giving them when it (re)connects.
        self.connect_params = connect_params
        self.conn = None
        self.retry_at = 0.0

    def connect(self):
        import psycopg

        params = self.connect_params
        params = params() if callable(params) else params
        self.conn = psycopg.connect(**params, autocommit=True)
        self.conn.execute(f"LISTEN {NOTIFY_CHANNEL}")

    def fileno_or_none(self):
        if self.conn is None:
            if time.monotonic() < self.retry_at:
                return None
            try:
                self.connect()
            except Exception as e:
                logger.warning("cannot listen for new jobs (%s); polling until it works", e)
                self.conn = None
                self.retry_at = time.monotonic() + RETRY_AFTER_FAILED_CONNECT
                return None
        return self.conn.fileno()

    def drain(self):
        try:
            for _ in self.conn.notifies(timeout=0):
                pass
        except Exception:
            self.close()
            self.retry_at = time.monotonic() + RETRY_AFTER_BREAK

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None
