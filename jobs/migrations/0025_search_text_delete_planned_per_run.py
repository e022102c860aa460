from django.db import migrations

# PostgreSQL only. The trigger that deletes a deleted job's search row joins the statement's
# deleted rows to `jobs_searchtext`. PL/pgSQL keeps a statement's plan for the life of the
# connection, made at its first run: a connection whose first delete found the tables nearly
# empty kept a plan that compared every deleted job with every search row, so deleting 4,000
# jobs took 8 s and 10,000 over a minute on that connection. EXECUTE plans the statement at
# each run, for the rows deleted then.
PLANNED_PER_RUN = r"""
CREATE OR REPLACE FUNCTION jobs_search_text_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE 'DELETE FROM jobs_searchtext WHERE job_id IN (SELECT id FROM old_rows)';
    RETURN NULL;
END $$;
"""

PLANNED_ONCE = r"""
CREATE OR REPLACE FUNCTION jobs_search_text_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM jobs_searchtext WHERE job_id IN (SELECT id FROM old_rows);
    RETURN NULL;
END $$;
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PLANNED_PER_RUN)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PLANNED_ONCE)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0024_list_orders_ascending_on_sqlite"),
    ]

    operations = [migrations.RunPython(install, uninstall)]
