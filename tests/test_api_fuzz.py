"""Fuzzing every endpoint of the OpenAPI description: no input makes the API fail.

Schemathesis generates requests from dashboard/openapi.py (valid and invalid ones) and checks
each answer against the document: no 5xx, documented status codes, content types and bodies.
Hypothesis adds raw query strings, paths and headers the document says nothing about.
"""

import uuid
from datetime import UTC, datetime, timedelta, timezone
from urllib.parse import quote

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.specs.openapi.checks import positive_data_acceptance

from dashboard.openapi import document
from dashboard.pagination import Cursor
from jobs.compat import InvalidTask
from jobs.states import JobState
from tests import tasks
from tests.factories import make_job
from tests.test_api_support import bearer, make_user, token_for

# Jobs with fixed ids the generated requests can hit, one per state that an action cares about.
KNOWN_IDS = {
    state: uuid.UUID(int=i + 1)
    for i, state in enumerate([JobState.PENDING, JobState.DEAD_LETTER, JobState.SUCCEEDED])
}

# A schedule the generated requests can pause, resume and run now.
KNOWN_SCHEDULES = {"ping": {"task": "tests.tasks.add", "args": [1, 2], "every": 60}}


def fuzzed_document():
    """The served document, with the known ids as examples so requests reach real jobs."""
    doc = document()
    for item in doc["paths"].values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                if parameter["name"] == "job_id":
                    parameter["examples"] = {
                        state: {"value": str(job_id)} for state, job_id in KNOWN_IDS.items()
                    }
                if parameter["name"] == "name":
                    parameter["examples"] = {"known": {"value": "ping"}}
    return doc


# Valid cursors are the signed positions the API hands out, at any moment and id.
schemathesis.openapi.format(
    "jobsite-cursor",
    st.builds(
        Cursor,
        at=st.datetimes(
            min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
        ),
        id=st.uuids(),
    ).map(Cursor.encode),
)
schema = schemathesis.openapi.from_dict(fuzzed_document())
schema.app = get_wsgi_application()

FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def wsgi_in_test_transaction():
    """Keep the real WSGI handler from closing the connection that holds the test's data."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


@pytest.fixture
def operator(db, settings):
    settings.TASKS = {
        alias: {**config, "OPTIONS": {**config["OPTIONS"], "SCHEDULES": KNOWN_SCHEDULES}}
        for alias, config in settings.TASKS.items()
    }
    for state, job_id in KNOWN_IDS.items():
        make_job(state, id=job_id, kwargs={"key": "value"})
    return bearer(token_for(make_user("operator", operate=True)))


def test_the_served_document_is_the_one_fuzzed(client, operator):
    response = client.get("/api/v1/openapi.json", headers=operator)

    assert response.json() == document()
    assert response.json()["openapi"].startswith("3.")


@pytest.mark.django_db
@schema.parametrize()
@FUZZ
def test_every_operation_answers_as_documented_and_never_fails(
    case, operator, wsgi_in_test_transaction
):
    excluded = []
    if case.operation.path == "/jobs/{job_id}/rerun":
        # JSON Schema cannot say "no NUL or lone surrogate in any string at any depth": such
        # arguments are valid to the document and rightly refused (400) by the API.
        excluded.append(positive_data_acceptance)
    case.call_and_validate(headers=operator, excluded_checks=excluded)


# --- beyond the document: raw strings anywhere -------------------------------------------------

TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
PATHS = [
    "/api/v1/jobs",
    "/api/v1/queues",
    "/api/v1/metrics/summary",
    "/metrics",
    "/api/v1/openapi.json",
]


@given(
    path=st.sampled_from(PATHS),
    pairs=st.lists(
        st.tuples(st.sampled_from(["state", "queue", "task", "q", "limit", "cursor"]) | TEXT, TEXT),
        max_size=4,
    ),
)
@FUZZ
def test_any_query_string_gets_an_answer_not_a_crash(client, operator, path, pairs):
    query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in pairs)

    response = client.get(f"{path}?{query}", headers=operator)

    assert response.status_code in (200, 400)
    if path != "/metrics" or response.status_code == 400:
        assert response.headers["Content-Type"] == "application/json"
    if response.status_code == 400:
        assert response.json()["error"]


@given(
    job_id=TEXT.filter(lambda s: "/" not in s and s != "bulk"),
    action=st.sampled_from(["", "/retry", "/rerun", "/cancel", "/discard"]),
)
@FUZZ
def test_any_job_id_gets_a_json_404_not_a_crash(client, operator, job_id, action):
    method = client.post if action else client.get

    response = method(f"/api/v1/jobs/{quote(job_id, safe='')}{action}", headers=operator)

    assert response.status_code == 404
    assert response.headers["Content-Type"] == "application/json"


@given(
    authorization=st.text(st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=80)
)
@FUZZ
def test_any_authorization_header_is_a_401_not_a_crash(client, operator, authorization):
    response = client.get("/api/v1/jobs", headers={"Authorization": authorization})

    assert response.status_code == 401
    assert response.json()["error"]


# --- times at the edges of what can be stored ----------------------------------------------------

FIRST, LAST = datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59)


def edge_time(last, hours, offset_minutes):
    """Within three days of Python's first or last moment, at any UTC offset."""
    naive = LAST - timedelta(hours=hours) if last else FIRST + timedelta(hours=hours)
    return naive.replace(tzinfo=timezone(timedelta(minutes=offset_minutes)))


EDGE_TIMES = st.builds(
    edge_time,
    st.booleans(),
    st.integers(min_value=0, max_value=72),
    st.sampled_from([-14 * 60, 14 * 60, 0]) | st.integers(min_value=-1439, max_value=1439),
)


@given(run_after=EDGE_TIMES, not_after=st.none() | EDGE_TIMES)
@settings(FUZZ, max_examples=15)
def test_a_time_at_the_edge_is_refused_at_enqueue_or_read_back_by_the_api(
    client, operator, run_after, not_after
):
    try:
        result = tasks.add.using(run_after=run_after, not_after=not_after).enqueue(1, 2)
    except InvalidTask as refused:
        assert "out of range" in str(refused)
        return
    assert client.get("/api/v1/jobs", headers=operator).status_code == 200
    job = client.get(f"/api/v1/jobs/{result.id}", headers=operator).json()
    assert datetime.fromisoformat(job["run_after"]) == run_after
