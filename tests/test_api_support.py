"""Factories shared by the API, token, metrics and prune tests (this module holds no tests)."""

import uuid
from datetime import timedelta

from django.contrib.auth.models import Permission, User
from django.utils import timezone

from dashboard.models import ApiToken
from jobs.models import Job
from jobs.states import TERMINAL, JobState


def make_job(state=JobState.PENDING, **fields) -> Job:
    """A job row in `state`, with the fields the database constraints ask of that state."""
    now = timezone.now()
    values = {"task_path": "tests.tasks.add", "args": [1, 2], "state": state}
    if state in TERMINAL:
        values["finished_at"] = now
        values["started_at"] = now - timedelta(seconds=1)
        values["attempt"] = 1
    if state == JobState.DEAD_LETTER:
        values.update(
            attempt=3,
            max_attempts=3,
            dead_letter_reason="exhausted",
            error_type="ValueError",
            error_message="boom",
        )
    if state == JobState.SUCCEEDED:
        values["return_value"] = 3
    if state == JobState.RUNNING:
        values.update(
            attempt=1,
            started_at=now,
            worker_id="worker-1",
            lease_id=uuid.uuid4(),
            lease_expires_at=now + timedelta(seconds=60),
        )
    values.update(fields)
    return Job.objects.create(**values)


def make_user(username, *, staff=True, operate=False) -> User:
    user = User.objects.create_user(username, is_staff=staff)
    if operate:
        user.user_permissions.add(Permission.objects.get(codename="operate_job"))
    return user


def token_for(user) -> str:
    return ApiToken.issue(user, name="tests")[1]


def bearer(key) -> dict:
    return {"Authorization": f"Bearer {key}"}
