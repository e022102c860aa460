"""The console details a new operator tripped on, through Django's test client: the no-worker
banner, paused queues on the overview, what a retry says, bulk pages in words, units."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.chart import nice_ceiling
from dashboard.templatetags.dashboard import duration, when
from jobs import queues
from jobs.models import Attempt, Job, WorkerNode
from jobs.states import JobState
from tests.test_dashboard_views import make_job
from tests.test_schedules import with_schedules

pytestmark = pytest.mark.django_db


BANNER = "No worker is running."


def test_the_banner_shows_on_every_page_while_due_jobs_wait_and_no_worker_is_alive(
    viewer_client,
):
    assert BANNER not in viewer_client.get("/").content.decode()  # nothing due
    make_job(JobState.PENDING, run_after=timezone.now() + timedelta(hours=1))
    assert BANNER not in viewer_client.get("/").content.decode()  # not due yet
    make_job(JobState.PENDING)
    for path in ("/", "/jobs/", "/queues/", "/workers/", "/audit/", "/api/docs/"):
        assert "1 job is due and waiting" in viewer_client.get(path).content.decode(), path
    WorkerNode.objects.create(id="w-1", hostname="here", pid=1)
    assert BANNER not in viewer_client.get("/").content.decode()
    # A worker silent for longer than its lease is not alive.
    WorkerNode.objects.update(last_heartbeat_at=timezone.now() - timedelta(hours=1))
    fragment = viewer_client.get("/status/worker-banner/").content.decode()
    assert BANNER in fragment and 'hx-trigger="every 5s"' in fragment


def test_the_overview_marks_a_paused_queue(viewer_client):
    make_job(JobState.PENDING, queue_name="emails")
    make_job(JobState.PENDING, queue_name="reports")
    queues.pause("emails")
    html = viewer_client.get("/").content.decode()
    row = re.search(r"<tr>\s*<th scope=\"row\"><a [^>]*>emails</a>.*?</th>", html, re.S).group()
    assert ">Paused</a>" in row
    other = re.search(r"<tr>\s*<th scope=\"row\"><a [^>]*>reports</a>.*?</th>", html, re.S).group()
    assert "Paused" not in other


def test_a_retry_names_and_links_its_job_and_its_page_says_what_happened_since(
    operator_client,
):
    job = make_job(JobState.DEAD_LETTER)
    operator_client.post(f"/jobs/{job.id}/retry/")
    # A worker took it at once and it failed again before the page was shown.
    Job.objects.filter(id=job.id).update(
        state=JobState.DEAD_LETTER, attempt=4, finished_at=timezone.now()
    )
    html = operator_client.get(f"/jobs/{job.id}/").content.decode()
    assert f'job put back in line: <a href="/jobs/{job.id}/">add {str(job.id)[:8]}</a>' in html
    assert "Since then attempt 4 ran: it failed again and is a dead letter." in html
    # Once read, the note goes with the message.
    assert "Since then" not in operator_client.get(f"/jobs/{job.id}/").content.decode()


def test_a_retry_still_waiting_needs_no_note(operator_client):
    job = make_job(JobState.DEAD_LETTER)
    html = operator_client.post(f"/jobs/{job.id}/retry/", follow=True).content.decode()
    assert "job put back in line" in html and "Since then" not in html


def test_the_bulk_confirmation_speaks_in_words_and_highlights_the_list_it_came_from(
    operator_client,
):
    make_job(JobState.DEAD_LETTER, queue_name="billing")
    html = operator_client.post(
        "/jobs/bulk/", {"action": "retry", "state": "dead_letter", "queue": "billing"}
    ).content.decode()
    assert "state “Dead letter”, queue “billing”" in html
    assert "dead_letter" not in re.sub(r"<(input|a|span)[^>]*>", "", html)
    assert '<a href="/dead-letters/" aria-current="page">Dead letters</a>' in html
    assert '<a href="/jobs/" aria-current="page">' not in html


def test_the_bulk_result_links_the_jobs_it_changed_and_the_audit(operator_client):
    make_job(JobState.DEAD_LETTER, queue_name="billing")
    response = operator_client.post(
        "/jobs/bulk/",
        {"action": "retry", "state": "dead_letter", "queue": "billing", "confirm": "on"},
    )
    html = b"".join(response.streaming_content).decode()
    assert '<a class="button button-quiet" href="/jobs/?queue=billing">' in html
    assert 'href="/audit/?action=bulk+retry"' in html


def test_the_job_list_shows_no_old_error_on_a_job_that_succeeded_and_links_its_task(
    viewer_client,
):
    make_job(JobState.SUCCEEDED, attempt=2, error_type="ConnectionError", error_message="old")
    html = viewer_client.get("/jobs/").content.decode()
    assert "ConnectionError" not in html
    assert '<a class="task-link" href="/tasks/tests.tasks.add/"' in html


def test_the_dead_letter_filters_come_in_the_job_lists_order_and_both_bulk_buttons_count(
    operator_client,
):
    make_job(JobState.DEAD_LETTER)
    make_job(JobState.DEAD_LETTER)
    html = operator_client.get("/dead-letters/").content.decode()
    names = re.findall(r"<label[^>]*>([A-Z][a-z ]+) <(?:input|select)", html)
    assert names == ["Error type", "Queue", "Task", "Search"]
    jobs_names = re.findall(
        r"<label[^>]*>([A-Z][a-z ]+) <(?:input|select)",
        operator_client.get("/jobs/").content.decode(),
    )
    assert jobs_names == ["State", "Queue", "Task", "Search"]
    assert "Retry all 2 matching…" in html and "Discard all 2 matching…" in html
    assert ">Retry ticked rows…<" in html


def test_short_runs_say_under_a_millisecond_and_whole_seconds_lose_their_point():
    assert duration(timedelta(microseconds=300)) == "< 1 ms"
    assert duration(timedelta(milliseconds=4)) == "4 ms"
    assert duration(timedelta(seconds=5)) == "5 s"
    assert duration(timedelta(seconds=2.5)) == "2.5 s"


def test_a_fire_time_passed_reads_due_now_as_the_pages_countdown_says():
    now = timezone.now()
    assert ">due now<" in when(now - timedelta(seconds=5), ahead=True)
    assert ">due now<" in when(now, ahead=True)
    assert ">in 29 s<" in when(now + timedelta(seconds=30), ahead=True)
    # Without `ahead` a moment is in the past like any other.
    assert ">5 s ago<" in when(now - timedelta(seconds=5.5))


def test_the_chart_axis_tops_close_above_the_peak():
    assert [nice_ceiling(n) for n in (0, 5, 57, 99, 101, 450)] == [4, 6, 60, 100, 120, 500]


def test_a_task_page_names_attempts_as_attempts_and_shows_no_rate_for_no_failure(
    viewer_client,
):
    job = make_job(JobState.SUCCEEDED, attempt=1)
    now = timezone.now()
    Attempt.objects.create(
        job=job, number=1, outcome="succeeded", started_at=now - timedelta(seconds=1),
        finished_at=now,
    )  # fmt: skip
    html = viewer_client.get("/tasks/tests.tasks.add/").content.decode()
    assert ">Attempts</span>" in html and ">Runs<" not in html
    assert "(0 %)" not in html


def test_a_timeout_shows_as_whole_seconds(viewer_client):
    job = make_job(JobState.PENDING, timeout=600.0)
    assert "600 s per attempt" in viewer_client.get(f"/jobs/{job.id}/").content.decode()


def test_workers_say_which_queues_and_how_many_slots(viewer_client):
    WorkerNode.objects.create(id="w-2", hostname="here", pid=2, concurrency=4)
    html = viewer_client.get("/workers/").content.decode()
    assert "every queue" in html and "4 slots" in html and "×" not in html


def test_live_appears_once_per_page(viewer_client):
    job = make_job(JobState.RUNNING)
    for path in ("/", "/workers/", "/schedules/", f"/jobs/{job.id}/"):
        html = viewer_client.get(path).content.decode()
        assert len(re.findall(r">Live\b", html)) == 1, path


def test_the_schedules_page_refreshes_often_while_a_run_is_on_its_way(viewer_client):
    with with_schedules({"ping": {"task": "tests.tasks.add", "every": 30}}):
        assert 'hx-trigger="every 10s, wake"' in viewer_client.get("/schedules/").content.decode()
        make_job(JobState.PENDING, schedule="ping")
        assert 'hx-trigger="every 2s, wake"' in viewer_client.get("/schedules/").content.decode()
