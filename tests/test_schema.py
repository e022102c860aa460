"""A worker started on a database that lacks jobsite's tables, or some of its migrations."""

import pytest
from django.db.migrations.loader import MigrationLoader


def _latest_and_the_one_before() -> tuple[str, str]:
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    (latest,) = [key for key in graph.leaf_nodes() if key[0] == "jobs"]
    (before,) = graph.node_map[latest].parents
    return latest[1], before.key[1]


@pytest.mark.django_db
def test_a_worker_on_a_database_without_its_tables_says_to_migrate(scratch_databases, manage):
    url = scratch_databases.create("empty")

    worker = manage("worker", "--burst", env={"DATABASE_URL": url}, timeout=120)

    assert worker.returncode == 1
    assert worker.stderr.strip() == (
        "CommandError: the database has no jobsite tables yet: run `python manage.py migrate` first"
    ), worker.stderr
    assert "Traceback" not in worker.stdout + worker.stderr


@pytest.mark.django_db
@pytest.mark.parametrize(
    "command",
    [
        ["worker", "--burst"],
        ["enqueue", "tests.tasks.add", "1", "2"],
        ["prune_jobs", "--older-than", "1d"],
    ],
)
def test_a_command_on_a_database_missing_a_migration_names_it(scratch_databases, manage, command):
    latest, before = _latest_and_the_one_before()
    url = scratch_databases.create("behind", migrate_to=("jobs", before))

    proc = manage(*command, env={"DATABASE_URL": url}, timeout=120)

    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"CommandError: the database lacks 1 migration(s) this version needs (jobs.{latest}): "
        "run `python manage.py migrate` first"
    ), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "Enqueued" not in proc.stdout
