"""What a search asks of each database (jobs.search says what a search matches).

SQLite: the two search functions are the Python functions below, registered on each
connection. PostgreSQL: they are SQL functions (migration 0007), and trigram indexes hold the
arguments' JSON text (in a table of its own, written once per job) and failed jobs' error text;
the expressions here are written exactly as those indexes are, so the planner can use them.
"""

import json

from django.db import connection
from django.db.backends.signals import connection_created
from django.db.models import BooleanField, F, Func, TextField, Value
from django.db.models.functions import Concat
from django.dispatch import receiver

# The arguments' searchable text, one row per job (migration 0021).
SEARCH_TEXT = "jobs_searchtext"


def indexes_text() -> bool:
    """Does this database hold the trigram indexes on the arguments' and errors' text?"""
    return connection.vendor == "postgresql"


def _scalars(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _scalars(item)
    elif isinstance(value, list):
        for item in value:
            yield from _scalars(item)
    else:
        yield value


def _loaded(*texts):
    for text in texts:
        if text is None:
            continue
        try:
            yield from _scalars(json.loads(text))
        except ValueError:
            continue


def search_strings(args, kwargs, dedup_key) -> str:
    """Every string among the arguments and the dedup key, lower-cased, one per line."""
    strings = [v for v in _loaded(args, kwargs) if isinstance(v, str)]
    if dedup_key:
        strings.append(dedup_key)
    return "\n".join(strings).lower()


def search_numbers(args, kwargs) -> str:
    """Every number among the arguments in its decimal text, each between spaces."""
    numbers = [
        json.dumps(v)
        for v in _loaded(args, kwargs)
        if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    return " " + " ".join(numbers) + " "


@receiver(connection_created)
def _register_sqlite_functions(sender, connection, **kwargs):
    if connection.vendor == "sqlite":
        raw = connection.connection
        raw.create_function("jobsite_search_strings", 3, search_strings, deterministic=True)
        raw.create_function("jobsite_search_numbers", 2, search_numbers, deterministic=True)


class ArgumentsJson(Func):
    """The JSON text the arguments index holds, read from the job row itself: for a search that
    reads the newest jobs row by row, where no index helps."""

    output_field = TextField()

    def as_sql(self, compiler, connection, **extra):
        return "lower(args::text || ' ' || kwargs::text || ' ' || coalesce(dedup_key, ''))", []


class ArgumentsHold(Func):
    """Does the job's arguments' JSON text (ArgumentsJson) hold `needle`? Answered from the
    trigram index of `jobs_searchtext` (migration 0021), a table written once per job.

    The matching ids are read once per query, as an array that the job table's primary key
    looks up: a join could not sit in the OR with a search's other conditions, and PostgreSQL
    answers the OR of array, error index and id range with one bitmap scan each.
    """

    output_field = BooleanField()

    def __init__(self, needle: str):
        super().__init__(F("id"), Value(f"%{connection.ops.prep_for_like_query(needle)}%"))

    def as_sql(self, compiler, connection, **extra):
        (id_sql, id_params), (like_sql, like_params) = (
            compiler.compile(e) for e in self.get_source_expressions()
        )
        return (
            f"{id_sql} = ANY(ARRAY(SELECT job_id FROM {SEARCH_TEXT} WHERE text LIKE {like_sql}))",
            [*id_params, *like_params],
        )


class ErrorText(Func):
    """lower(error_type || newline || error_message): the expression the error index holds."""

    template = "lower(%(expressions)s)"
    output_field = TextField()

    def __init__(self):
        super().__init__(Concat(F("error_type"), Value("\n"), F("error_message")))

    def as_postgresql(self, compiler, connection, **extra):
        # Written exactly as in the index, so PostgreSQL can use it.
        return "lower(error_type || E'\\n' || error_message)", []
