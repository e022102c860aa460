"""The project's settings in production shape: refusing to start without a secret key, the
security headers, and `check --deploy` with the documented production environment."""

import subprocess
import sys

import pytest

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
        ["manage.py", "check", "--deploy"],
        ["-c", "import jobsite.wsgi"],
        ["-c", "import jobsite.asgi"],
    ],
    ids=["worker", "runserver", "check-deploy", "wsgi", "asgi"],
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
