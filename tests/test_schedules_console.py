"""Schedules in the console (/schedules/), the JSON API and /metrics, for operators and
read-only staff."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.schedule_rows import RECENT_RUNS, recent_runs
from jobs import schedules
from jobs.models import Job, Schedule, ScheduleAuditEntry
from jobs.states import JobState
from tests.test_api_support import bearer, token_for
from tests.test_dashboard_views import make_job
from tests.test_schedules import clear_of_pings, with_schedules

pytestmark = pytest.mark.django_db

SCHEDULES = {
    "nightly-report": {
        "task": "tests.tasks.record",
        "cron": "0 3 * * *",
        "timezone": "Europe/Paris",
        "args": ["report"],
    },
    "ping": {"task": "tests.tasks.add", "args": [1, 2], "every": 30},
}


@pytest.fixture(autouse=True)
def configured():
    with with_schedules(SCHEDULES):
        yield


def buttons_in(html: str) -> list[str]:
    return re.findall(r"<button[^>]*>\s*([^<]*?)\s*</button>", html)


def scheduled_job(name, state, minutes_ago, **fields):
    moment = timezone.now() - timedelta(minutes=minutes_ago)
    return make_job(
        state, schedule=name, scheduled_at=moment, enqueued_at=moment, run_after=moment, **fields
    )


# --- the page --------------------------------------------------------------------------------


def test_the_page_shows_each_schedule_in_words_with_its_next_fire_time_and_runs(client, operator):
    run = scheduled_job("ping", JobState.SUCCEEDED, 1)
    client.force_login(operator)
    response = client.get("/schedules/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "At 03:00 every day (Europe/Paris)" in html
    assert "0 3 * * * · Europe/Paris" in html
    assert "Every 30 seconds" in html
    assert f'href="/jobs/{run.id}/"' in html
    assert html.count("<time datetime=") >= 2  # a next fire time per schedule
    assert buttons_in(html).count("Pause") == 2 and buttons_in(html).count("Run now") == 2


def test_the_next_fire_time_is_shown_once_relative_with_the_utc_time_beside_it(client, operator):
    client.force_login(operator)
    clear_of_pings()
    html = client.get("/schedules/").content.decode()
    row = re.search(r'<tr id="schedule-ping".*?</tr>', html, re.S).group(0)
    next_fire = re.findall(r"<td>.*?</td>", row, re.S)[1]
    assert next_fire.count("<time datetime=") == 1
    assert re.search(r">in \d+ s<", next_fire)
    assert next_fire.count(" UTC<") == 1


def test_a_bad_schedules_setting_is_named_on_the_page_and_in_the_api_not_a_server_error(
    client, operator
):
    bad = {**SCHEDULES, "broken": {"task": "tests.tasks.add", "every": 30, "args": {"a": 1}}}
    with with_schedules(bad):
        client.force_login(operator)
        page = client.get(reverse("dashboard:schedules"))
        assert page.status_code == 200
        assert "The SCHEDULES setting has a problem" in page.content.decode()
        acted = client.post(reverse("dashboard:schedule_pause", args=["ping"]), follow=True)
        assert acted.status_code == 200
        assert "The SCHEDULES setting has a problem" in acted.content.decode()
        headers = bearer(token_for(operator))
        listed = client.get("/api/v1/schedules", headers=headers)
        assert listed.status_code == 500
        assert "The SCHEDULES setting has a problem" in listed.json()["error"]
        paused = client.post("/api/v1/schedules/ping/pause", headers=headers)
        assert paused.status_code == 500 and "jobs.E001" in paused.json()["error"]


def test_the_page_is_linked_from_the_navigation_and_the_overview(client, operator):
    client.force_login(operator)
    html = client.get("/").content.decode()
    assert html.count('href="/schedules/"') == 2


def test_a_schedule_whose_recent_runs_failed_is_marked(client, operator):
    scheduled_job("ping", JobState.DEAD_LETTER, 2)
    scheduled_job("ping", JobState.SUCCEEDED, 1)
    client.force_login(operator)
    html = client.get("/schedules/").content.decode()
    failing = re.findall(r'<tr id="schedule-([\w.-]+)" class="[^"]*schedule-failing', html)
    assert failing == ["ping"]
    assert "1 of the last 2 runs failed" in html


def test_an_htmx_request_gets_the_fragment(client, operator):
    client.force_login(operator)
    html = client.get("/schedules/", headers={"HX-Request": "true"}).content.decode()
    assert html.lstrip().startswith('<section id="schedules"')
    assert "<html" not in html


def test_operator_pauses_resumes_and_runs_a_schedule_now_without_javascript(client, operator):
    client.force_login(operator)
    response = client.post("/schedules/ping/pause/", follow=True)
    assert "ping: schedule paused" in response.content.decode()
    assert Schedule.objects.get(name="ping").paused
    assert "Resume" in buttons_in(response.content.decode())

    response = client.post("/schedules/ping/resume/", follow=True)
    assert "ping: schedule resumed" in response.content.decode()
    assert not Schedule.objects.get(name="ping").paused

    response = client.post("/schedules/ping/trigger/", follow=True)
    job = Job.objects.get(schedule="ping")
    assert job.scheduled_at is None
    assert f'href="/jobs/{job.id}/"' in response.content.decode()
    audit = ScheduleAuditEntry.objects.order_by("at", "id")
    assert [(a.action, a.username, a.source) for a in audit] == [
        ("pause", "olivia", "dashboard"),
        ("resume", "olivia", "dashboard"),
        ("trigger", "olivia", "dashboard"),
    ]


def test_read_only_staff_see_no_buttons_and_are_refused_the_actions(client, viewer):
    client.force_login(viewer)
    html = client.get("/schedules/").content.decode()
    assert "Every 30 seconds" in html
    assert not {"Pause", "Resume", "Run now"} & set(buttons_in(html))
    assert "/schedules/ping/" not in html
    for action in ("pause", "resume", "trigger"):
        assert client.post(f"/schedules/ping/{action}/").status_code == 403
    assert not Job.objects.exists()
    assert not Schedule.objects.filter(paused=True).exists()
    assert not ScheduleAuditEntry.objects.exists()


def test_anonymous_visitors_are_sent_to_log_in(client):
    response = client.get("/schedules/")
    assert response.status_code == 302 and "/login/" in response.url
    assert client.post("/schedules/ping/trigger/").status_code == 302
    assert not Job.objects.exists()


def test_an_unknown_schedule_is_a_404(client, operator):
    client.force_login(operator)
    assert client.post("/schedules/nope/pause/").status_code == 404


def test_the_job_page_names_its_schedule_and_fire_time(client, operator):
    job = scheduled_job("ping", JobState.SUCCEEDED, 1)
    client.force_login(operator)
    html = client.get(reverse("dashboard:job", args=[job.id])).content.decode()
    assert 'href="/schedules/#schedule-ping"' in html
    assert "fire time" in html


# --- the API ---------------------------------------------------------------------------------


@pytest.fixture
def operator_token(operator):
    return bearer(token_for(operator))


@pytest.fixture
def viewer_token(viewer):
    return bearer(token_for(viewer))


def test_the_api_lists_the_schedules_with_their_last_job(client, viewer_token):
    scheduled_job("ping", JobState.SUCCEEDED, 3)
    last = scheduled_job("ping", JobState.DEAD_LETTER, 1)
    response = client.get("/api/v1/schedules", headers=viewer_token)
    assert response.status_code == 200
    nightly, ping = response.json()["results"]
    assert {
        k: nightly[k] for k in ("name", "task_path", "cron", "every", "timezone", "paused")
    } == {
        "name": "nightly-report",
        "task_path": "tests.tasks.record",
        "cron": "0 3 * * *",
        "every": None,
        "timezone": "Europe/Paris",
        "paused": False,
    }
    assert nightly["last_job"] is None and nightly["next_fire_at"].endswith("+00:00")
    assert ping["every"] == 30 and ping["cron"] is None
    assert ping["last_job"]["id"] == str(last.id)
    assert ping["last_job"]["schedule"] == "ping"
    assert ping["last_job"]["scheduled_at"] == last.scheduled_at.isoformat()


def test_the_last_job_of_a_catch_up_enqueued_at_once_is_its_latest_fire_time(client, viewer_token):
    enqueued = timezone.now()  # one transaction: one enqueued_at for every fire time
    fired = [
        make_job(
            JobState.PENDING,
            schedule="ping",
            scheduled_at=enqueued - timedelta(seconds=30 * n),
            enqueued_at=enqueued,
            run_after=enqueued,
        )
        for n in range(8)
    ]
    ping = client.get("/api/v1/schedules", headers=viewer_token).json()["results"][1]
    assert ping["last_job"]["id"] == str(fired[0].id)
    # The page's recent runs, newest first, likewise.
    assert [job.id for job in recent_runs("ping")] == [job.id for job in fired[:RECENT_RUNS]]


def test_the_api_pauses_and_resumes_a_schedule(client, operator_token):
    response = client.post("/api/v1/schedules/ping/pause", headers=operator_token)
    assert response.status_code == 200
    assert response.json()["paused"] is True and response.json()["next_fire_at"] is None
    # Pausing again changes nothing and is no error.
    assert client.post("/api/v1/schedules/ping/pause", headers=operator_token).status_code == 200
    response = client.post("/api/v1/schedules/ping/resume", headers=operator_token)
    assert response.status_code == 200 and response.json()["paused"] is False
    assert [a.source for a in ScheduleAuditEntry.objects.all()] == ["api"] * 3


def test_the_api_runs_a_schedule_now(client, operator_token):
    response = client.post("/api/v1/schedules/nightly-report/trigger", headers=operator_token)
    assert response.status_code == 201
    body = response.json()
    assert body["schedule"] == "nightly-report" and body["scheduled_at"] is None
    assert body["args"] == ["report"]
    assert response.headers["Location"] == f"/api/v1/jobs/{body['id']}"
    assert Job.objects.count() == 1


def test_the_api_refuses_read_only_users_the_actions(client, viewer_token):
    for action in ("pause", "resume", "trigger"):
        response = client.post(f"/api/v1/schedules/ping/{action}", headers=viewer_token)
        assert response.status_code == 403
        assert "jobs.operate_job" in response.json()["error"]
    assert not Job.objects.exists() and not Schedule.objects.filter(paused=True).exists()


def test_the_api_answers_404_for_an_unknown_schedule(client, operator_token):
    for action in ("pause", "resume", "trigger"):
        response = client.post(f"/api/v1/schedules/nope/{action}", headers=operator_token)
        assert response.status_code == 404
        assert response.json() == {"error": "no such schedule"}


def test_api_jobs_carry_schedule_and_fire_time_or_nulls(client, viewer_token):
    plain = make_job(JobState.PENDING)
    fired = scheduled_job("ping", JobState.PENDING, 1)
    for job, schedule in ((plain, None), (fired, "ping")):
        body = client.get(f"/api/v1/jobs/{job.id}", headers=viewer_token).json()
        assert body["schedule"] == schedule
        assert body["scheduled_at"] == (job.scheduled_at.isoformat() if schedule else None)


# --- metrics ---------------------------------------------------------------------------------


def test_metrics_count_fires_and_missed_fires_per_schedule(client, viewer_token):
    with with_schedules(SCHEDULES, SCHEDULE_GRACE_SECONDS=1):
        clear_of_pings()
        schedules.tick()
        row = Schedule.objects.get(name="ping")
        row.last_fire_at -= timedelta(minutes=5)
        row.save()
        schedules.tick()
    text = client.get("/metrics", headers=viewer_token).content.decode()
    assert 'jobsite_schedule_fires_total{schedule="ping"} 1.0' in text
    assert 'jobsite_schedule_missed_total{schedule="ping"} 9.0' in text
    assert 'jobsite_schedule_fires_total{schedule="nightly-report"} 0.0' in text
