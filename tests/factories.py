"""Small builders for job rows in any state, respecting the table's constraints."""

import uuid

from django.utils import timezone

from jobs.db import Claimed
from jobs.models import Attempt, Dependency, Job
from jobs.states import TERMINAL, JobState
from tests import tasks


def make_job(state=JobState.PENDING, **fields):
    now = timezone.now()
    values = {
        "task_path": "tests.tasks.add",
        "args": [1, 2],
        "state": state,
        "attempt": 0,
        "max_attempts": 3,
    }
    if state in TERMINAL:
        values.setdefault("finished_at", now)
        values["attempt"] = fields.get("attempt", 1)
    if state == JobState.RUNNING:
        values.update(
            attempt=1,
            lease_id=uuid.uuid4(),
            started_at=now,
            worker_id="w-test",
            lease_expires_at=now + timezone.timedelta(seconds=60),
        )
    if state == JobState.DEAD_LETTER:
        values.update(
            attempt=3,
            dead_letter_reason="exhausted",
            error_type="ValueError",
            error_message="it broke",
        )
    waits = state == JobState.SCHEDULED and fields.get("parent") is not None
    if waits:
        values["waiting_for"] = 1
    values.update(fields)
    job = Job.objects.create(**values)
    if waits:
        # A continuation waits through its edge to the parent, as an enqueue stores it.
        Dependency.objects.create(downstream=job, upstream=fields["parent"])
    return job


def add_attempts(job, outcomes):
    for number, outcome in enumerate(outcomes, start=1):
        Attempt.objects.create(
            job=job,
            number=number,
            outcome=outcome,
            worker_id="w-test",
            started_at=timezone.now(),
            finished_at=timezone.now(),
        )


def dead_letter_of_add():
    """A real enqueued job of tests.tasks.add, then dead-lettered as if it had failed 3 times."""
    result = tasks.add.enqueue(2, 3)
    Job.objects.filter(id=result.id).update(
        state=JobState.DEAD_LETTER,
        attempt=3,
        max_attempts=3,
        finished_at=timezone.now(),
        error_type="ConnectionError",
        error_message="upstream refused the connection",
        error_traceback="Traceback (most recent call last):\nConnectionError: refused",
        dead_letter_reason="exhausted",
    )
    return Job.objects.get(id=result.id)


def make_claimed(task_path="tests.tasks.add", *, attempt=1, max_attempts=3):
    """A job as a worker holds it once claimed (no row behind it)."""
    return Claimed(
        id=uuid.uuid4(),
        lease_id=uuid.uuid4(),
        task_path=task_path,
        args_json="[]",
        kwargs_json="{}",
        attempt=attempt,
        max_attempts=max_attempts,
        timeout=None,
        queue_name="default",
        priority=0,
        backend="default",
    )
