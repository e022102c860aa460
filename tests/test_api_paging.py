"""Keyset paging of /api/v1/jobs: every job exactly once, in order, with a tamper-proof cursor."""

import base64
import json
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.models import Job
from jobs.states import JobState
from tests.test_api_support import bearer, make_user, token_for

pytestmark = pytest.mark.django_db

STATES = [JobState.PENDING, JobState.DEAD_LETTER, JobState.SUCCEEDED]


@pytest.fixture
def headers():
    return bearer(token_for(make_user("reader")))


def create_jobs(offsets, *, states=STATES, queues=("default", "emails")):
    """One job per offset (seconds before a fixed moment); equal offsets share enqueued_at."""
    base = timezone.now().replace(microsecond=0)
    jobs = []
    for i, offset in enumerate(offsets):
        state = states[i % len(states)]
        terminal = state != JobState.PENDING
        jobs.append(
            Job(
                task_path="tests.tasks.add",
                state=state,
                queue_name=queues[i % len(queues)],
                enqueued_at=base - timedelta(seconds=offset),
                finished_at=base if terminal else None,
                attempt=3 if state == JobState.DEAD_LETTER else 0,
            )
        )
    return Job.objects.bulk_create(jobs)


def walk(client, headers, query):
    """Every page of a listing: [[job id, ...], ...]."""
    pages, cursor = [], None
    while True:
        url = f"/api/v1/jobs?{query}" + (f"&cursor={cursor}" if cursor else "")
        response = client.get(url, headers=headers)
        assert response.status_code == 200
        data = response.json()
        pages.append([job["id"] for job in data["results"]])
        cursor = data["next_cursor"]
        if cursor is None:
            return pages


def newest_first(jobs):
    return [str(j.id) for j in sorted(jobs, key=lambda j: (j.enqueued_at, j.id), reverse=True)]


def test_paging_a_filtered_list_returns_every_job_once_in_order(client, headers):
    # 137 jobs, many sharing a timestamp so the id breaks ties across page boundaries.
    jobs = create_jobs([i // 4 for i in range(137)])
    dead = [j for j in jobs if j.state == JobState.DEAD_LETTER]

    pages = walk(client, headers, "state=dead_letter&limit=10")

    assert [len(p) for p in pages] == [10] * 4 + [len(dead) - 40]
    assert [i for page in pages for i in page] == newest_first(dead)


def test_paging_the_whole_list_returns_every_job_once(client, headers):
    jobs = create_jobs([i // 7 for i in range(137)])

    pages = walk(client, headers, "limit=10")

    assert len(pages) == 14
    assert [i for page in pages for i in page] == newest_first(jobs)


def test_the_last_full_page_has_no_next_cursor(client, headers):
    create_jobs(range(20))

    pages = walk(client, headers, "limit=10")

    assert [len(p) for p in pages] == [10, 10]


def test_jobs_enqueued_while_paging_do_not_shift_the_pages(client, headers):
    jobs = create_jobs(range(30), states=[JobState.PENDING])
    first = client.get("/api/v1/jobs?limit=10", headers=headers).json()
    create_jobs([-1, -2], states=[JobState.PENDING])

    second = client.get(f"/api/v1/jobs?limit=10&cursor={first['next_cursor']}", headers=headers)

    assert [j["id"] for j in second.json()["results"]] == newest_first(jobs)[10:20]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    offsets=st.lists(st.integers(min_value=0, max_value=5), max_size=40),
    limit=st.integers(min_value=1, max_value=7),
    state=st.sampled_from([None, *STATES]),
)
def test_any_page_size_over_any_ties_lists_each_job_once(client, headers, offsets, limit, state):
    Job.objects.all().delete()
    jobs = create_jobs(offsets)
    expected = [j for j in jobs if state is None or j.state == state]

    pages = walk(client, headers, f"limit={limit}" + (f"&state={state}" if state else ""))

    assert [i for page in pages for i in page] == newest_first(expected)


def test_a_tampered_cursor_is_a_400(client, headers):
    create_jobs(range(3))
    cursor = client.get("/api/v1/jobs?limit=1", headers=headers).json()["next_cursor"]
    tampered = cursor[:-1] + ("A" if cursor[-1] != "A" else "B")

    response = client.get(f"/api/v1/jobs?cursor={tampered}", headers=headers)

    assert response.status_code == 400
    assert "cursor" in response.json()["error"]


def test_a_hand_made_cursor_is_a_400(client, headers):
    forged = base64.urlsafe_b64encode(json.dumps(["2020-01-01T00:00:00", "0" * 32]).encode())

    response = client.get(f"/api/v1/jobs?cursor={forged.decode()}", headers=headers)

    assert response.status_code == 400
