"""`manage.py create_api_token`: issue, list and revoke bearer tokens, stored hashed."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from dashboard.models import ApiToken
from tests.test_api_support import bearer, make_user

pytestmark = pytest.mark.django_db


def run(*args):
    out, err = StringIO(), StringIO()
    call_command("create_api_token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_new_token_is_printed_alone_on_the_last_line_and_works(client):
    make_user("alice", operate=True)

    out, _ = run("alice", "--name", "runbook")

    key = out.splitlines()[-1]
    assert key.startswith("jst_") and " " not in key
    assert client.get("/api/v1/jobs", headers=bearer(key)).status_code == 200
    token = ApiToken.objects.get()
    assert (token.user.username, token.name) == ("alice", "runbook")


def test_only_a_hash_of_the_token_is_stored():
    make_user("alice")

    key = run("alice")[0].splitlines()[-1]

    token = ApiToken.objects.get()
    assert token.key_hash == ApiToken.hash_key(key)
    assert key not in {token.key_hash, token.prefix, token.name}


def test_a_token_for_a_non_staff_user_comes_with_a_warning():
    make_user("bob", staff=False)

    _, err = run("bob")

    assert "403" in err


def test_an_unknown_user_is_an_error():
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        run("nobody")


def test_creating_without_a_user_is_an_error():
    with pytest.raises(CommandError, match="USER"):
        run()


def test_list_shows_tokens_without_their_keys():
    make_user("alice")
    make_user("bob")
    alice_key = run("alice", "--name", "ci")[0].splitlines()[-1]
    run("bob")

    everyone, _ = run("--list")
    only_alice, _ = run("--list", "alice")

    assert alice_key not in everyone
    assert alice_key[:12] in everyone and "ci" in everyone
    assert "bob" in everyone and "bob" not in only_alice


def test_revoke_by_prefix_locks_the_token_out(client):
    make_user("alice")
    key = run("alice")[0].splitlines()[-1]

    out, _ = run("--revoke", key[:12])

    assert "Revoked" in out
    assert client.get("/api/v1/jobs", headers=bearer(key)).status_code == 401
    assert "revoked" in run("--list")[0]


def test_revoke_by_id_and_revoking_twice_is_harmless(client):
    make_user("alice")
    run("alice")
    token = ApiToken.objects.get()

    run("--revoke", str(token.pk))
    out, _ = run("--revoke", str(token.pk))

    assert "already revoked" in out
    assert ApiToken.objects.live().count() == 0


def test_revoking_an_unknown_token_is_an_error():
    with pytest.raises(CommandError, match="no token"):
        run("--revoke", "jst_nothing")


@pytest.mark.django_db(transaction=True)
def test_a_script_can_take_the_token_from_the_commands_last_line(client, manage):
    make_user("alice", operate=True)

    proc = manage("create_api_token", "alice", check=True)

    key = proc.stdout.splitlines()[-1]
    assert client.get("/api/v1/metrics/summary", headers=bearer(key)).status_code == 200


def test_a_token_with_an_expiry_works_until_then_and_is_printed_alone_on_the_last_line(client):
    make_user("alice", operate=True)

    out, _ = run("alice", "--expires-in", "30")

    key = out.splitlines()[-1]
    assert key.startswith("jst_") and " " not in key
    assert "valid until" in out.splitlines()[0]
    token = ApiToken.objects.get()
    assert timedelta(days=29) < token.expires_at - timezone.now() <= timedelta(days=30)
    assert client.get("/api/v1/jobs", headers=bearer(key)).status_code == 200


def test_an_expired_token_is_refused_and_listed_as_expired(client):
    make_user("alice", operate=True)
    key = run("alice", "--expires-in", "1")[0].splitlines()[-1]
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    response = client.get("/api/v1/jobs", headers=bearer(key))

    assert response.status_code == 401
    assert "expired" in response.json()["error"]
    assert "expired" in run("--list")[0].splitlines()[-1]


def test_a_token_without_an_expiry_never_expires():
    make_user("alice")

    run("alice")

    assert ApiToken.objects.get().expires_at is None
    assert ApiToken.objects.live().count() == 1


@pytest.mark.parametrize("days", ["0", "-1", "soon", "3651"])
def test_an_expiry_that_is_not_a_whole_number_of_days_in_range_is_refused(days):
    make_user("alice")

    with pytest.raises(CommandError, match="--expires-in"):
        run("alice", "--expires-in", days)

    assert not ApiToken.objects.exists()
