"""The console's confirmations, error pages, run now, per-task pages and time display, through
Django's test client (the browser side is in test_console_browser.py)."""

import re
from datetime import timedelta

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from jobs.models import Attempt, AuditEntry, Job
from jobs.states import JobState
from tests.test_dashboard_views import make_job, make_user


@pytest.fixture
def operator_client(client, django_user_model):
    client.force_login(make_user(django_user_model, "olivia", operate=True))
    return client


@pytest.fixture
def viewer_client(client, django_user_model):
    client.force_login(make_user(django_user_model, "victor"))
    return client


def forms_in(html: str) -> list[str]:
    return re.findall(r"<form [^>]*>.*?</form>", html, re.S)


def later(**delta):
    return timezone.now() + timedelta(**delta)


# Confirmations.


@pytest.mark.django_db
def test_rerun_and_cancel_forms_ask_first_and_retry_does_not(operator_client):
    dead = make_job(JobState.DEAD_LETTER)
    html = operator_client.get(f"/jobs/{dead.id}/").content.decode()
    rerun = next(f for f in forms_in(html) if 'data-action="rerun"' in f)
    retry = next(f for f in forms_in(html) if 'data-action="retry"' in f)
    assert 'data-confirm="Rerun this job?' in rerun
    assert 'name="confirm" value="ask"' in rerun
    assert ">Rerun</button>" in rerun
    assert "data-confirm" not in retry and 'name="confirm"' not in retry

    pending = make_job(JobState.PENDING)
    html = operator_client.get(f"/jobs/{pending.id}/").content.decode()
    cancel = next(f for f in forms_in(html) if 'data-action="cancel"' in f)
    assert 'data-confirm="Cancel this job?' in cancel
    assert 'name="confirm" value="ask"' in cancel


@pytest.mark.django_db
def test_rerun_posted_without_script_answers_a_confirmation_page_and_changes_nothing(
    operator_client,
):
    dead = make_job(JobState.DEAD_LETTER)
    response = operator_client.post(
        reverse("dashboard:rerun", args=[dead.id]),
        {"confirm": "ask", "token": "t-1", "next": "/dead-letters/"},
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "Rerun this job? A new run with the same arguments is enqueued." in html
    assert 'class="topbar"' in html  # inside the console layout
    form = next(f for f in forms_in(html) if 'name="confirm" value="yes"' in f)
    assert f'action="{reverse("dashboard:rerun", args=[dead.id])}"' in form
    assert 'name="token" value="t-1"' in form and 'name="next" value="/dead-letters/"' in form
    assert ">Rerun job</button>" in form
    assert '<a class="button button-quiet" href="/dead-letters/">Go back</a>' in html
    assert Job.objects.count() == 1
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_confirmed_rerun_from_the_confirmation_page_makes_one_new_run(operator_client):
    dead = make_job(JobState.DEAD_LETTER)
    url = reverse("dashboard:rerun", args=[dead.id])
    for _ in range(2):  # the confirmation page's form, sent twice
        response = operator_client.post(url, {"confirm": "yes", "token": "t-2"})
        assert response.status_code == 302
    assert Job.objects.filter(rerun_of=dead).count() == 1


@pytest.mark.django_db
def test_cancel_without_script_asks_then_cancels_on_yes(operator_client):
    job = make_job(JobState.PENDING)
    url = reverse("dashboard:cancel", args=[job.id])
    asked = operator_client.post(url, {"confirm": "ask"})
    assert asked.status_code == 200
    assert b"Cancel this job?" in asked.content
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert operator_client.post(url, {"confirm": "yes"}).status_code == 302
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


@pytest.mark.django_db
def test_a_post_without_a_confirm_field_acts_at_once(operator_client):
    job = make_job(JobState.PENDING)
    response = operator_client.post(reverse("dashboard:cancel", args=[job.id]))
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


@pytest.mark.django_db
def test_confirmation_page_for_an_unknown_job_is_a_404_in_the_layout(operator_client):
    url = reverse("dashboard:rerun", args=["00000000-0000-4000-8000-000000000000"])
    response = operator_client.post(url, {"confirm": "ask"})
    assert response.status_code == 404
    assert b'class="topbar"' in response.content


@pytest.mark.django_db
def test_read_only_user_gets_403_on_an_asking_post_and_sees_no_buttons(viewer_client):
    dead = make_job(JobState.DEAD_LETTER)
    waiting = make_job(JobState.PENDING, run_after=later(hours=1))
    for job, action in [(dead, "rerun"), (waiting, "cancel"), (waiting, "run_now")]:
        response = viewer_client.post(
            reverse(f"dashboard:{action}", args=[job.id]), {"confirm": "ask"}
        )
        assert response.status_code == 403
    for job in (dead, waiting):
        html = viewer_client.get(f"/jobs/{job.id}/").content.decode()
        assert '<form method="post" action="/jobs/' not in html
    assert "data-action" not in viewer_client.get("/jobs/").content.decode()
    waiting.refresh_from_db()
    assert waiting.state == JobState.PENDING and waiting.run_after > timezone.now()


# Errors inside the console layout.


@pytest.mark.django_db
def test_unknown_job_id_is_a_404_inside_the_console_layout(operator_client):
    response = operator_client.get("/jobs/00000000-0000-4000-8000-000000000000/")
    assert response.status_code == 404
    html = response.content.decode()
    assert 'class="topbar"' in html and '<h1 id="error-title">Not found</h1>' in html
    assert 'href="/">Back to the overview</a>' in html


@pytest.mark.django_db
def test_pruned_job_is_a_404_inside_the_console_layout(operator_client):
    job = make_job(JobState.SUCCEEDED)
    job.delete()
    response = operator_client.get(f"/jobs/{job.id}/")
    assert response.status_code == 404
    assert b"Not found" in response.content and b'class="topbar"' in response.content


@pytest.mark.django_db
@override_settings(DEBUG=False)
def test_unknown_url_is_a_404_inside_the_console_layout(operator_client):
    response = operator_client.get("/no-such-page/")
    assert response.status_code == 404
    assert b'class="topbar"' in response.content and b"Not found" in response.content


@pytest.mark.django_db
def test_error_handlers_render_400_403_and_500_in_the_layout(rf, django_user_model):
    from dashboard import errors

    request = rf.get("/")
    request.user = make_user(django_user_model, "olivia", operate=True)
    for status, view in [
        (400, errors.bad_request),
        (403, errors.permission_denied),
        (500, errors.server_error),
    ]:
        response = view(request) if status == 500 else view(request, Exception())
        assert response.status_code == status
        html = response.content.decode()
        assert f"Error {status}" in html and 'class="topbar"' in html
        assert "Back to the overview" in html


def test_server_error_page_falls_back_to_plain_html_when_the_layout_fails(rf, monkeypatch):
    from dashboard import errors

    def broken(*args, **kwargs):
        raise RuntimeError("database down")

    monkeypatch.setattr(errors, "render_to_string", broken)
    response = errors.server_error(rf.get("/"))
    assert response.status_code == 500
    assert b"Something went wrong" in response.content


@pytest.mark.django_db
def test_demo_project_wires_the_console_error_handlers():
    from jobsite import urls

    assert urls.handler404 == "dashboard.errors.page_not_found"
    assert urls.handler500 == "dashboard.errors.server_error"
    assert urls.handler403 == "dashboard.errors.permission_denied"
    assert urls.handler400 == "dashboard.errors.bad_request"


# Run now and "runs at".


@pytest.mark.django_db
def test_job_waiting_for_later_shows_runs_at_and_a_run_now_button(operator_client):
    job = make_job(JobState.PENDING, run_after=later(hours=1))
    html = operator_client.get(f"/jobs/{job.id}/").content.decode()
    assert "<dt>Runs at</dt>" in html and "in 59 min" in html
    assert ">Run now</button>" in html
    listing = operator_client.get("/jobs/").content.decode()
    assert '<th scope="col">Runs at</th>' in listing


@pytest.mark.django_db
def test_due_job_shows_no_runs_at_column_and_no_run_now(operator_client):
    job = make_job(JobState.PENDING, run_after=later(minutes=-1))
    html = operator_client.get(f"/jobs/{job.id}/").content.decode()
    assert ">Run now</button>" not in html and "<dt>Runs at</dt>" not in html
    assert "Runs at" not in operator_client.get("/jobs/").content.decode()


@pytest.mark.django_db
def test_run_now_button_makes_a_retrying_job_due_and_is_audited(operator_client):
    job = make_job(JobState.RETRYING, attempt=1, run_after=later(minutes=10))
    response = operator_client.post(reverse("dashboard:run_now", args=[job.id]), follow=True)
    assert response.status_code == 200
    assert b"job due now" in response.content
    job.refresh_from_db()
    assert job.run_after <= timezone.now()
    assert job.state == JobState.RETRYING
    entry = AuditEntry.objects.get(job=job)
    assert (entry.action, entry.source, entry.username) == ("run now", "dashboard", "olivia")


@pytest.mark.django_db
def test_run_now_on_a_finished_job_changes_nothing_and_says_so(operator_client):
    job = make_job(JobState.SUCCEEDED)
    response = operator_client.post(reverse("dashboard:run_now", args=[job.id]), follow=True)
    assert b"job already succeeded" in response.content


# A success after retries.


@pytest.mark.django_db
def test_job_that_succeeded_after_a_retry_shows_its_errors_as_history(operator_client):
    job = make_job(
        JobState.SUCCEEDED, attempt=2, error_type="ConnectionError", error_message="refused"
    )
    now = timezone.now()
    Attempt.objects.create(
        job=job, number=1, outcome="failed", error_type="ConnectionError",
        error_message="refused", started_at=now, finished_at=now,
    )  # fmt: skip
    Attempt.objects.create(job=job, number=2, outcome="succeeded", started_at=now, finished_at=now)
    html = operator_client.get(f"/jobs/{job.id}/").content.decode()
    assert "Last error" not in html and "error-card" not in html
    assert "Succeeded after 1 failed attempt" in html
    assert "refused" in html  # still there, on its attempt


@pytest.mark.django_db
def test_dead_letter_still_shows_its_last_error(operator_client):
    job = make_job(JobState.DEAD_LETTER)
    html = operator_client.get(f"/jobs/{job.id}/").content.decode()
    assert "Last error" in html and "error-card" in html


# Absolute times.


@pytest.mark.django_db
def test_times_show_the_absolute_utc_time_beside_the_relative_one(operator_client, monkeypatch):
    # The page's clock at midday, so five minutes earlier is today whenever the suite runs.
    midday = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
    monkeypatch.setattr(timezone, "now", lambda: midday)
    moment = midday - timedelta(minutes=5)
    job = make_job(JobState.PENDING, enqueued_at=moment)
    html = operator_client.get(f"/jobs/{job.id}/").content.decode()
    clock = moment.strftime("%H:%M:%S")
    assert f'5 min ago<span class="abs-time"><span class="abs-sep"> · </span>{clock} UTC' in html


@pytest.mark.django_db
def test_times_of_another_day_show_the_date(operator_client):
    moment = timezone.now() - timedelta(days=3)
    job = make_job(JobState.PENDING, enqueued_at=moment)
    html = operator_client.get(f"/jobs/{job.id}/").content.decode()
    assert f"</span>{moment:%Y-%m-%d %H:%M} UTC</span>" in html


# Live refresh and shortcuts: the controls are there for the script to reveal.


@pytest.mark.django_db
def test_every_page_carries_the_hidden_live_refresh_controls_and_shortcut_help(operator_client):
    html = operator_client.get("/").content.decode()
    for control in ("data-live-status", "data-live-toggle", "data-shortcuts-help"):
        assert re.search(rf"<(span|button)[^>]*{control}[^>]* hidden[ >]", html), control


@pytest.mark.django_db
def test_job_rows_carry_their_id_and_address_for_keyboard_triage(operator_client):
    job = make_job(JobState.DEAD_LETTER)
    for path in ("/jobs/", "/dead-letters/"):
        html = operator_client.get(path).content.decode()
        assert f'data-job-row data-job-id="{job.id}" data-href="/jobs/{job.id}/"' in html


@pytest.mark.django_db
def test_failed_rows_of_the_job_list_offer_retry_only(operator_client):
    make_job(JobState.DEAD_LETTER)
    make_job(JobState.SUCCEEDED)
    html = operator_client.get("/jobs/").content.decode()
    assert re.findall(r'data-action="([\w-]+)"', html) == ["retry"]


# Phone width: the overview's queue figures are labelled for the stacked layout.


@pytest.mark.django_db
def test_overview_queue_cells_are_labelled_for_the_phone_layout(operator_client):
    make_job(JobState.DEAD_LETTER, queue_name="emails")
    html = operator_client.get("/").content.decode()
    for label in ("Pending", "Running", "Retrying", "Dead letters", "Oldest due"):
        assert f'data-label="{label}"' in html


@pytest.mark.django_db
def test_a_form_posted_without_its_csrf_token_is_refused_inside_the_layout(django_user_model):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user(django_user_model, "olivia", operate=True))
    job = make_job(JobState.DEAD_LETTER)
    response = client.post(reverse("dashboard:retry", args=[job.id]))
    assert response.status_code == 403
    assert b'class="topbar"' in response.content and b"reload the page" in response.content
    job.refresh_from_db()
    assert job.state == JobState.DEAD_LETTER


@pytest.mark.django_db
def test_discard_without_script_asks_first_then_discards_on_yes(operator_client):
    job = make_job(JobState.DEAD_LETTER)
    html = operator_client.get(f"/jobs/{job.id}/").content.decode()
    discard = next(f for f in forms_in(html) if 'data-action="discard"' in f)
    assert 'name="confirm" value="ask"' in discard and "data-confirm=" in discard
    url = reverse("dashboard:discard", args=[job.id])
    asked = operator_client.post(url, {"confirm": "ask"})
    assert asked.status_code == 200 and b"Discard this job and its attempts?" in asked.content
    assert Job.objects.filter(id=job.id).exists()
    assert operator_client.post(url, {"confirm": "yes"}).status_code == 302
    assert not Job.objects.filter(id=job.id).exists()
