"""Whether a PostgreSQL database is reached through a transaction-mode pooler.

PgBouncer in transaction (or statement) mode, Supavisor's transaction port and the like hand
each transaction to whichever server session is free: nothing a session remembers (prepared
statements, SET, LISTEN, advisory locks) survives from one transaction to the next. The engine
asks here once per process and database, and then keeps its hot statements unprepared, makes
the worker's settings per transaction, and listens only on a direct connection.

The probe, with two client connections: through such a pooler a session freed by one client is
handed to the next (PgBouncer reuses the last freed one first), or one client's statements in a
row run in different sessions (PgBouncer's `server_round_robin` hands out the least recently
used one first, so two clients taking turns would each keep one); directly (or through a
session-mode pooler) every client keeps one session of its own. Three rounds, each a handful of
one-row statements, never prepared: a prepared statement lives in one session only.
"""

import threading

from django.core.exceptions import ImproperlyConfigured

_known: dict[tuple, bool] = {}
_lock = threading.Lock()

PROBE_ROUNDS = 3


def raw_params(conn) -> dict:
    """psycopg.connect() arguments for a plain connection to the database of Django's `conn`."""
    params = conn.get_connection_params()
    for django_only in ("cursor_factory", "context", "prepare_threshold", "server_side_binding"):
        params.pop(django_only, None)
    return params


def _key(conn) -> tuple:
    s = conn.settings_dict
    return (s.get("HOST"), s.get("PORT"), s.get("NAME"), s.get("USER"))


def is_pooled(conn) -> bool:
    """Whether Django's connection `conn` (PostgreSQL) goes through a transaction-mode pooler."""
    key = _key(conn)
    if key not in _known:
        with _lock:
            if key not in _known:
                _known[key] = sessions_are_shared(raw_params(conn))
    return _known[key]


def sessions_are_shared(params: dict | str) -> bool:
    """Whether clients of this database share server sessions (see the module's text).

    `params`: psycopg.connect() keyword arguments, or a connection string/URL.
    """
    import psycopg

    def connect():
        if isinstance(params, str):
            return psycopg.connect(params, autocommit=True, prepare_threshold=None)
        return psycopg.connect(**params, autocommit=True, prepare_threshold=None)

    def pid(c):
        return c.execute("SELECT pg_backend_pid()").fetchone()[0]

    with connect() as first, connect() as second:
        for _ in range(PROBE_ROUNDS):
            before, again, other, after = pid(first), pid(first), pid(second), pid(first)
            if again != before or other == before or after != before:
                return True
    return False


def direct_listen_url(url: str) -> str:
    """OPTIONS["LISTEN_DATABASE_URL"], checked: LISTEN needs a session of its own.

    ImproperlyConfigured for a URL that cannot work (not a URL, or through a pooler);
    psycopg.OperationalError while its server does not answer (it may later).
    """
    import psycopg

    try:
        shared = sessions_are_shared(url)
    except psycopg.OperationalError:
        raise
    except Exception as e:
        raise ImproperlyConfigured(f"LISTEN_DATABASE_URL: {e}") from None
    if shared:
        raise ImproperlyConfigured(
            "LISTEN_DATABASE_URL goes through a transaction-mode pooler, where LISTEN loses its "
            "notifications: point it at PostgreSQL directly (or a session-mode pool), or leave "
            "it out and the worker polls."
        )
    return url
