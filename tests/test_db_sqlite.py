"""What only the SQLite engine does (jobs/db/sqlite.py)."""

import sqlite3
import uuid
from datetime import timedelta

import pytest
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from jobs import db
from jobs.compat import task_backends
from jobs.db import sqlite
from jobs.models import CounterDelta, Job
from jobsite.tasks import noop

pytestmark = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="the SQLite engine's own statements"
)


def plan(statement, params):
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + statement.replace("?", "%s"), params)
        return [row[3] for row in cursor.fetchall()]


def walk_plans(shape):
    """The plan of each statement of a claim's walk (engine.walk), by name."""
    top, below, due, claim = db.engine().walk[shape]
    asked = ["default"] if shape else []
    return {
        "top": plan(top, asked),
        "below": plan(below, [*asked, 0]),
        "due": plan(due, [*asked, 0, 10]),
        "claim": plan(claim, ["0" * 32, 60.0, "w", *asked, 0, 10]),
    }


@pytest.mark.django_db
@pytest.mark.parametrize("shape, index", [(0, "job_claimable"), (1, "job_claimable_queue")])
def test_each_step_of_a_claims_walk_reads_a_claim_index_in_order(shape, index):
    for steps in walk_plans(shape).values():
        assert any(f"USING INDEX {index}" in step for step in steps), steps
        assert not any("TEMP B-TREE" in step for step in steps), steps


@pytest.mark.django_db
def test_a_claim_reads_one_priority_level_at_a_time():
    plans = walk_plans(1)
    assert "(queue_name=? AND priority<?)" in plans["below"][0]
    assert "(queue_name=? AND priority=? AND run_after<?)" in plans["due"][0]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "narrowed, index",
    [
        ({}, "job_recent"),
        ({"state": "pending"}, "job_state_recent"),
        ({"queue_name": "default"}, "job_queue_recent"),
        ({"task_path": "jobsite.tasks.noop"}, "job_task_recent"),
    ],
)
def test_newest_first_lists_walk_their_ascending_index_from_the_end(narrowed, index):
    at = timezone.now()  # a later page's cursor
    pages = [
        Job.objects.filter(**narrowed),
        Job.objects.filter(**narrowed, enqueued_at__lte=at).filter(
            Q(enqueued_at__lt=at) | Q(id__lt=uuid.uuid4())
        ),
    ]
    for page in pages:
        query = page.order_by("-enqueued_at", "-id")[:51].query
        statement, params = query.sql_with_params()
        steps = plan(statement, params)
        assert steps[0].startswith(f"SEARCH jobs_job USING INDEX {index}") or steps[0] == (
            f"SCAN jobs_job USING INDEX {index}"
        ), steps
        assert not any("TEMP B-TREE" in step for step in steps), steps


@pytest.mark.django_db
def test_a_claim_of_several_queues_updates_the_jobs_it_picked_by_their_primary_key():
    steps = plan(db.engine().claim_ids_sql, ["0" * 32, 60.0, "w", "[]"])
    assert steps[0].startswith("SEARCH jobs_job USING INDEX sqlite_autoindex_jobs_job"), steps


@pytest.mark.django_db
@pytest.mark.parametrize("queues", [None, ["default"], ["emails", "default"]])
def test_jobs_of_a_higher_priority_not_yet_due_cost_a_claim_nothing(queues):
    noop.enqueue_many([((), {})] * 5)

    def steps_of_a_claim():
        # The virtual machine's steps, counted in hundreds: how much a claim reads, not time.
        steps = []
        connection.connection.set_progress_handler(lambda: steps.append(1) and 0, 100)
        try:
            with transaction.atomic():
                assert len(db.claim(worker_id="w", queues=queues, limit=4, lease_seconds=60)) == 4
                transaction.set_rollback(True)
        finally:
            connection.connection.set_progress_handler(None, 100)
        return len(steps)

    alone = steps_of_a_claim()
    ids = noop.using(priority=10).enqueue_many([((), {})] * 2000)
    Job.objects.filter(id__in=ids).update(run_after=timezone.now() + timedelta(days=1))

    assert steps_of_a_claim() <= alone + 5


@pytest.mark.django_db
def test_a_failing_statement_on_sqlite3s_own_cursor_raises_djangos_database_error():
    # The worker tells a database outage from a bug by Django's exception classes.
    with pytest.raises(OperationalError), sqlite.raw_cursor() as cursor:
        cursor.execute("SELECT * FROM no_such_table WHERE id = ?", [1])
    assert connection.errors_occurred


def jobs_and_count():
    return Job.objects.count(), CounterDelta.objects.totals().get("jobs_enqueued", 0)


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_outside_a_transaction_commits_the_job_and_its_count_and_ends_its_own():
    noop.enqueue()
    assert not connection.connection.in_transaction
    assert jobs_and_count() == (1, 1)


@pytest.mark.django_db(transaction=True)
def test_a_failed_insert_outside_a_transaction_leaves_nothing_open_and_the_next_one_lands():
    row = task_backends["default"].job_row(noop, (), {})
    db.insert_job(row)
    with pytest.raises(IntegrityError):
        db.insert_job(row)  # the same id again
    assert not connection.connection.in_transaction
    assert jobs_and_count() == (1, 1)
    noop.enqueue()
    assert jobs_and_count() == (2, 2)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "counted_before, refused",
    [
        (0, "INSERT"),  # the name's first count inserts its row
        (1, "UPDATE"),  # a later count adds to that row in place
    ],
)
def test_a_job_whose_count_fails_is_not_inserted_either(counted_before, refused):
    for _ in range(counted_before):
        noop.enqueue()
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMP TRIGGER no_counting BEFORE {refused} ON jobs_counterdelta "
            "BEGIN SELECT RAISE(ABORT, 'counting refused'); END"
        )
    try:
        with pytest.raises(IntegrityError, match="counting refused"):
            noop.enqueue()
        assert not connection.connection.in_transaction
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER no_counting")
    assert jobs_and_count() == (counted_before, counted_before)


@pytest.mark.django_db(transaction=True)
def test_counts_add_to_each_names_newest_row_in_place():
    for _ in range(3):
        noop.enqueue()
    noop.enqueue_many([((), {})] * 4)
    db.add_counters({"jobs_succeeded": 2, "jobs_failed": 0})
    db.add_counters({"jobs_succeeded": 1})
    rows = sorted(CounterDelta.objects.values_list("name", "value"))
    assert rows == [("jobs_enqueued", 7), ("jobs_succeeded", 3)]


@pytest.mark.django_db(transaction=True)
def test_counts_after_a_fold_add_to_the_folded_row():
    CounterDelta.objects.bulk_create(
        [CounterDelta(name="jobs_enqueued", value=5), CounterDelta(name="jobs_enqueued", value=6)]
    )
    db.compact_counters()
    noop.enqueue()
    assert list(CounterDelta.objects.values_list("name", "value")) == [("jobs_enqueued", 12)]


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_in_the_callers_transaction_is_rolled_back_with_it():
    with pytest.raises(RuntimeError), transaction.atomic():
        noop.enqueue()
        assert connection.connection.in_transaction
        raise RuntimeError
    assert jobs_and_count() == (0, 0)
    with transaction.atomic():
        noop.enqueue()
    assert jobs_and_count() == (1, 1)


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_with_autocommit_off_waits_for_the_callers_commit():
    transaction.set_autocommit(False)
    try:
        noop.enqueue()
        transaction.rollback()
        noop.enqueue()
        transaction.commit()
    finally:
        transaction.set_autocommit(True)
    assert jobs_and_count() == (1, 1)


@pytest.mark.django_db(transaction=True)
def test_enqueue_many_stays_within_sqlites_default_limit_on_parameters():
    # Some builds raise the limit (Debian's: 250,000); SQLite's own default is 32,766.
    connection.ensure_connection()
    raw = connection.connection
    raised = raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 32_766)
    try:
        ids = noop.enqueue_many([((), {"n": i}) for i in range(2_500)])
    finally:
        raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, raised)
    assert len(ids) == 2_500
    assert jobs_and_count() == (2_500, 2_500)
    assert sorted(Job.objects.values_list("kwargs__n", flat=True)) == list(range(2_500))
