"""What only the PostgreSQL engine does (jobs/db/postgres.py)."""

import json
import re
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from jobs import db
from jobs.db.postgres_finish import FINISH_FIELDS, finish_document
from jobs.db.records import Finish
from jobs.models import Job
from jobs.states import AttemptOutcome, JobState
from jobsite.tasks import noop
from tests.concurrency import holding_meanwhile
from tests.factories import make_job

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the PostgreSQL engine's own statements"
)


def claim_plan(queues=None, limit=200, analyze=False):
    engine = db.engine()
    with connection.cursor() as cursor:
        cursor.execute(
            ("EXPLAIN (ANALYZE, BUFFERS) " if analyze else "EXPLAIN ") + engine.claim_sql(queues),
            engine.claim_params("0" * 32, 60.0, "w", queues, limit),
        )
        return "\n".join(row[0] for row in cursor.fetchall())


def pages_read(plan):
    """The buffers read to pick the jobs to claim, from EXPLAIN (ANALYZE, BUFFERS)."""
    # The picked ids are the update's one InitPlan (its array of ids).
    picking = re.search(
        r"^  InitPlan \d+ \(returns \$\d+\)\n.*\n\s*Buffers: shared (.*)", plan, re.M
    )
    return sum(int(n) for n in re.findall(r"(?:hit|read)=(\d+)", picking.group(1)))


@pytest.fixture
def stale_statistics():
    """Statistics taken while no job was due, then a burst of due jobs (committed)."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    noop.enqueue_many([((), {})] * 20_000)


@pytest.mark.django_db(transaction=True)
def test_a_worker_session_claims_in_index_order_whatever_the_statistics(stale_statistics):
    with connection.cursor() as cursor:
        cursor.execute("SET enable_bitmapscan = on")
    db.configure_worker_session(connection, lease_seconds=60, heartbeat_seconds=5)

    plan = claim_plan()

    assert "Index Scan using job_claimable on jobs_job" in plan, plan
    assert "Sort" not in plan, plan


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("queues", [["default"], ["emails", "default"], ["default", "a", "b"]])
def test_a_claim_of_named_queues_reads_no_more_rows_than_it_claims(stale_statistics, queues):
    db.configure_worker_session(connection, lease_seconds=60, heartbeat_seconds=5)

    plan = claim_plan(queues, limit=4, analyze=True)

    scans = re.findall(r"Index Scan using job_claimable_queue .*actual time=\S+ rows=(\d+)", plan)
    assert scans and all(int(rows) <= 4 for rows in scans), plan


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("queues", [None, ["default"], ["emails", "default"]])
def test_jobs_of_a_higher_priority_not_yet_due_are_not_read_by_a_claim(queues):
    db.configure_worker_session(connection, lease_seconds=60, heartbeat_seconds=5)
    noop.enqueue_many([((), {})] * 20)
    alone = pages_read(claim_plan(queues, limit=4, analyze=True))
    tomorrow = timezone.now() + timedelta(days=1)
    noop.using(priority=10, run_after=tomorrow).enqueue_many([((), {})] * 20_000)
    with connection.cursor() as cursor:
        # Each its own due time, as real ones have: equal index keys are stored, and read, once.
        cursor.execute(
            "UPDATE jobs_job SET run_after = run_after + random() * interval '1 day' "
            "WHERE priority = 10"
        )
        cursor.execute("VACUUM jobs_job")

    plan = claim_plan(queues, limit=4, analyze=True)

    # Read as one range, 20,000 entries (~110 index pages) come first; a level costs descents.
    assert pages_read(plan) <= alone + 30, plan


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("queues", [None, ["default"], ["emails", "default"]])
def test_a_claim_looks_up_the_jobs_it_picked_by_primary_key(stale_statistics, queues):
    db.configure_worker_session(connection, lease_seconds=60, heartbeat_seconds=5)

    plan = claim_plan(queues, limit=200)

    assert "Seq Scan on jobs_job" not in plan, plan
    assert "jobs_job_pkey" in plan, plan


def test_the_finish_document_gives_each_outcome_s_values_in_the_statement_s_order():
    started = datetime(2026, 11, 28, 14, 30, 0, 123456, tzinfo=UTC)
    finish = Finish(
        job_id=uuid.uuid4(),
        lease_id=uuid.uuid4(),
        state="retrying",
        outcome="failed",
        worker_id="host-1",
        return_json=None,
        delay=2.5,
        reason="",
        error_type="ValueError",
        error_message="bad value",
        error_traceback="Traceback ...",
        started_at=started,
        finished_at=started + timedelta(microseconds=1),
        raise_max_attempts=True,
    )
    [row] = json.loads(finish_document([finish]))
    assert dict(zip([name for name, _ in FINISH_FIELDS], row, strict=True)) == {
        "job_id": finish.job_id.hex,
        "lease_id": finish.lease_id.hex,
        "new_state": "retrying",
        "return_json": None,
        "delay": 2.5,
        "reason": "",
        "error_type": "ValueError",
        "error_message": "bad value",
        "error_traceback": "Traceback ...",
        "only_if_expired": 0,
        "raise_max": 1,
        "snoozed": 0,
        "outcome": "failed",
        "worker_id": "host-1",
        "started_us": 1_795_876_200_123_456,
        "finished_us": 1_795_876_200_123_457,
    }


@pytest.mark.django_db(transaction=True)
def test_a_finish_looks_up_each_outcome_s_job_by_primary_key(stale_statistics):
    db.configure_worker_session(connection, lease_seconds=60, heartbeat_seconds=5)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + db.engine().finish_sql, ["[]"])
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "Seq Scan on jobs_job" not in plan, plan
    assert "jobs_job_pkey" in plan, plan


@pytest.mark.django_db
def test_a_worker_session_gives_up_stalled_transactions_and_lock_waits():
    db.configure_worker_session(connection, lease_seconds=30, heartbeat_seconds=2.5)
    with connection.cursor() as cursor:
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        idle = cursor.fetchone()[0]
        cursor.execute("SHOW lock_timeout")
        lock = cursor.fetchone()[0]
    assert (idle, lock) == ("30s", "2500ms")


@pytest.fixture
def listening():
    """A connection of its own that LISTENs where workers do; yields its pending notifies."""
    import psycopg

    from jobs.db.pooler import raw_params
    from jobs.db.postgres_notify import NOTIFY_CHANNEL

    connection.ensure_connection()
    with psycopg.connect(**raw_params(connection), autocommit=True) as listener:
        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")

        def received():
            return [n.channel for n in listener.notifies(timeout=0.5, stop_after=10)]

        yield received


@pytest.mark.django_db(transaction=True)
def test_every_insert_of_jobs_counts_them_and_wakes_workers_once_it_commits(listening):
    from django.db import transaction

    from jobs.models import CounterDelta
    from jobs.workflows import Workflow

    def enqueued():
        return CounterDelta.objects.totals().get("jobs_enqueued", 0)

    with transaction.atomic():
        noop.enqueue()
        assert listening() == []  # nothing before the commit
    assert listening() == ["jobsite_jobs"]
    assert enqueued() == 1

    noop.enqueue_many([((), {})] * 5)
    assert listening() == ["jobsite_jobs"]
    assert enqueued() == 6

    wf = Workflow("two")
    wf.add(noop, name="b", after=[wf.add(noop, name="a")])
    wf.enqueue()
    assert listening() == ["jobsite_jobs"]
    assert enqueued() == 8


@pytest.mark.django_db(transaction=True)
def test_an_insert_statement_of_no_job_counts_nothing_and_wakes_nobody(listening):
    from jobs.models import CounterDelta

    noop.enqueue_many([])
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO jobs_job SELECT * FROM jobs_job WHERE false")
    assert listening() == []
    assert CounterDelta.objects.filter(name="jobs_enqueued").count() == 0


def _plans_of_nested_statements(sql):
    """(statement, plan) of each statement a trigger ran for `sql`, as auto_explain gives them."""
    notices = []

    def keep(diagnostic):
        notices.append(diagnostic.message_primary or "")

    pg = connection.connection
    pg.add_notice_handler(keep)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;"
                " SET auto_explain.log_analyze = on; SET auto_explain.log_nested_statements = on;"
                " SET auto_explain.log_level = notice"
            )
            cursor.execute(sql)
            cursor.execute("SET auto_explain.log_min_duration = -1")
    finally:
        pg.remove_notice_handler(keep)
    return notices


@pytest.mark.django_db(transaction=True)
def test_deleting_many_jobs_reads_each_deleted_row_once_whatever_the_first_delete_planned():
    # The connection's first delete, which found nothing, plans the trigger's statement for
    # no rows; a later delete of hundreds must not reuse that plan (a nested loop over every
    # pair of deleted job and search row: a minute for 10,000 jobs).
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_job")
    noop.enqueue_many([((i,), {}) for i in range(300)])

    notices = _plans_of_nested_statements("DELETE FROM jobs_job")

    plans = [n for n in notices if "DELETE FROM jobs_searchtext" in n]
    assert plans, notices
    loops = [int(n) for n in re.findall(r"Tuplestore Scan .* loops=(\d+)\)", plans[-1])]
    assert loops == [1], plans[-1]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobs_searchtext")
        assert cursor.fetchone()[0] == 0


@pytest.mark.django_db(transaction=True)
def test_a_finish_of_several_jobs_locks_them_in_id_order_and_never_deadlocks_with_an_action():
    """Actions that lock several jobs lock them in id order; a finish's update alone took them
    in the order of the table's pages. The later job in id order comes first in the table."""
    later = make_job(JobState.RUNNING, id=uuid.UUID(int=2**128 - 1))
    earlier = make_job(JobState.RUNNING, id=uuid.UUID(int=1))

    def lock_as_an_action_does(holding):
        for job in (earlier, later):
            list(Job.objects.filter(id=job.id).select_for_update())
            holding.set()
            time.sleep(0.5)

    now = timezone.now()
    with holding_meanwhile(lock_as_an_action_does) as errors:
        applied = db.finish(
            [
                Finish(
                    job_id=job.id,
                    lease_id=job.lease_id,
                    state=JobState.SUCCEEDED,
                    outcome=AttemptOutcome.SUCCEEDED,
                    worker_id="w-test",
                    started_at=now,
                    finished_at=now,
                )
                for job in (later, earlier)
            ]
        )
    assert errors == []  # "deadlock detected" on either side is the bug under test
    assert len(applied) == 2
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.SUCCEEDED}


@pytest.mark.django_db(transaction=True)
def test_a_lease_renewal_of_several_jobs_locks_them_in_id_order_and_never_deadlocks():
    """The heartbeat renews its running jobs' leases in one statement; taken in the order of
    the join, it met an action locking the same jobs in id order in a lock cycle. The later
    job in id order comes first in the table and in the renewal's list; with other jobs in
    the table, the planner looks each one up in the list's order."""
    later = make_job(JobState.RUNNING, id=uuid.UUID(int=2**128 - 1))
    earlier = make_job(JobState.RUNNING, id=uuid.UUID(int=1))
    noop.enqueue_many([((), {})] * 500)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    before = dict(Job.objects.filter(state=JobState.RUNNING).values_list("id", "lease_expires_at"))

    def lock_as_an_action_does(holding):
        for job in (earlier, later):
            list(Job.objects.filter(id=job.id).select_for_update())
            holding.set()
            time.sleep(0.5)

    with holding_meanwhile(lock_as_an_action_does) as errors:
        held = db.renew_leases([(j.id, j.lease_id) for j in (later, earlier)], 600)
    assert errors == []  # "deadlock detected" on either side is the bug under test
    assert held == {later.id, earlier.id}
    after = dict(Job.objects.filter(state=JobState.RUNNING).values_list("id", "lease_expires_at"))
    assert all(after[job_id] > before[job_id] for job_id in before)
