"""The console, API and metrics mounted under a prefix of a host project's URLs.

The host project here has its own LOGIN_URL, no URL named `logout`, and no HtmxMiddleware.
"""

import pytest
from django.conf import settings
from django.test import override_settings

from jobs.states import JobState
from tests.factories import make_job
from tests.test_api_support import bearer, make_user, token_for

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.urls("tests.urls_mounted"),
]

HOST_MIDDLEWARE = [m for m in settings.MIDDLEWARE if "htmx" not in m]


@pytest.fixture(autouse=True)
def host_project():
    with override_settings(LOGIN_URL="/accounts/sign-in/", MIDDLEWARE=HOST_MIDDLEWARE):
        yield


@pytest.fixture
def staff_client(client):
    client.force_login(make_user("ada", operate=True))
    return client


def test_anonymous_users_are_sent_to_the_host_projects_login_url(client):
    response = client.get("/ops/jobs/")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/sign-in/?next=/ops/jobs/"


def test_console_pages_link_under_the_prefix(staff_client):
    job = make_job(state=JobState.DEAD_LETTER)

    for url in [
        "/ops/",
        "/ops/jobs/",
        f"/ops/jobs/{job.id}/",
        "/ops/dead-letters/",
        "/ops/queues/",
    ]:
        response = staff_client.get(url)
        assert response.status_code == 200, url
    page = staff_client.get("/ops/").content.decode()
    assert 'href="/ops/jobs/"' in page
    assert 'href="/ops/dead-letters/"' in page


def test_without_a_logout_url_the_console_shows_no_logout_form(staff_client):
    page = staff_client.get("/ops/").content.decode()

    assert "Log out" not in page


def test_htmx_requests_get_the_fragment_without_the_middleware(staff_client):
    whole = staff_client.get("/ops/jobs/").content.decode()
    fragment = staff_client.get("/ops/jobs/", headers={"HX-Request": "true"}).content.decode()

    assert "<html" in whole
    assert "<html" not in fragment
    assert fragment.strip()


def test_an_action_under_the_prefix_redirects_back_under_the_prefix(staff_client):
    job = make_job(state=JobState.DEAD_LETTER)

    response = staff_client.post(f"/ops/jobs/{job.id}/retry/")

    assert response.status_code == 302
    assert response["Location"].startswith("/ops/")
    job.refresh_from_db()
    assert job.state == JobState.PENDING


def test_the_api_answers_under_the_prefix_with_a_token(client):
    key = token_for(make_user("bot", operate=True))
    job = make_job(state=JobState.SUCCEEDED)

    listing = client.get("/ops/api/v1/jobs", headers=bearer(key))
    rerun = client.post(f"/ops/api/v1/jobs/{job.id}/rerun", headers=bearer(key))

    assert listing.status_code == 200
    assert [row["id"] for row in listing.json()["results"]] == [str(job.id)]
    assert rerun.status_code == 201
    assert rerun["Location"].startswith("/ops/api/v1/jobs/")


def test_the_api_describes_and_points_to_its_own_prefix(client):
    key = token_for(make_user("bot"))

    document = client.get("/ops/api/v1/openapi.json", headers=bearer(key)).json()
    missing = client.get("/ops/api/v1/nothing-here", headers=bearer(key))

    assert document["servers"] == [{"url": "/ops/api/v1"}]
    assert missing.status_code == 404
    assert "/ops/api/v1/openapi.json" in missing.json()["error"]


def test_metrics_answer_under_the_prefix(client):
    key = token_for(make_user("prometheus"))

    response = client.get("/ops/metrics", headers=bearer(key))

    assert response.status_code == 200
    assert "jobs_enqueued" in response.content.decode()


def test_django_5_2_without_its_backports_is_a_check_error_naming_the_extra():
    from dashboard.apps import missing_backports

    assert missing_backports(version=(6, 1), find=lambda module: None) == []
    missing = missing_backports(version=(5, 2), find=lambda module: None)
    assert missing == ["django-tasks", "django-template-partials"]
    found = missing_backports(version=(5, 2), find=lambda m: m if m == "django_tasks" else None)
    assert found == ["django-template-partials"]


def test_this_django_has_what_it_needs():
    from dashboard.apps import check_backports

    assert check_backports() == []


def test_the_check_error_says_which_packages_and_how_to_install_them(monkeypatch):
    from dashboard import apps

    monkeypatch.setattr(apps, "missing_backports", lambda: ["django-template-partials"])
    (error,) = apps.check_backports()
    assert error.id == "dashboard.E001" and "django-template-partials" in error.msg
    assert 'pip install "jobsite[django52]" "Django>=5.2,<6.0"' in error.hint
