"""Counting rows without scanning millions of them.

A count is exact while it stays under a cap (a COUNT over a LIMITed subquery reads at most
`cap` index entries). Above the cap, PostgreSQL's planner estimate stands in, shown as "≈";
SQLite has no per-value statistics, so there the answer is "more than the cap".
"""

from dataclasses import dataclass

from jobs.db import console_sql

STATE_CAP = 1_000


@dataclass(frozen=True, kw_only=True, slots=True)
class Tally:
    value: int
    # Is `value` the true number of rows (rather than an estimate or a floor)?
    exact: bool = True
    # Is `value` a lower bound (the cap), with no estimate available?
    at_least: bool = False

    def __str__(self):
        number = f"{self.value:,}"
        if self.exact:
            return number
        return f"{number}+" if self.at_least else f"≈ {number}"

    @property
    def label(self):
        """The same number in words, for a title attribute."""
        if self.exact:
            return f"{self.value:,} exactly"
        if self.at_least:
            return f"more than {self.value:,}"
        return f"about {self.value:,} (estimate)"


def tally(queryset, cap):
    """Count `queryset` exactly up to `cap` rows, estimate beyond."""
    counted = queryset.order_by()[: cap + 1].count()
    if counted <= cap:
        return Tally(value=counted)
    estimate = planner_estimate(queryset)
    if estimate is None or estimate <= cap:
        return Tally(value=cap, exact=False, at_least=True)
    return Tally(value=estimate, exact=False)


def planner_estimate(queryset):
    """The database's row estimate for `queryset`, or None where it keeps none."""
    sql, params = queryset.order_by().values("pk").query.sql_with_params()
    return console_sql.row_estimate(sql, params)
