"""What only the SQLite engine does (jobs/db/sqlite.py)."""

import pytest
from django.db import OperationalError, connection

from jobs import db
from jobs.db import sqlite

pytestmark = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="the SQLite engine's own statements"
)


def claim_plan(queues):
    engine = db.engine()
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN QUERY PLAN " + engine.claim_sql(queues),
            engine.claim_params("0" * 32, 60.0, "w", queues, 10),
        )
        return [row[3] for row in cursor.fetchall()]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "queues, index", [(None, "job_claimable"), (["default"], "job_claimable_queue")]
)
def test_a_claim_reads_due_jobs_in_claim_order_from_a_claim_index(queues, index):
    plan = claim_plan(queues)
    assert any(f"USING INDEX {index}" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan


@pytest.mark.django_db
@pytest.mark.parametrize("queues", [["emails", "default"], ["default", "a", "b"]])
def test_a_claim_of_several_queues_reads_each_queue_in_claim_order_and_merges(queues):
    plan = claim_plan(queues)
    searches = [s for s in plan if "USING INDEX job_claimable_queue (queue_name=?)" in s]
    assert len(searches) == len(queues), plan
    # One sort: the merge of each queue's first LIMIT rows, not of every due row.
    assert sum("TEMP B-TREE" in step for step in plan) == 1, plan


@pytest.mark.django_db
def test_a_failing_statement_on_sqlite3s_own_cursor_raises_djangos_database_error():
    # The worker tells a database outage from a bug by Django's exception classes.
    with pytest.raises(OperationalError), sqlite.raw_cursor() as cursor:
        cursor.execute("SELECT * FROM no_such_table WHERE id = ?", [1])
    assert connection.errors_occurred
