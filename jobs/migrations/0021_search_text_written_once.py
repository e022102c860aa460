from django.db import migrations

# PostgreSQL only (jobs.db.search_sql). The arguments' trigram index moves from the job row to
# a table of its own, written when a job is inserted and never again: every claim and finish
# rewrites a job row in full (the state is indexed, so no update is HOT), and with the index on
# the row each of them also re-inserted every trigram of the arguments (bench/README.md).
# The arguments, kwargs and dedup key of a job never change after it is enqueued; should
# anything change them, the update trigger keeps the text in step.
INSTALL_SQL = r"""
CREATE TABLE jobs_searchtext (job_id uuid PRIMARY KEY, text text NOT NULL);

-- What inserted jobs write beside them: their counts (jobs.state_counts, as migration 0008's
-- jobs_count_insert did) and their search text. One trigger for both: a single enqueue is one
-- statement, and each trigger costs it a call.
CREATE FUNCTION jobs_job_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jobs_jobcountdelta (queue_name, state, n)
    SELECT queue_name, state, count(*) FROM new_rows GROUP BY queue_name, state;
    INSERT INTO jobs_searchtext (job_id, text)
    SELECT id, lower(args::text || ' ' || kwargs::text || ' ' || coalesce(dedup_key, ''))
    FROM new_rows;
    RETURN NULL;
END $$;

CREATE FUNCTION jobs_search_text_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs_searchtext
    SET text = lower(NEW.args::text || ' ' || NEW.kwargs::text || ' '
                     || coalesce(NEW.dedup_key, ''))
    WHERE job_id = NEW.id;
    RETURN NULL;
END $$;

CREATE FUNCTION jobs_search_text_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM jobs_searchtext WHERE job_id IN (SELECT id FROM old_rows);
    RETURN NULL;
END $$;

CREATE FUNCTION jobs_search_text_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE jobs_searchtext;
    RETURN NULL;
END $$;

DROP TRIGGER jobs_count_insert ON jobs_job;
CREATE TRIGGER jobs_job_inserted AFTER INSERT ON jobs_job
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_job_inserted();
-- Fires only for an UPDATE that sets one of these columns: never a claim or a finish.
CREATE TRIGGER jobs_search_text_update AFTER UPDATE OF args, kwargs, dedup_key ON jobs_job
    FOR EACH ROW
    WHEN (OLD.args IS DISTINCT FROM NEW.args OR OLD.kwargs IS DISTINCT FROM NEW.kwargs
          OR OLD.dedup_key IS DISTINCT FROM NEW.dedup_key)
    EXECUTE FUNCTION jobs_search_text_update();
CREATE TRIGGER jobs_search_text_delete AFTER DELETE ON jobs_job
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_search_text_delete();
CREATE TRIGGER jobs_search_text_truncate AFTER TRUNCATE ON jobs_job
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_search_text_truncate();

-- The jobs already there (the triggers above hold the table's lock until commit).
INSERT INTO jobs_searchtext (job_id, text)
SELECT id, lower(args::text || ' ' || kwargs::text || ' ' || coalesce(dedup_key, ''))
FROM jobs_job;
CREATE INDEX job_search_arguments_text ON jobs_searchtext USING gin (text gin_trgm_ops);
DROP INDEX IF EXISTS job_search_arguments;
"""

UNINSTALL_SQL = r"""
DROP TRIGGER IF EXISTS jobs_job_inserted ON jobs_job;
CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs_job
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_insert();
DROP TRIGGER IF EXISTS jobs_search_text_update ON jobs_job;
DROP TRIGGER IF EXISTS jobs_search_text_delete ON jobs_job;
DROP TRIGGER IF EXISTS jobs_search_text_truncate ON jobs_job;
DROP FUNCTION IF EXISTS jobs_job_inserted();
DROP FUNCTION IF EXISTS jobs_search_text_update();
DROP FUNCTION IF EXISTS jobs_search_text_delete();
DROP FUNCTION IF EXISTS jobs_search_text_truncate();
DROP TABLE IF EXISTS jobs_searchtext;
CREATE INDEX IF NOT EXISTS job_search_arguments ON jobs_job
    USING gin ((lower(args::text || ' ' || kwargs::text || ' ' || coalesce(dedup_key, '')))
               gin_trgm_ops);
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(INSTALL_SQL)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(UNINSTALL_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0020_limit_start_starts"),
    ]

    operations = [migrations.RunPython(install, uninstall)]
