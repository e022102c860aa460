"""Fault injection that needs PostgreSQL's view of sessions (pg_stat_activity)."""

import signal
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from jobs.models import Attempt, Job, WorkerNode
from jobs.states import AttemptOutcome, JobState
from tests import tasks
from tests.reliability_helpers import (
    LEASE_SECONDS,
    all_terminal,
    assert_attempt_history_consistent,
    assert_nothing_running,
    skip_unless_postgres,
    wait_for,
    wait_started,
)

pytestmark = pytest.mark.django_db(transaction=True)


def stalled_mid_finish():
    """A jobsite session sits idle in a transaction right after its finish statement (it holds
    the row locks of the jobs it was recording)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'jobsite' "
            "AND datname = current_database() AND pid <> pg_backend_pid() "
            "AND state = 'idle in transaction' AND query LIKE %s",
            # The finish statement (jobs.db.postgres finish_sql): its text is longer than
            # pg_stat_activity keeps, so it is known by its opening, where the outcomes come in.
            ["%WITH v AS%json_to_recordset($1::json)%"],
        )
        return [pid for (pid,) in cursor.fetchall()]


@pytest.mark.slow
def test_worker_stopped_inside_its_finish_transaction_does_not_stall_the_others(
    fast_leases, spawn_worker
):
    skip_unless_postgres("pg_stat_activity")
    ids = tasks.ledger_span.enqueue_many([((f"t{i}", 0.001), {}) for i in range(3000)])
    first = spawn_worker("--concurrency", "2")
    wait_for(
        lambda: Job.objects.filter(state=JobState.SUCCEEDED).exists(),
        timeout=30,
        what="the first worker to be busy",
    )
    # SIGSTOP it at the moment it has recorded outcomes but not committed them.
    for _ in range(1000):
        first.signal_group(signal.SIGSTOP)
        if stalled_mid_finish():
            break
        first.signal_group(signal.SIGCONT)
        time.sleep(0.002)  # let it run a little before the next try
    else:
        first.signal_group(signal.SIGCONT)
        pytest.skip("never caught the worker between its finish statement and its commit")
    try:
        second = spawn_worker("--concurrency", "2")
        wait_started(second)
        # The stopped worker's leases run out while its uncommitted finish locks those rows
        # (until PostgreSQL ends its idle transaction); the other worker recovers them.
        wait_for(
            lambda: (
                Job.objects.filter(
                    worker_id=first.worker_id,
                    state=JobState.RUNNING,
                    lease_expires_at__lt=timezone.now() - timedelta(seconds=1),
                ).exists()
                or Attempt.objects.filter(
                    worker_id=first.worker_id, outcome=AttemptOutcome.LOST
                ).exists()
            ),
            timeout=LEASE_SECONDS + 10,
            what="the stopped worker's leases to expire or be recovered",
        )
        expired = timezone.now()
        urgent = uuid.UUID(str(tasks.ledger_span.using(priority=100).enqueue("urgent", 0).id))
        # The other worker keeps working and heartbeating meanwhile.
        wait_for(
            lambda: Job.objects.filter(id=urgent, state=JobState.SUCCEEDED).exists(),
            timeout=LEASE_SECONDS + 15,
            what="the second worker to run a new job while the first is stopped",
        )
        wait_for(
            lambda: WorkerNode.objects.filter(
                id=second.worker_id, last_heartbeat_at__gt=expired + timedelta(seconds=3)
            ).exists(),
            timeout=15,
            what="the second worker's heartbeat to keep landing",
        )
    finally:
        first.signal_group(signal.SIGCONT)

    wait_for(lambda: all_terminal(ids), timeout=120, what="all jobs to end after the resume")
    assert set(Job.objects.filter(id__in=ids).values_list("state", flat=True)) == {
        JobState.SUCCEEDED
    }
    assert_attempt_history_consistent(ids)
    for w in (first, second):
        assert w.alive(), w.output()
        w.signal(signal.SIGTERM)
        assert w.wait(15) == 0, w.output()
    assert_nothing_running()
