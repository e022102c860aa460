"""The worker's own log lines in a project whose LOGGING says nothing about them."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests import tasks

pytestmark = pytest.mark.django_db(transaction=True)

# A project as `startproject` makes it: no LOGGING at all.
BARE_SETTINGS = """
from tests.settings import *  # noqa
LOGGING = {"version": 1, "disable_existing_loggers": False}
"""


@pytest.fixture
def bare_project(tmp_path, subprocess_env):
    (tmp_path / "bare_settings.py").write_text(BARE_SETTINGS)
    env = dict(subprocess_env, DJANGO_SETTINGS_MODULE="bare_settings")
    env["PYTHONPATH"] = f"{tmp_path}:{env.get('PYTHONPATH', '')}"
    return env


def run(env, *args):
    return subprocess.run(
        [sys.executable, "manage.py", "worker", "--burst", *args],
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_worker_logs_its_start_and_stop_at_info_when_the_project_configures_nothing(
    bare_project,
):
    tasks.add.enqueue(1, 2)
    proc = run(bare_project, "--worker-id", "bare-1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "INFO    worker bare-1 started" in proc.stderr
    assert "worker bare-1 stopped: 1 job(s) processed" in proc.stderr


def test_log_level_debug_shows_each_success_and_warning_hides_the_start(bare_project):
    result = tasks.add.enqueue(1, 2)
    proc = run(bare_project, "--worker-id", "bare-2", "--log-level", "debug")
    assert f"job {result.id} (tests.tasks.add) succeeded on attempt 1/" in proc.stderr
    tasks.add.enqueue(1, 2)
    proc = run(bare_project, "--worker-id", "bare-3", "--log-level", "WARNING")
    assert proc.returncode == 0
    assert "started" not in proc.stderr


def test_an_unknown_log_level_is_refused_with_the_choices(bare_project):
    proc = run(bare_project, "--log-level", "loud")
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr and "DEBUG" in proc.stderr
