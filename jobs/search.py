"""Finding jobs by what an operator knows: an id prefix, a task, an argument, a key, an error.

A job matches a search text when the text is a prefix (6+ hex characters) of its id, appears
in its task path, in any string among its args or kwargs (at any depth), in its dedup_key, or in
its error type or message, ignoring case; or when the text is a number equal to a number among
its arguments (`1003` finds `[1003]`, not `[10030]`).

The arguments are read through two database functions of the same name on both databases:
`jobsite_search_strings(args, kwargs, dedup_key)` (every string, lower-cased, one per line) and
`jobsite_search_numbers(args, kwargs)` (every number, each between spaces). On SQLite they are
Python functions registered on each connection; on PostgreSQL they are SQL functions (migration
0007); jobs.db.search_sql holds what differs between the two. What makes a search fast on
PostgreSQL is a trigram (pg_trgm) GIN index on the plain JSON text, `lower(args::text || ' ' ||
kwargs::text || ' ' || coalesce(dedup_key, ''))`: it narrows the rows to those whose JSON holds
the text anywhere, and the functions then decide on those few. Indexing the JSON text rather
than the functions' output keeps the cost of every insert low (the functions are not run on
the write path), and the text sits in a table of its own (`jobs_searchtext`), written once per
job, so that claims and finishes, which rewrite the job row, never rewrite it. A second trigram
index covers `lower(error_type || newline || error_message)` of failed jobs only.

Those indexes find every match, and a list shows only the newest few: for a text that many jobs
hold (an error message that thousands of dead letters share), fetching every match to keep the
newest 50 costs a heap read per match. So a search first looks at the newest `PROBE_ROWS` jobs
of the list: when the text is common among them, the condition is handed to PostgreSQL in a
form no index applies to, and it walks the list's ordering index with the match as a filter,
stopping after a page (a keyset page adds its bound to the same walk, so paging is unchanged).
A text that few jobs hold keeps the index plan, which then reads few rows.
"""

import re
import uuid

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import BooleanField, Expression, ExpressionWrapper, F, Func, Q, TextField

from .db import search_sql
from .listing import LISTED

# An id prefix shorter than this would match too much to be what anyone meant.
MIN_ID_PREFIX = 6
# How many of the newest jobs a search reads to judge whether its text is common, and how many
# of them must match for it to be: at about 1 in 330 or more, walking the newest jobs finds a
# page within ~17,000 rows, cheaper than reading every match the trigram indexes point at
# (3,000 and more at a million jobs; measured in bench/dashboard.py).
PROBE_ROWS = 1_000
COMMON_IN_PROBE = 3
NUMBER = re.compile(r"-?\d+(\.\d+)?")


class _SearchStrings(Func):
    function = "jobsite_search_strings"
    output_field = TextField()


class _SearchNumbers(Func):
    function = "jobsite_search_numbers"
    output_field = TextField()


def id_prefix_range(text: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The ids starting with `text`, when it is 6-32 hex digits (dashes allowed)."""
    digits = text.replace("-", "").lower()
    if MIN_ID_PREFIX <= len(digits) <= 32 and all(c in "0123456789abcdef" for c in digits):
        return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))
    return None


def matching(text: str, *, task_paths=(), by_row=False) -> Q:
    """The condition for jobs matching the search `text` (see the module's docstring).

    `task_paths` are the known task paths; those containing the text match by an index probe
    each, which is cheaper than a pattern over every row's task path. `by_row`: the same
    condition for a read that tests the rows one by one, which reads the arguments' text from
    the row rather than through its index.
    """
    needle = text.lower()
    arguments = Q(_search_strings__contains=needle)
    if NUMBER.fullmatch(text.strip()):
        arguments |= Q(_search_numbers__contains=f" {text.strip()} ")
    if search_sql.indexes_text() and _plain_in_json(needle):
        # The index narrows to rows whose JSON text holds the needle; the functions decide.
        # Written first so that a row-by-row filter runs them only on those rows too.
        held = needle.strip()
        in_json = Q(_search_json__contains=held) if by_row else Q(search_sql.ArgumentsHold(held))
        arguments = in_json & arguments
    # Errors first: a failed job whose error matches is then decided without its arguments.
    condition = Q(~Q(error_type=""), _search_errors__contains=needle) | arguments
    ids = id_prefix_range(text)
    if ids:
        condition |= Q(id__gte=ids[0], id__lte=ids[1])
    tasks = [path for path in task_paths if needle in path.lower()]
    if tasks:
        condition |= Q(task_path__in=tasks)
    return condition


def _plain_in_json(needle: str) -> bool:
    """Does `needle` appear as itself in JSON text? Quotes, backslashes and controls are escaped."""
    return not any(c in '"\\' or c < " " for c in needle)


def search(queryset, text: str, *, order, task_paths=(), common=None):
    """`queryset` narrowed to the jobs matching `text`, in the form that pages fastest when
    paged in `order` (a jobs.listing.Order, which an index must give: a common text's probe
    walks it). `common`: what `is_common` answered, when the caller already asked."""
    queryset = _searchable(queryset, order)
    indexed = matching(text, task_paths=task_paths)
    if not search_sql.indexes_text():
        return queryset.filter(indexed)
    by_row = matching(text, task_paths=task_paths, by_row=True)
    if common is None:
        common = _common_among_newest(queryset, by_row, order)
    return queryset.filter(_Matching(indexed, by_row, common=common))


def is_common(queryset, text: str, *, order, task_paths=()) -> bool:
    """Is `text` common among the newest jobs of `queryset` in `order`, so that a page of its
    matches is found by walking that order (False where no index holds the text)?"""
    if not search_sql.indexes_text():
        return False
    by_row = matching(text, task_paths=task_paths, by_row=True)
    return _common_among_newest(_searchable(queryset, order), by_row, order)


def _searchable(queryset, order):
    # A list that walks the listing rows has each job's arguments' text at hand there, as the
    # triggers keep it: reading it spares making it from the job row's JSON, row by row.
    return queryset.alias(
        _search_strings=_SearchStrings(F("args"), F("kwargs"), F("dedup_key")),
        _search_numbers=_SearchNumbers(F("args"), F("kwargs")),
        _search_errors=search_sql.ErrorText(),
        _search_json=F("listing__text") if order == LISTED else search_sql.ArgumentsJson(),
    )


class _Matching(Expression):
    """The search condition, written for how the query reads it.

    A limited read (a page) of a common text gets the row-by-row condition, opaque to the
    planner: no index applies, and its selectivity is the default for a boolean expression (one
    half), so the ordered page walks the ordering index and stops after the page instead of
    collecting every match and sorting them. Any other read (a count, every match) gets the
    indexed form.
    """

    def __init__(self, indexed: Q, by_row: Q, *, common: bool):
        super().__init__(output_field=BooleanField())
        self.indexed, self.by_row, self.common = indexed, by_row, common

    def get_source_expressions(self):
        return [self.indexed, self.by_row]

    def set_source_expressions(self, exprs):
        self.indexed, self.by_row = exprs

    def as_sql(self, compiler, connection):
        if self.common and compiler.query.is_sliced:
            sql, params = compiler.compile(self.by_row)
            return f"COALESCE({sql}, false)", params
        return compiler.compile(self.indexed)


def _common_among_newest(queryset, condition: Q, order) -> bool:
    """Do at least `COMMON_IN_PROBE` of the newest `PROBE_ROWS` jobs of `queryset` match?"""
    newest = (
        queryset.order_by(*order.order_by)
        .annotate(_search_hit=ExpressionWrapper(condition, output_field=BooleanField()))
        .values("_search_hit")[:PROBE_ROWS]
    )
    try:
        sql, params = newest.query.sql_with_params()
    except EmptyResultSet:
        return False
    with connection.cursor() as cursor:
        # Stops reading as soon as it has seen enough matches: a common text costs a few rows.
        cursor.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM ({sql}) AS newest"
            " WHERE _search_hit LIMIT %s) AS hits",
            [*params, COMMON_IN_PROBE],
        )
        return cursor.fetchone()[0] >= COMMON_IN_PROBE
