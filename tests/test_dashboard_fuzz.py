"""Fuzzing the console's URL space: no query string, path or form post makes a page fail.

Hypothesis builds query strings of garbage (NUL, unicode, huge numbers, bad ids and cursors,
repeated parameters) for every page, with and without HTMX; each answer is a page or a 400/404,
never a 500.
"""

import uuid
from datetime import UTC
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Permission
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.pagination import Cursor
from jobs.states import JobState
from tests.factories import make_job

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
KNOWN_ID = uuid.UUID(int=7)
PAGES = ["/", "/jobs/", "/dead-letters/", "/queues/", "/workers/", f"/jobs/{KNOWN_ID}/"]
NAMES = ["state", "queue", "task", "q", "error", "cursor", "limit", "next", "action"]

TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
VALUES = (
    TEXT
    | st.sampled_from(["\x00", "%00", "", " ", "∞", "🙂", "NaN", "-0", "1e309", "null", "[]"])
    | st.integers().map(str)
    | st.integers(min_value=10**20, max_value=10**400).map(str)
    | st.uuids().map(str)
    | st.uuids().map(lambda u: str(u)[:13])
    | st.sampled_from([s.value for s in JobState])
    | st.sampled_from(["9999-12-31T23:59:59-23:59", "MjAyNi0wMS0wMXxub3QtYS11dWlk"])
    # `next` that is no path: a URL name, a bare fragment, the login page.
    | st.sampled_from(["abc", "dashboard:overview", "#x", "/login/", "/login/?next=/login/"])
    | st.builds(Cursor, at=st.datetimes(timezones=st.just(UTC)), id=st.uuids()).map(Cursor.encode)
)
QUERIES = st.lists(st.tuples(st.sampled_from(NAMES) | TEXT, VALUES), max_size=5)


@pytest.fixture
def operator_client(client, django_user_model):
    user = django_user_model.objects.create_user("fuzz", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(codename="operate_job", content_type__app_label="jobs")
    )
    make_job(JobState.DEAD_LETTER, id=KNOWN_ID, kwargs={"key": "value"}, queue_name="emails")
    make_job(JobState.PENDING, args=[1003], dedup_key="k-1")
    client.force_login(user)
    return client


def query_string(pairs) -> str:
    return "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in pairs)


@given(page=st.sampled_from(PAGES), pairs=QUERIES, htmx=st.booleans())
@FUZZ
def test_any_query_string_on_any_page_gets_a_page_or_a_400(operator_client, page, pairs, htmx):
    headers = {"HX-Request": "true"} if htmx else {}
    response = operator_client.get(f"{page}?{query_string(pairs)}", headers=headers)
    assert response.status_code in (200, 400), (page, pairs, response.status_code)


@given(segment=TEXT.filter(lambda s: "/" not in s) | st.uuids().map(str))
@FUZZ
def test_any_job_path_gets_a_page_or_a_404(operator_client, segment):
    response = operator_client.get(f"/jobs/{quote(segment, safe='')}/")
    assert response.status_code in (200, 404)


@given(
    path=st.sampled_from(
        [
            "/jobs/bulk/",
            f"/jobs/{KNOWN_ID}/rerun/",
            f"/jobs/{KNOWN_ID}/retry/",
            f"/jobs/{KNOWN_ID}/cancel/",
            "/dead-letters/retry/",
            "/queues/emails/pause/",
            "/queues/emails/resume/",
        ]
    ),
    pairs=st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "action",
                    "state",
                    "queue",
                    "task",
                    "q",
                    "error",
                    "edit",
                    "args",
                    "kwargs",
                    "scope",
                    "ids",
                    "id_list",
                    "next",
                    "token",
                ]
            )
            | TEXT,
            VALUES | st.sampled_from(["[1, 2]", '{"a": 1}', "[" * 5000, "retry", "discard"]),
        ),
        max_size=6,
    ),
)
@FUZZ
def test_any_form_post_gets_an_answer_not_a_crash(operator_client, path, pairs):
    # No confirm field: a bulk action stops at its count, so every example sees the same jobs.
    pairs = [(k, v) for k, v in pairs if k != "confirm"]
    response = operator_client.post(
        path, query_string(pairs), content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code in (200, 302, 400, 404), (path, pairs, response.status_code)
