"""Commands facing a database that fails them: one line saying what is wrong, no traceback."""

import subprocess
import sys

import pytest
from django.db import connection

from tests.conftest import ROOT
from tests.scratch_databases import ScratchDatabases

COMMANDS = [
    ("enqueue", "tests.tasks.add", "2", "40"),
    ("prune_jobs", "--older-than", "7d"),
]


@pytest.fixture
def scratch(tmp_path):
    databases = ScratchDatabases(tmp_path)
    yield databases
    databases.drop_all()


def _run(subprocess_env, url, command):
    return subprocess.run(
        [sys.executable, "manage.py", *command],
        cwd=ROOT,
        env={**subprocess_env, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.django_db
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_command_on_a_database_without_jobsite_tables_says_to_migrate(
    scratch, subprocess_env, command
):
    done = _run(subprocess_env, scratch.create("empty"), command)

    assert done.returncode == 1
    assert done.stderr.strip() == (
        "CommandError: the database has no jobsite tables yet: run `python manage.py migrate` first"
    ), done.stderr


@pytest.mark.django_db
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_command_that_cannot_reach_its_database_says_so_in_one_line(
    scratch, subprocess_env, command
):
    if connection.vendor != "postgresql":
        pytest.skip("an SQLite database is a file, there or created empty")

    done = _run(subprocess_env, scratch.url("never-made"), command)

    assert done.returncode == 1
    assert done.stderr.startswith("CommandError: cannot reach the database: "), done.stderr
    assert "does not exist" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
