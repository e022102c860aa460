"""Rows written by any means (raw SQL, a data migration, another tool) with task paths, queue
names and dedup keys holding any characters: every page and API list still answers, and the
links to such rows lead to them."""

import re
from html import unescape

import pytest
from django.urls import reverse

from jobs.models import Job, PausedQueue, WorkerNode
from jobs.states import JobState
from tests.factories import make_job

pytestmark = pytest.mark.django_db

ODD = [
    "tests.tasks.add\nwith a newline",
    "with/slashes/../and ?query=1&x#fragment",
    "percent %2F %00 and \t tab",
    "unicode ✓ ünïcode \u200b",
    "control \x01\x7f chars",
    ".hidden",
    "",  # no queue or task of that name can be enqueued; a raw row can hold it
]
CONSOLE = [
    "/",
    "/jobs/",
    "/jobs/?state=pending",
    "/dead-letters/",
    "/queues/",
    "/workers/",
    "/tasks/",
    "/schedules/",
]
API = ["/api/v1/jobs", "/api/v1/queues", "/api/v1/metrics/summary", "/metrics"]


@pytest.fixture
def odd_rows(db):
    jobs = []
    for n, text in enumerate(ODD):
        for state in (JobState.PENDING, JobState.RUNNING, JobState.DEAD_LETTER):
            jobs.append(
                make_job(
                    state,
                    task_path=text,
                    queue_name=text,
                    dedup_key=f"{text}-{n}" if state == JobState.PENDING else None,
                    worker_id="odd-worker",
                )
            )
    WorkerNode.objects.create(id="odd-worker", hostname="h", pid=1, queues=ODD, concurrency=2)
    return jobs


@pytest.mark.parametrize("page", CONSOLE + API)
def test_every_page_answers_beside_rows_holding_any_characters(operator_client, odd_rows, page):
    response = operator_client.get(page)
    assert response.status_code == 200, response.content[:2000]


def test_each_job_page_answers_for_rows_holding_any_characters(operator_client, odd_rows):
    for job in odd_rows:
        assert operator_client.get(reverse("dashboard:job", args=[job.id])).status_code == 200
        assert operator_client.get(f"/api/v1/jobs/{job.id}").status_code == 200


def test_links_to_each_task_page_lead_to_that_task(operator_client, odd_rows):
    html = operator_client.get("/tasks/").content.decode()
    links = {unescape(href) for href in re.findall(r'href="(/tasks/[^"]+)"', html)}
    assert "(no task path)" in html  # a row without one is listed, with no page to link
    named = [text for text in ODD if text]
    assert len(links) >= len(named)
    for text in named:
        url = reverse("dashboard:task", args=[text])
        assert url in links
        response = operator_client.get(url)
        assert response.status_code == 200
        assert response.context["task_path"] == text


def test_odd_queue_names_can_be_paused_and_resumed_from_their_buttons(operator_client, odd_rows):
    named = [text for text in ODD if text]  # no queue named "" can be paused: no button
    for text in named:
        response = operator_client.post(reverse("dashboard:queue_pause", args=[text]))
        assert response.status_code in (200, 302)
    assert set(PausedQueue.objects.values_list("name", flat=True)) == set(named)
    assert Job.objects.filter(queue_name=ODD[0]).count() == 3
