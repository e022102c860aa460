"""A connection of its own, outside Django's connection pool.

With `OPTIONS["pool"]`, every connection Django opens for an alias comes from psycopg_pool, and
while the database is out of reach opening one waits inside the pool (its `timeout`, 30 s by
default) instead of failing. A caller that must give up quickly and go on without the database
(an executor's progress and log lines, whose attempt's outcome waits behind them) opens its
connection directly instead: it fails as soon as the database refuses it.
"""

from django.db import connections
from django.db.utils import load_backend


def unpooled_connection(alias):
    """A new, not yet opened connection wrapper for `alias`, never taken from a pool."""
    settings = dict(connections.settings[alias])
    settings["OPTIONS"] = {
        name: value for name, value in settings.get("OPTIONS", {}).items() if name != "pool"
    }
    return load_backend(settings["ENGINE"]).DatabaseWrapper(settings, alias)
