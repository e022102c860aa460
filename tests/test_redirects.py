"""Where `next` may send the browser: a path on this site, never a URL name, a bare fragment,
another host or the page itself; every form and the login page go through the same rule."""

import pytest
from django.test import RequestFactory
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.redirects import safe_next
from jobs.models import Job
from jobs.states import JobState
from tests.factories import make_job
from tests.test_api_support import make_user
from tests.test_dashboard_views import PASSWORD

FUZZ = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
UNSAFE = [
    "abc",
    "dashboard:overview",
    "#x",
    "?next=/",
    "",
    "https://evil.example/",
    "//evil.example/",
    "/\\evil.example/",
    "javascript:alert(1)",
    "/ok/\x00",
    "/ok/\n",
    "/login/",
    "/login/?next=/login/",
]
NEXT_VALUES = (
    st.text(max_size=30)
    | st.text(max_size=30).map(lambda s: "/" + s)
    | st.sampled_from(UNSAFE)
    | st.sampled_from(["/jobs/", "/jobs/?state=pending", "/dead-letters/"])
)


def request_for(path="/login/", **extra):
    return RequestFactory().get(path, **extra)


@pytest.mark.parametrize("target", UNSAFE)
def test_anything_but_a_path_on_this_site_other_than_this_page_is_refused(target):
    assert safe_next(request_for(), target) is None


@pytest.mark.parametrize("target", ["/", "/jobs/?state=pending", "/jobs/#top", "/dead-letters/"])
def test_a_path_on_this_site_is_taken_as_it_is(target):
    assert safe_next(request_for(), target) == target


def test_a_value_that_is_not_text_is_refused():
    assert safe_next(request_for(), None) is None


# The console's forms.


@pytest.fixture
def operator_client(client, django_user_model):
    client.force_login(make_user("olivia", operate=True))
    return client


ACTIONS = {
    "retry": JobState.DEAD_LETTER,
    "rerun": JobState.SUCCEEDED,
    "cancel": JobState.PENDING,
    "run_now": JobState.PENDING,
    "discard": JobState.SUCCEEDED,
}


@pytest.mark.django_db
@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("target", ["abc", "#x", "dashboard:overview"])
def test_an_action_with_a_next_that_is_no_path_acts_and_goes_back_to_the_job(
    operator_client, action, target
):
    job = make_job(ACTIONS[action])
    response = operator_client.post(reverse(f"dashboard:{action}", args=[job.id]), {"next": target})

    assert response.status_code == 302
    if action == "discard":
        assert response["Location"] == reverse("dashboard:jobs")
        assert not Job.objects.filter(id=job.id).exists()
    else:
        assert response["Location"] == reverse("dashboard:job", args=[job.id])


@pytest.mark.django_db
def test_an_action_with_a_path_for_next_goes_there(operator_client):
    job = make_job(JobState.DEAD_LETTER)
    response = operator_client.post(
        reverse("dashboard:retry", args=[job.id]), {"next": "/dead-letters/?q=x"}
    )

    assert response["Location"] == "/dead-letters/?q=x"
    assert Job.objects.get(id=job.id).state == JobState.PENDING


@pytest.mark.django_db
@given(target=NEXT_VALUES)
@FUZZ
def test_any_next_on_an_action_gets_a_redirect_on_this_site(operator_client, target):
    job = make_job(JobState.DEAD_LETTER)
    response = operator_client.post(reverse("dashboard:retry", args=[job.id]), {"next": target})

    assert response.status_code == 302
    assert response["Location"].startswith("/") and not response["Location"].startswith("//")


# The login page.


@pytest.fixture
def signed_in(client, django_user_model):
    client.force_login(make_user("olivia"))
    return client


@pytest.mark.django_db
@pytest.mark.parametrize("target", ["/login/", "%23x", "abc", "/login/%3Fnext=/login/"])
def test_a_signed_in_user_on_the_login_page_lands_on_the_overview_not_in_a_loop(signed_in, target):
    response = signed_in.get(f"/login/?next={target}")

    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:overview")


@pytest.mark.django_db
def test_a_signed_in_user_on_the_login_page_goes_on_to_a_safe_next(signed_in):
    response = signed_in.get("/login/?next=/jobs/")

    assert response["Location"] == "/jobs/"


@pytest.mark.django_db
@given(target=NEXT_VALUES)
@FUZZ
def test_any_next_on_the_login_page_gets_a_redirect_on_this_site(signed_in, target):
    response = signed_in.get("/login/", {"next": target})

    assert response.status_code == 302
    location = response["Location"]
    assert location.startswith("/") and not location.startswith("//")
    assert not location.startswith("/login/")


@pytest.mark.django_db
@pytest.mark.parametrize("target", ["abc", "#x", "/login/"])
def test_logging_in_with_a_next_that_is_no_path_lands_on_the_overview(client, operator, target):
    response = client.post(
        "/login/", {"username": operator.username, "password": PASSWORD, "next": target}
    )

    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:overview")
