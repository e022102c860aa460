"""Whether the database holds jobsite's tables as this code expects them (its migrations)."""

from django.db import connection
from django.db.migrations.executor import MigrationExecutor

APP = "jobs"


class SchemaNotReady(Exception):
    """The database lacks migrations this code needs; the message says what to run."""


def unapplied() -> list[str]:
    """The migrations not yet applied that jobsite's tables need, in the order migrate would
    apply them ("app.name"), its dependencies in other apps included. Reads the database."""
    executor = MigrationExecutor(connection)
    targets = [key for key in executor.loader.graph.leaf_nodes() if key[0] == APP]
    plan = executor.migration_plan(targets)
    return [f"{migration.app_label}.{migration.name}" for migration, backwards in plan]


def check_ready() -> None:
    """Raise SchemaNotReady, with what to do, unless every migration jobsite needs is applied."""
    missing = unapplied()
    if not missing:
        return
    ours = [name for name in missing if name.startswith(f"{APP}.")]
    if ours and ours[0] == f"{APP}.0001_initial":
        raise SchemaNotReady(
            "the database has no jobsite tables yet: run `python manage.py migrate` first"
        )
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    raise SchemaNotReady(
        f"the database lacks {len(missing)} migration(s) this version needs ({shown}): "
        "run `python manage.py migrate` first"
    )
