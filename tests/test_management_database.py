"""Commands facing a database that fails them: one line saying what is wrong, no traceback."""

import pytest
from django.db import connection

COMMANDS = [
    ("enqueue", "tests.tasks.add", "2", "40"),
    ("prune_jobs", "--older-than", "7d"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_command_on_a_database_without_jobsite_tables_says_to_migrate(
    scratch_databases, manage, command
):
    url = scratch_databases.create("empty")

    done = manage(*command, env={"DATABASE_URL": url}, timeout=120)

    assert done.returncode == 1
    assert done.stderr.strip() == (
        "CommandError: the database has no jobsite tables yet: run `python manage.py migrate` first"
    ), done.stderr


@pytest.mark.django_db
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_command_that_cannot_reach_its_database_says_so_in_one_line(
    scratch_databases, manage, command
):
    if connection.vendor != "postgresql":
        pytest.skip("an SQLite database is a file, there or created empty")

    done = manage(*command, env={"DATABASE_URL": scratch_databases.url("never-made")}, timeout=120)

    assert done.returncode == 1
    assert done.stderr.startswith("CommandError: cannot reach the database: "), done.stderr
    assert "does not exist" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
