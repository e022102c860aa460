import importlib

import django.db.models.deletion
from django.db import migrations, models

# PostgreSQL only, as migration 0021. The console's three list orders (newest first; by queue;
# by task) move from the job row to `jobs_searchtext`, which the insert trigger writes once per
# job: their columns never change after the enqueue, yet every claim and finish rewrites the job
# row in full (its state is indexed, so no update is HOT) and with it an entry in each index on
# the row. The list by state keeps its index on the job row, as the state changes there.
# bench/README.md, "The list orders written once per job", has the before and after.
#
# Django's state keeps the three indexes on Job: SQLite keeps them on the row, where an update
# only rewrites the indexes holding a column it sets, and claims and finishes set none of these.
# On PostgreSQL they are dropped here; a later migration that touches them must say IF EXISTS.
LISTED = "jobs_searchtext"
MOVED_INDEXES = {
    "job_recent": ("listing_recent", "enqueued_at DESC, job_id DESC"),
    "job_queue_recent": ("listing_queue_recent", "queue_name, enqueued_at DESC, job_id DESC"),
    "job_task_recent": ("listing_task_recent", "task_path, enqueued_at DESC, job_id DESC"),
}
ON_THE_ROW = {
    "job_recent": "enqueued_at DESC, id DESC",
    "job_queue_recent": "queue_name, enqueued_at DESC, id DESC",
    "job_task_recent": "task_path, enqueued_at DESC, id DESC",
}

SEARCH_TEXT = "lower(args::text || ' ' || kwargs::text || ' ' || coalesce(dedup_key, ''))"


def _before():
    return importlib.import_module("jobs.migrations.0022_insert_trigger_counts_and_wakes")


INSERTED_SQL = rf"""
CREATE OR REPLACE FUNCTION jobs_job_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jobs_jobcountdelta (queue_name, state, n)
    SELECT queue_name, state, count(*) FROM new_rows GROUP BY queue_name, state;
    INSERT INTO {LISTED} (job_id, text, enqueued_at, queue_name, task_path)
    SELECT id, {SEARCH_TEXT}, enqueued_at, queue_name, task_path
    FROM new_rows;
    INSERT INTO jobs_counterdelta (name, value)
    SELECT 'jobs_enqueued', count(*) FROM new_rows HAVING count(*) > 0;
    IF FOUND THEN
        PERFORM pg_notify('jobsite_jobs', '');
    END IF;
    RETURN NULL;
END $$;
"""

# Nothing in jobsite changes these columns after the insert; should anything, the copy follows.
UPDATED_SQL = rf"""
CREATE OR REPLACE FUNCTION jobs_search_text_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {LISTED}
    SET text = lower(NEW.args::text || ' ' || NEW.kwargs::text || ' '
                     || coalesce(NEW.dedup_key, '')),
        enqueued_at = NEW.enqueued_at, queue_name = NEW.queue_name, task_path = NEW.task_path
    WHERE job_id = NEW.id;
    RETURN NULL;
END $$;
DROP TRIGGER jobs_search_text_update ON jobs_job;
CREATE TRIGGER jobs_search_text_update
    AFTER UPDATE OF args, kwargs, dedup_key, enqueued_at, queue_name, task_path ON jobs_job
    FOR EACH ROW
    WHEN (OLD.args IS DISTINCT FROM NEW.args OR OLD.kwargs IS DISTINCT FROM NEW.kwargs
          OR OLD.dedup_key IS DISTINCT FROM NEW.dedup_key
          OR OLD.enqueued_at IS DISTINCT FROM NEW.enqueued_at
          OR OLD.queue_name IS DISTINCT FROM NEW.queue_name
          OR OLD.task_path IS DISTINCT FROM NEW.task_path)
    EXECUTE FUNCTION jobs_search_text_update();
"""

UPDATED_BEFORE_SQL = r"""
CREATE OR REPLACE FUNCTION jobs_search_text_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs_searchtext
    SET text = lower(NEW.args::text || ' ' || NEW.kwargs::text || ' '
                     || coalesce(NEW.dedup_key, ''))
    WHERE job_id = NEW.id;
    RETURN NULL;
END $$;
DROP TRIGGER jobs_search_text_update ON jobs_job;
CREATE TRIGGER jobs_search_text_update AFTER UPDATE OF args, kwargs, dedup_key ON jobs_job
    FOR EACH ROW
    WHEN (OLD.args IS DISTINCT FROM NEW.args OR OLD.kwargs IS DISTINCT FROM NEW.kwargs
          OR OLD.dedup_key IS DISTINCT FROM NEW.dedup_key)
    EXECUTE FUNCTION jobs_search_text_update();
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    # A new table filled in one pass, rather than every row updated in place: an update of
    # each row would leave as many dead rows, and their entries in the trigram index slow every
    # search until it is rebuilt. The job table's lock first: no job is inserted meanwhile.
    schema_editor.execute(
        f"""
        LOCK TABLE jobs_job IN SHARE ROW EXCLUSIVE MODE;
        CREATE TABLE jobs_searchtext_filled (
            job_id uuid NOT NULL, text text NOT NULL, enqueued_at timestamptz NOT NULL,
            queue_name varchar(100) NOT NULL, task_path varchar(255) NOT NULL
        );
        INSERT INTO jobs_searchtext_filled
        SELECT s.job_id, s.text, j.enqueued_at, j.queue_name, j.task_path
        FROM {LISTED} s JOIN jobs_job j ON j.id = s.job_id;
        DROP TABLE {LISTED};
        ALTER TABLE jobs_searchtext_filled RENAME TO {LISTED};
        ALTER TABLE {LISTED} ADD CONSTRAINT jobs_searchtext_pkey PRIMARY KEY (job_id);
        CREATE INDEX job_search_arguments_text ON {LISTED} USING gin (text gin_trgm_ops);
        """
    )
    schema_editor.execute(INSERTED_SQL)
    schema_editor.execute(UPDATED_SQL)
    for old, (new, columns) in MOVED_INDEXES.items():
        schema_editor.execute(f"CREATE INDEX {new} ON {LISTED} ({columns})")
        schema_editor.execute(f"DROP INDEX IF EXISTS {old}")
    # A new table has no statistics until autovacuum comes by: plan the console's reads now.
    schema_editor.execute(f"ANALYZE {LISTED}")


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for old, columns in ON_THE_ROW.items():
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {old} ON jobs_job ({columns})")
    schema_editor.execute(_before().INSTALL_SQL)
    schema_editor.execute(UPDATED_BEFORE_SQL)
    schema_editor.execute(
        f"ALTER TABLE {LISTED} DROP COLUMN enqueued_at, DROP COLUMN queue_name,"
        f" DROP COLUMN task_path"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0022_insert_trigger_counts_and_wakes"),
    ]

    operations = [
        migrations.CreateModel(
            name="Listing",
            fields=[
                (
                    "job",
                    models.OneToOneField(
                        db_column="job_id",
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="listing",
                        serialize=False,
                        to="jobs.job",
                    ),
                ),
                ("enqueued_at", models.DateTimeField()),
                ("queue_name", models.CharField(max_length=100)),
                ("task_path", models.CharField(max_length=255)),
            ],
            options={"db_table": "jobs_searchtext", "managed": False},
        ),
        migrations.RunPython(install, uninstall),
    ]
