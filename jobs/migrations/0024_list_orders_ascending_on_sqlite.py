from django.db import migrations, models

# SQLite only. The console's four list orders on the job row become ascending; a newest-first
# list walks them from the end, as fast. A new job's entry then lands on an index's last page
# rather than its first, and SQLite writes fewer pages per insert there (measured: about 0.7
# fewer per index and insert). With the counters written in place, a single enqueue's commit
# writes 11 pages instead of 16 (bench/README.md, "SQLite's single enqueue and the pages a
# commit writes").
#
# On PostgreSQL the state changes and the database does not: `job_state_recent` keeps the
# order migration 0001 built (ascending and descending measured the same there, and rebuilding
# it would lock a large table for nothing), and the other three live on `jobs_searchtext`
# (migration 0023).
ORDERS = {
    "job_recent": ["enqueued_at", "id"],
    "job_state_recent": ["state", "enqueued_at", "id"],
    "job_queue_recent": ["queue_name", "enqueued_at", "id"],
    "job_task_recent": ["task_path", "enqueued_at", "id"],
}
NEWEST_FIRST = ("enqueued_at", "id")


def _rebuild(schema_editor, descending: bool) -> None:
    if schema_editor.connection.vendor != "sqlite":
        return
    for name, fields in ORDERS.items():
        columns = ", ".join(
            f'"{f}" DESC' if descending and f in NEWEST_FIRST else f'"{f}"' for f in fields
        )
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')
        schema_editor.execute(f'CREATE INDEX "{name}" ON "jobs_job" ({columns})')


def ascending(apps, schema_editor):
    _rebuild(schema_editor, descending=False)


def descending(apps, schema_editor):
    _rebuild(schema_editor, descending=True)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0023_list_order_written_once"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                op
                for name, fields in ORDERS.items()
                for op in (
                    migrations.RemoveIndex(model_name="job", name=name),
                    migrations.AddIndex(
                        model_name="job", index=models.Index(fields=fields, name=name)
                    ),
                )
            ],
            database_operations=[migrations.RunPython(ascending, descending)],
        ),
    ]
