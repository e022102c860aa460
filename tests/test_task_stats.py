"""The per-task pages (/tasks/, /tasks/<path>/) and the figures behind them."""

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard import task_stats
from jobs.models import Attempt
from jobs.states import JobState
from tests.test_dashboard_views import make_job, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer_client(client, django_user_model):
    client.force_login(make_user(django_user_model, "victor"))
    return client


def attempt(job, number, outcome, *, seconds, ago=0, error=("", "")):
    finished = timezone.now() - timedelta(seconds=ago)
    return Attempt.objects.create(
        job=job,
        number=number,
        outcome=outcome,
        started_at=finished - timedelta(seconds=seconds),
        finished_at=finished,
        error_type=error[0],
        error_message=error[1],
    )


def test_percentile_is_the_nearest_rank():
    values = list(range(1, 101))
    assert task_stats.percentile(values, 50) == 50
    assert task_stats.percentile(values, 95) == 95
    assert task_stats.percentile([7], 95) == 7
    assert task_stats.percentile([], 50) is None


def test_task_list_counts_runs_failures_durations_and_the_last_error():
    for n in range(1, 21):
        job = make_job(JobState.SUCCEEDED, task_path="app.tasks.send")
        attempt(job, 1, "succeeded", seconds=n / 10, ago=100 - n)
    failing = make_job(JobState.DEAD_LETTER, task_path="app.tasks.charge")
    attempt(failing, 1, "failed", seconds=1, ago=50, error=("TimeoutError", "slow"))
    attempt(failing, 2, "failed", seconds=1, ago=10, error=("ValueError", "bad card"))
    make_job(JobState.PENDING, task_path="app.tasks.never_ran")

    listing = task_stats.task_list()
    rows = {row.task_path: row for row in listing.rows}
    send, charge = rows["app.tasks.send"], rows["app.tasks.charge"]
    assert (send.runs, send.failures) == (20, 0)
    assert send.p50 == timedelta(seconds=1.0)
    assert send.p95 == timedelta(seconds=1.9)
    assert (charge.runs, charge.failures, charge.failure_rate) == (2, 2, 1.0)
    assert (charge.last_error.error_type, charge.last_error.error_message) == (
        "ValueError",
        "bad card",
    )
    assert rows["app.tasks.never_ran"].runs == 0
    assert listing.complete and listing.attempts == 22


def test_task_list_covers_a_bounded_window_and_says_so(monkeypatch, viewer_client):
    monkeypatch.setattr(task_stats, "RECENT_ATTEMPTS", 3)
    job = make_job(JobState.DEAD_LETTER, task_path="app.tasks.flaky")
    for number in range(1, 4):
        attempt(job, number, "failed", seconds=1, ago=10 - number)
    job2 = make_job(JobState.SUCCEEDED, task_path="app.tasks.flaky")
    attempt(job2, 1, "succeeded", seconds=1, ago=0)
    listing = task_stats.task_list()
    assert (listing.attempts, listing.complete) == (3, False)
    html = viewer_client.get("/tasks/").content.decode()
    assert "The 3 most recent attempts" in html


def test_task_page_shows_figures_states_and_recent_failures(viewer_client):
    ok = make_job(JobState.SUCCEEDED, task_path="app.tasks.charge")
    attempt(ok, 1, "succeeded", seconds=2)
    dead = make_job(JobState.DEAD_LETTER, task_path="app.tasks.charge")
    attempt(dead, 1, "failed", seconds=1, ago=5, error=("CardDeclined", "insufficient funds"))
    make_job(JobState.PENDING, task_path="app.tasks.charge")
    make_job(JobState.SUCCEEDED, task_path="app.tasks.other")

    response = viewer_client.get("/tasks/app.tasks.charge/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "All 3 jobs" in html
    assert "CardDeclined" in html and "insufficient funds" in html
    assert f'data-job-id="{dead.id}"' in html
    assert "50 %" in html  # one failure in two runs
    assert 'href="/jobs/?task=app.tasks.charge">Every job of this task' in html
    detail = task_stats.task_detail("app.tasks.charge")
    assert detail.states[JobState.PENDING] == 1 and detail.states[JobState.DEAD_LETTER] == 1
    assert detail.figures.runs == 2


def test_task_page_of_an_unknown_task_is_a_404_in_the_layout(viewer_client):
    response = viewer_client.get("/tasks/app.tasks.nothing/")
    assert response.status_code == 404
    assert b'class="topbar"' in response.content and b"app.tasks.nothing" in response.content


def test_task_pages_answer_their_fragment_to_htmx(viewer_client):
    make_job(JobState.SUCCEEDED, task_path="app.tasks.send")
    for path in ("/tasks/", "/tasks/app.tasks.send/"):
        response = viewer_client.get(path, headers={"HX-Request": "true"})
        assert response.status_code == 200
        assert b"<html" not in response.content and b"data-poll" in response.content


def test_task_pages_need_a_staff_login(client):
    response = client.get("/tasks/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_task_names_are_escaped(viewer_client):
    make_job(JobState.SUCCEEDED, task_path="app.<script>x</script>")
    html = viewer_client.get("/tasks/").content.decode()
    assert "<script>x</script>" not in html


def test_a_task_path_with_a_slash_has_its_page(viewer_client):
    make_job(JobState.SUCCEEDED, task_path="odd/path.task")
    assert 'href="/tasks/odd/path.task/"' in viewer_client.get("/tasks/").content.decode()
    assert viewer_client.get("/tasks/odd/path.task/").status_code == 200


def test_a_task_path_with_a_nul_character_is_a_404_not_a_crash(viewer_client):
    assert viewer_client.get("/tasks/app.%00tasks/").status_code == 404
