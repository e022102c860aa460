"""A transaction one task leaves open reaches no later job (jobs.task_connections).

Real `manage.py worker --burst` subprocesses at concurrency 1, so every job runs in the same
executor, one after the other, on the same connection.
"""

import pytest
from django.contrib.auth.models import Group

from jobs.models import Job
from jobs.states import JobState
from tests import tasks

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def rows():
    return set(Group.objects.filter(name__startswith="row-").values_list("name", flat=True))


@pytest.mark.parametrize("how", ["autocommit", "atomic"])
@pytest.mark.parametrize(
    ("leaves_open", "writes"),
    [
        (tasks.leaves_transaction_open, tasks.writes_row),
        (tasks.leaves_transaction_open_async, tasks.writes_row_async),
    ],
    ids=["sync", "async"],
)
def test_a_transaction_a_task_leaves_open_is_rolled_back_and_the_next_jobs_commit(
    run_worker, how, leaves_open, writes
):
    left = leaves_open.enqueue(how, "row-left-open")
    # Continuations: they start once it has ended (coroutines in one executor share its
    # connection while they run together).
    later = [writes.using(after=left).enqueue(f"row-{i}") for i in range(3)]

    proc = run_worker("--concurrency", "1", timeout=60)

    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    ids = [r.id for r in [left, *later]]
    states = set(Job.objects.filter(id__in=ids).values_list("state", flat=True))
    assert states == {JobState.SUCCEEDED}, proc.stderr[-3000:]
    assert Job.objects.filter(id__in=ids).count() == 4
    # What the task never committed is rolled back; every later job's write is committed.
    assert rows() == {"row-0", "row-1", "row-2"}
    assert "left a database transaction open on 'default': rolled back" in proc.stderr
