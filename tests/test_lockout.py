"""Login throttling (django-axes, configured in jobsite/settings.py) and its lockout page."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.db.models import F

from tests.test_api_support import bearer, token_for

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"
REFUSED = "Too many login attempts"


@pytest.fixture
def olivia(db):
    return User.objects.create_user("olivia", password=PASSWORD, is_staff=True)


@pytest.fixture
def victor(db):
    return User.objects.create_user("victor", password=PASSWORD, is_staff=True)


def log_in(client, username, password=PASSWORD, *, address="10.0.0.1", path="/login/"):
    return client.post(path, {"username": username, "password": password}, REMOTE_ADDR=address)


def fail(client, username, times=5, **where):
    """Wrong passwords: the form again with its error; the 5th failure is answered refused."""
    for _ in range(times):
        response = log_in(client, username, "wrong password", **where)
        assert response.status_code in (200, 429)


def logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def age_failures(**delta):
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(**delta))


def test_five_wrong_passwords_then_the_right_one_is_refused_with_the_minutes_left(client, olivia):
    fail(client, "olivia", times=4)
    assert log_in(client, "olivia", "wrong password").status_code == 429

    response = log_in(client, "olivia")

    assert response.status_code == 429
    html = response.content.decode()
    assert REFUSED in html
    assert "Try again in 15 minutes" in html
    assert 'href="/static/dashboard/dashboard.css"' in html  # the console's look
    assert not logged_in(client)


def test_four_wrong_passwords_still_let_the_right_one_in(client, olivia):
    fail(client, "olivia", times=4)
    assert log_in(client, "olivia").status_code == 302
    assert logged_in(client)


def test_another_username_from_another_address_still_logs_in(client, olivia, victor):
    fail(client, "olivia", address="10.0.0.1")

    response = log_in(client, "victor", address="10.0.0.2")

    assert response.status_code == 302
    assert logged_in(client)


def test_the_locked_username_is_refused_from_any_address(client, olivia):
    fail(client, "olivia", address="10.0.0.1")
    response = log_in(client, "olivia", address="10.9.9.9")
    assert response.status_code == 429
    assert not logged_in(client)


def test_the_locked_address_is_refused_for_any_username(client, olivia, victor):
    for username in ["a", "b", "c", "d", "e"]:
        fail(client, username, times=1, address="10.0.0.7")
    response = log_in(client, "victor", address="10.0.0.7")
    assert response.status_code == 429
    assert not logged_in(client)


def test_the_admin_login_is_throttled_too(client, olivia):
    fail(client, "olivia", path="/admin/login/")
    response = log_in(client, "olivia", path="/admin/login/")
    assert response.status_code == 429
    assert REFUSED in response.content.decode()


def test_attempts_while_refused_do_not_extend_the_wait(client, olivia):
    fail(client, "olivia")
    age_failures(minutes=10)
    for _ in range(3):
        assert log_in(client, "olivia", "wrong password").status_code == 429
    response = log_in(client, "olivia")
    assert "Try again in 5 minutes" in response.content.decode()


def test_the_lockout_ends_after_15_minutes(client, olivia):
    fail(client, "olivia")
    age_failures(minutes=14, seconds=50)
    assert log_in(client, "olivia").status_code == 429

    age_failures(seconds=11)

    assert log_in(client, "olivia").status_code == 302
    assert logged_in(client)


def test_a_successful_login_clears_the_earlier_failures(client, olivia):
    fail(client, "olivia", times=4)
    assert log_in(client, "olivia").status_code == 302
    client.logout()
    fail(client, "olivia", times=4)
    assert log_in(client, "olivia").status_code == 302


def test_api_tokens_are_not_logins_and_work_from_a_locked_address(client, olivia):
    fail(client, "olivia", address="10.0.0.1")
    response = client.get("/api/v1/jobs", headers=bearer(token_for(olivia)), REMOTE_ADDR="10.0.0.1")
    assert response.status_code == 200
