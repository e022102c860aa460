"""Every answer the JSON API can give is JSON: refusals before the view ran, bodies too large to
read, unknown endpoints and methods, and failures of the server itself."""

import json
import logging

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from jobs.models import Job
from jobs.states import JobState
from tests.factories import make_job

pytestmark = pytest.mark.django_db

TOO_BIG = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1


def assert_json_error(response, status):
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]


def test_a_body_over_the_upload_limit_is_a_json_413_and_runs_nothing(operator_headers):
    job = make_job(JobState.SUCCEEDED)
    body = json.dumps({"args": ["x" * TOO_BIG]})

    response = Client().post(
        f"/api/v1/jobs/{job.id}/rerun",
        body,
        content_type="application/json",
        headers=operator_headers,
    )

    assert_json_error(response, 413)
    assert Job.objects.count() == 1


def test_a_form_body_over_the_upload_limit_from_a_session_is_a_json_413(admin_client):
    job = make_job(JobState.SUCCEEDED)

    response = admin_client.post(
        f"/api/v1/jobs/{job.id}/rerun",
        "args=" + "x" * TOO_BIG,
        content_type="application/x-www-form-urlencoded",
    )

    assert_json_error(response, 413)
    assert Job.objects.count() == 1


def test_a_failure_of_the_server_is_a_json_500_and_is_logged(admin_user, caplog):
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    request_log = logging.getLogger("django.request")
    request_log.addHandler(caplog.handler)
    try:
        with connection.cursor() as cursor:
            # A real fault: the table is gone (rolled back with the test's transaction).
            cursor.execute("ALTER TABLE jobs_job RENAME TO jobs_job_away")
        response = client.get("/api/v1/jobs")
    finally:
        request_log.removeHandler(caplog.handler)

    assert_json_error(response, 500)
    [record] = [r for r in caplog.records if r.name == "django.request"]
    assert record.levelno == logging.ERROR
    assert record.getMessage() == "Internal Server Error: /api/v1/jobs"
    assert record.exc_info is not None


def test_a_database_out_of_reach_is_a_json_503_saying_to_try_again(admin_user, monkeypatch, caplog):
    from django.db import OperationalError

    from dashboard import auth

    client = Client(raise_request_exception=False)
    client.force_login(admin_user)

    def refused(request):
        raise OperationalError('connection to server at "10.0.0.7", port 6432 failed: refused')

    monkeypatch.setattr(auth, "authenticate", refused)
    with caplog.at_level(logging.WARNING, logger="dashboard.auth"):
        response = client.get("/api/v1/jobs")

    assert_json_error(response, 503)
    assert response.json()["error"] == "the database is unavailable right now; try again shortly"
    assert response["Retry-After"] == "5"
    assert "10.0.0.7" not in response.content.decode()  # the details go to the log only
    assert "10.0.0.7" in caplog.text


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("get", "/api/v1/no-such-thing", 404),
        ("get", "/api/v1/jobs/not-a-job", 404),
        ("delete", "/api/v1/jobs", 405),
        ("get", "/api/v1/openapi.json?x=1", 400),
        ("get", "/api/v1/jobs?limit=many", 400),
        ("post", "/api/v1/queues/emails/pause", 403),  # a session POST without its CSRF token
    ],
)
def test_refusals_of_the_api_are_json(admin_user, method, path, status):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    assert_json_error(getattr(client, method)(path), status)


def test_an_unknown_host_is_a_json_400_under_the_api(admin_client):
    response = admin_client.get("/api/v1/jobs", headers={"host": "evil.example"})

    assert_json_error(response, 400)


def test_the_console_keeps_its_html_error_pages(admin_client):
    response = admin_client.get("/jobs/not-a-page/", headers={"host": "evil.example"})

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
