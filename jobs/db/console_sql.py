"""What the console asks of the database that depends on which database it is.

The console (`dashboard`) reads through these instead of asking for the connection's vendor
itself; the engine never imports the console.
"""

import json
from datetime import UTC, datetime

from django.db import connection


def row_estimate(sql: str, params) -> int | None:
    """The planner's estimate of how many rows the SELECT `sql` returns, without running it;
    None where the database keeps no per-value statistics (SQLite)."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def read_timestamp(value) -> datetime:
    """A timestamp read from a raw cursor, aware: SQLite hands back text, naive in UTC."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
