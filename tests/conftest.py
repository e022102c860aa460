"""Shared fixtures: real databases, the real worker in a subprocess."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.browser import browser, open_console, screenshots  # noqa: F401 (fixtures)
from tests.reliability_helpers import fast_leases, spawn_worker  # noqa: F401 (fixtures)
from tests.test_api_support import bearer, token_for
from tests.test_api_support import make_user as make_api_user
from tests.test_dashboard_views import make_user

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="session")
def plain_static_names(django_test_environment):
    """Pages link static files by their plain names, whatever `collectstatic` left behind.

    `./dev up` runs collectstatic; with its manifest present the pages would link hashed names
    that the test server (serving from the app folders) does not have.
    """
    from django.test import override_settings

    storages = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    with override_settings(STORAGES=storages):
        yield


@pytest.fixture(autouse=True, scope="session")
def test_database_left_free(django_db_setup, django_db_blocker):
    """At the end, no session holds the PostgreSQL test database, so it can be dropped.

    A pooler (PgBouncer) keeps its server sessions to the test database open after the tests
    close theirs; those sessions hold nothing a test needs. Runs before the drop (fixtures end
    in reverse order).
    """
    yield
    if connection.vendor != "postgresql":
        return
    import psycopg

    from jobs.db.pooler import raw_params

    with django_db_blocker.unblock():
        params = {**raw_params(connection), "dbname": "postgres"}
        name = connection.settings_dict["NAME"]
        connection.close()
        with psycopg.connect(**params, autocommit=True) as maintenance:
            maintenance.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                [name],
            )


def database_url() -> str:
    """The URL of the database the tests are using, for subprocesses."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    user = s.get("USER") or "postgres"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    host = s.get("HOST") or "127.0.0.1"
    port = s.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{s['NAME']}"


@pytest.fixture
def subprocess_env(tmp_path):
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url()
    env["DJANGO_SETTINGS_MODULE"] = "jobsite.settings"
    env["JOBSITE_TEST_LEDGER"] = str(tmp_path / "ledger.txt")
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def ledger(subprocess_env):
    """Lines the test tasks wrote, one per execution: [(key, pid, time)]."""
    path = Path(subprocess_env["JOBSITE_TEST_LEDGER"])

    def read():
        if not path.exists():
            return []
        return [
            (parts[0], int(parts[1]), float(parts[2]))
            for parts in (line.split() for line in path.read_text().splitlines())
        ]

    return read


@pytest.fixture
def manage(subprocess_env):
    """Run `manage.py ...` to completion, as from a shell; returns the CompletedProcess.
    `env` adds to or overrides the environment (another DATABASE_URL, say)."""

    def run(*args, timeout=60, check=False, env=None):
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**subprocess_env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    return run


@pytest.fixture
def scratch_databases(tmp_path):
    """Databases of their own for a test (tests/scratch_databases.py), dropped after it."""
    from tests.scratch_databases import ScratchDatabases

    databases = ScratchDatabases(tmp_path)
    yield databases
    databases.drop_all()


@pytest.fixture
def run_worker(manage):
    """Run `manage.py worker --burst ...` to completion; returns the CompletedProcess."""

    def run(*args, timeout=120):
        return manage("worker", "--burst", *args, timeout=timeout)

    return run


@pytest.fixture
def start_worker(subprocess_env):
    """Start `manage.py worker ...` in the background (its own process group)."""
    started = []

    def start(*args, **popen_kwargs):
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "worker", *args],
            cwd=ROOT,
            env=subprocess_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            **popen_kwargs,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


# --- the people using the console and the API ---------------------------------------------------


@pytest.fixture
def operator(django_user_model):
    """A staff user who may act (retry, rerun, cancel...); logs in with PASSWORD."""
    return make_user(django_user_model, "olivia", operate=True)


@pytest.fixture
def viewer(django_user_model):
    """A staff user who sees everything read-only."""
    return make_user(django_user_model, "victor")


@pytest.fixture
def operator_client(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture
def viewer_client(client, viewer):
    client.force_login(viewer)
    return client


@pytest.fixture
def operator_headers():
    """A bearer token of a user who may act."""
    return bearer(token_for(make_api_user("operator", operate=True)))


@pytest.fixture
def reader_headers():
    """A bearer token of a read-only staff user."""
    return bearer(token_for(make_api_user("reader")))
