"""What the console's per-queue queries read (dashboard/queue_rows.py)."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard import queue_rows


def plan_of(sql: str) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + sql)
            return "\n".join(str(row[3]) for row in cursor.fetchall())
        cursor.execute("SET LOCAL enable_seqscan = off")  # an empty table: which index, if any
        cursor.execute("EXPLAIN " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.django_db
def test_the_oldest_due_job_of_a_queue_is_looked_up_in_the_queue_claim_index():
    with CaptureQueriesContext(connection) as captured:
        queue_rows.oldest_due("default", timezone.now())
    (query,) = captured.captured_queries

    plan = plan_of(query["sql"])

    assert "job_claimable_queue" in plan, plan
    assert not re.search(r"job_claimable(?!_queue)", plan), plan
