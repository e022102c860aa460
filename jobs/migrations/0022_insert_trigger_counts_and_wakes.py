from django.db import migrations

# PostgreSQL only. The insert trigger of migration 0021 also counts the jobs enqueued and wakes
# idle workers (NOTIFY on jobs.db.postgres_notify.NOTIFY_CHANNEL, delivered at commit), which
# each insert statement did itself: one home for both, and a single enqueue is one plain INSERT
# (bench/README.md, "A single enqueue that is one plain INSERT": about 10 us a call less).


def trigger_function(also: str = "") -> str:
    """Migration 0021's insert trigger function, doing `also` before it returns."""
    return rf"""
CREATE OR REPLACE FUNCTION jobs_job_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jobs_jobcountdelta (queue_name, state, n)
    SELECT queue_name, state, count(*) FROM new_rows GROUP BY queue_name, state;
    INSERT INTO jobs_searchtext (job_id, text)
    SELECT id, lower(args::text || ' ' || kwargs::text || ' ' || coalesce(dedup_key, ''))
    FROM new_rows;{also}
    RETURN NULL;
END $$;
"""


INSTALL_SQL = trigger_function(
    """
    INSERT INTO jobs_counterdelta (name, value)
    SELECT 'jobs_enqueued', count(*) FROM new_rows HAVING count(*) > 0;
    IF FOUND THEN
        PERFORM pg_notify('jobsite_jobs', '');
    END IF;"""
)
UNINSTALL_SQL = trigger_function()


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(INSTALL_SQL)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(UNINSTALL_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0021_search_text_written_once"),
    ]

    operations = [migrations.RunPython(install, uninstall)]
