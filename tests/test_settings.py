"""The project's settings in production shape: refusing to start without a secret key, the
security headers, and `check --deploy` with the documented production environment."""

import runpy
import subprocess
import sys

import django
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from tests.conftest import ROOT

MISSING_KEY = "DJANGO_SECRET_KEY is not set"


def run(args, env, timeout=120):
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def production_env_without_key(subprocess_env):
    env = {k: v for k, v in subprocess_env.items() if k != "DJANGO_SECRET_KEY"}
    env["DJANGO_DEBUG"] = "0"
    return env


@pytest.mark.parametrize(
    "command",
    [
        ["manage.py", "worker", "--burst"],
        ["manage.py", "runserver", "127.0.0.1:0", "--noreload"],
        ["manage.py", "runserver", "127.0.0.1:0"],
        ["manage.py", "check", "--deploy"],
        ["-c", "import jobsite.wsgi"],
        ["-c", "import jobsite.asgi"],
    ],
    ids=["worker", "runserver", "runserver-autoreload", "check-deploy", "wsgi", "asgi"],
)
def test_without_a_secret_key_in_production_every_process_stops_saying_what_to_set(
    production_env_without_key, command
):
    proc = run(command, production_env_without_key)
    assert proc.returncode != 0
    assert MISSING_KEY in proc.stderr
    assert "secrets.token_urlsafe" in proc.stderr


def test_an_empty_secret_key_counts_as_missing(production_env_without_key):
    proc = run(["manage.py", "check"], {**production_env_without_key, "DJANGO_SECRET_KEY": "  "})
    assert proc.returncode != 0
    assert MISSING_KEY in proc.stderr


def test_debug_runs_with_the_development_key_when_none_is_set(production_env_without_key):
    proc = run(["manage.py", "check"], {**production_env_without_key, "DJANGO_DEBUG": "1"})
    assert proc.returncode == 0, proc.stderr


# HTTPS and the security headers.

PRODUCTION = {
    "DJANGO_DEBUG": "0",
    "DJANGO_ALLOWED_HOSTS": "jobs.example.com",
    "DJANGO_SECURE_COOKIES": "1",
    "DJANGO_SECURE_SSL_REDIRECT": "1",
    "DJANGO_SECURE_HSTS_SECONDS": "31536000",
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "DJANGO_SECURE_HSTS_PRELOAD": "1",
}
HTTPS_SETTINGS = [
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
    "SECURE_PROXY_SSL_HEADER",
]


def settings_under(monkeypatch, environment) -> dict:
    """The project's settings module evaluated with `environment` on top of the test run's."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    namespace = runpy.run_path(str(ROOT / "jobsite" / "settings.py"))
    return {name: namespace[name] for name in HTTPS_SETTINGS if name in namespace}


def test_https_settings_are_off_unless_the_environment_turns_them_on(monkeypatch):
    assert settings_under(monkeypatch, {}) == {
        "SECURE_SSL_REDIRECT": False,
        "SECURE_HSTS_SECONDS": 0,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": False,
        "SECURE_HSTS_PRELOAD": False,
    }


def test_the_production_environment_turns_on_hsts_and_the_redirect(monkeypatch):
    proxy = {**PRODUCTION, "DJANGO_SECURE_PROXY_SSL_HEADER": "1"}
    assert settings_under(monkeypatch, proxy) == {
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31536000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_HSTS_PRELOAD": True,
        "SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https"),
    }


def test_a_malformed_hsts_duration_is_a_clear_error(monkeypatch):
    with pytest.raises(ImproperlyConfigured, match="DJANGO_SECURE_HSTS_SECONDS"):
        settings_under(monkeypatch, {"DJANGO_SECURE_HSTS_SECONDS": "a year"})


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("JOBSITE_LEASE_SECONDS", "abc", "JOBSITE_LEASE_SECONDS must be a number, not 'abc'"),
        ("JOBSITE_MAX_SNOOZES", "1.5", "JOBSITE_MAX_SNOOZES must be a whole number, not '1.5'"),
        (
            "DJANGO_SECURE_HSTS_SECONDS",
            "a year",
            "DJANGO_SECURE_HSTS_SECONDS must be a whole number, not 'a year'",
        ),
    ],
)
def test_a_number_in_the_environment_that_is_not_one_is_named(monkeypatch, name, value, said):
    with pytest.raises(ImproperlyConfigured) as refused:
        settings_under(monkeypatch, {name: value})
    assert str(refused.value) == said


def test_check_deploy_is_clean_with_the_documented_production_environment(subprocess_env):
    proc = run(
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        {**subprocess_env, **PRODUCTION},
    )
    assert proc.returncode == 0, proc.stderr
    assert "no issues" in proc.stdout


@pytest.mark.parametrize("command", [["worker", "--burst"], ["enqueue", "tests.tasks.add", "1"]])
def test_a_sqlite_file_that_cannot_be_opened_is_named_in_one_line(
    subprocess_env, tmp_path, command
):
    missing = tmp_path / "no such folder" / "jobs.sqlite3"
    proc = run(["manage.py", *command], {**subprocess_env, "DATABASE_URL": f"sqlite:///{missing}"})
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if line.strip()]
    assert line.startswith("CommandError: cannot reach the database: unable to open database file")
    assert f"({missing}: its folder must exist" in line


@pytest.mark.parametrize(
    "command",
    [
        ["create_api_token", "bob"],
        ["create_api_token", "--list"],
        ["enqueue", "tests.tasks.add", "1"],
    ],
)
def test_a_command_on_a_database_without_the_tables_says_to_migrate_in_one_line(
    subprocess_env, tmp_path, command
):
    empty = tmp_path / "empty.sqlite3"
    proc = run(["manage.py", *command], {**subprocess_env, "DATABASE_URL": f"sqlite:///{empty}"})
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if line.strip()]
    assert line == (
        "CommandError: the database has no jobsite tables yet: run `python manage.py migrate` first"
    )


@pytest.mark.django_db
def test_every_page_carries_the_security_headers(client):
    response = client.get("/login/")
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"


@pytest.mark.django_db
@pytest.mark.skipif(django.VERSION < (6, 0), reason="Django's own CSP header is new in 6.0")
def test_every_page_carries_the_content_security_policy(client):
    response = client.get("/login/")
    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]


HSTS = {
    "SECURE_HSTS_SECONDS": 31536000,
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
    "SECURE_HSTS_PRELOAD": True,
}


@pytest.mark.django_db
@override_settings(**HSTS)
def test_hsts_is_sent_over_https_only(client):
    assert client.get("/login/", secure=True)["Strict-Transport-Security"] == (
        "max-age=31536000; includeSubDomains; preload"
    )
    assert "Strict-Transport-Security" not in client.get("/login/")


@pytest.mark.django_db
@override_settings(**HSTS, SECURE_SSL_REDIRECT=True)
def test_plain_http_is_redirected_to_https(client):
    response = client.get("/login/", headers={"Host": "localhost"})
    assert response.status_code == 301
    assert response["Location"] == "https://localhost/login/"


@pytest.mark.django_db
@override_settings(
    **HSTS, SECURE_SSL_REDIRECT=True, SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")
)
def test_behind_a_proxy_x_forwarded_proto_https_counts_as_https(client):
    response = client.get("/login/", headers={"X-Forwarded-Proto": "https"})
    assert response.status_code == 200
    assert "max-age=31536000" in response["Strict-Transport-Security"]


@pytest.mark.django_db
@override_settings(**HSTS, SECURE_SSL_REDIRECT=True)
def test_without_the_proxy_setting_a_client_cannot_claim_https(client):
    response = client.get("/login/", headers={"X-Forwarded-Proto": "https"})
    assert response.status_code == 301


SERVE_ONE_FAILING_REQUEST = """
import django
django.setup()
from django.test import Client
response = Client(raise_request_exception=False).post("/login/", {"username": "a", "password": "b"})
print(response.status_code)
"""


def test_with_debug_off_a_500_is_logged_with_its_traceback_where_the_worker_logs(
    subprocess_env, tmp_path
):
    # A database without tables: the login's throttling query fails, so the request answers 500.
    env = {
        **subprocess_env,
        "DJANGO_SETTINGS_MODULE": "jobsite.settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_ALLOWED_HOSTS": "testserver",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'empty.sqlite3'}",
    }
    proc = subprocess.run(
        [sys.executable, "-c", SERVE_ONE_FAILING_REQUEST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert proc.stdout.strip() == "500", proc.stderr
    assert "ERROR   Internal Server Error: /login/" in proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr
    assert "no such table" in proc.stderr


def test_sqlite_without_immediate_transactions_is_a_check_warning_saying_what_to_set():
    from jobs.checks import sqlite_warnings

    bare = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}}
    (warning,) = sqlite_warnings(bare)
    assert warning.id == "jobs.W001"
    assert "IMMEDIATE" in warning.hint and "database is locked" in warning.msg
    immediate = {"transaction_mode": "IMMEDIATE"}
    assert not sqlite_warnings({"default": {**bare["default"], "OPTIONS": immediate}})
    assert not sqlite_warnings({"default": {"ENGINE": "django.db.backends.postgresql"}})


def test_the_demo_settings_pass_the_sqlite_check():
    from jobs.checks import check_sqlite_transactions

    assert check_sqlite_transactions() == []


def test_every_sqlite_connection_waits_for_the_writer_and_reads_beside_it(tmp_path):
    import sqlite3

    from jobs.db.sqlite import BUSY_TIMEOUT_MS, WAL_SIZE_LIMIT, _share_the_file

    raw = sqlite3.connect(tmp_path / "bare.sqlite3", timeout=5)
    _share_the_file(raw)
    assert raw.execute("PRAGMA busy_timeout").fetchone() == (BUSY_TIMEOUT_MS,)
    assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert raw.execute("PRAGMA journal_size_limit").fetchone() == (WAL_SIZE_LIMIT,)
