"""Every query the console's pages run, each sized for a job table of millions of rows.

No page counts or sorts the whole table: lists are keyset pages on the console indexes, counts
are capped (see `counts`), and the lists of queue and task names come from a loose index scan.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import Case, Count, QuerySet, When
from django.db.models.functions import TruncMinute

from jobs import listing
from jobs.db.console_sql import read_timestamp
from jobs.listing import Order
from jobs.models import Attempt, AuditEntry, Job
from jobs.search import is_common, search
from jobs.states import AttemptOutcome, JobState, is_failed_attempt

from .columns import LIST_COLUMNS
from .counts import STATE_CAP, Tally, tally
from .pagination import FINISHED, Page, keyset_page

# The loose index scan stops after this many names; beyond it the list would not help anyone.
MAX_NAMES = 500
DEAD_LETTER_GROUPS = 50
# The dead letters grouped on the page: the most recent ones, so the cost stays flat however
# many have piled up.
DEAD_LETTER_WINDOW = 2_000
# Under a text search the newest matches are found row by row when the text is common (see
# jobs.search), so the window is smaller: 500 is still every error of a triage at a glance.
DEAD_LETTER_SEARCH_WINDOW = 500
LINEAGE_DEPTH = 20


# Names of queues and tasks.


def distinct_names(column: str, limit: int = MAX_NAMES) -> list[str]:
    """Distinct values of an indexed column, one index probe per value (a loose index scan)."""
    if column not in ("queue_name", "task_path"):
        raise ValueError(column)
    table = listing.names_table()
    sql = f"""
        WITH RECURSIVE names(name, n) AS (
            SELECT (SELECT {column} FROM {table} ORDER BY {column} LIMIT 1), 1
            UNION ALL
            SELECT (SELECT {column} FROM {table} WHERE {column} > names.name
                    ORDER BY {column} LIMIT 1), n + 1
            FROM names WHERE names.name IS NOT NULL AND n < %s
        )
        SELECT name FROM names WHERE name IS NOT NULL
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [limit])
        return [row[0] for row in cursor.fetchall()]


# The last hour, for the overview's chart.


@dataclass(frozen=True, kw_only=True, slots=True)
class Minute:
    at: datetime
    succeeded: int
    failed: int


def attempts_per_minute(now: datetime, minutes: int = 60) -> list[Minute]:
    """Succeeded and failed attempts per minute over the last `minutes`, oldest first."""
    end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    start = end - timedelta(minutes=minutes)
    rows = (
        Attempt.objects.filter(finished_at__gte=start, finished_at__lt=end)
        .annotate(minute=TruncMinute("finished_at"))
        .values("minute", "outcome")
        .annotate(n=Count("id"))
        .order_by()
    )
    succeeded: dict[datetime, int] = {}
    failed: dict[datetime, int] = {}
    for row in rows:
        if row["outcome"] == AttemptOutcome.SUCCEEDED:
            succeeded[row["minute"]] = succeeded.get(row["minute"], 0) + row["n"]
        elif is_failed_attempt(row["outcome"]):
            failed[row["minute"]] = failed.get(row["minute"], 0) + row["n"]
    slots = [start + timedelta(minutes=i) for i in range(minutes)]
    return [Minute(at=m, succeeded=succeeded.get(m, 0), failed=failed.get(m, 0)) for m in slots]


# Lists.


def listed_jobs(
    *, state=None, queue=None, task=None, q=None, error=None, workflow=None, order=None
) -> tuple[QuerySet, Order]:
    """The jobs matching the console's filters, and the order their pages walk: `order` for a
    list with one of its own (dead letters), else newest first as jobs.listing picks it."""
    jobs = Job.objects.all()
    if workflow:
        jobs = jobs.filter(workflow_id=workflow)
    if error:
        jobs = jobs.filter(error_type=error)
    narrowed = {"state": state, "queue": queue, "task": task}
    walked, newest = listing.newest_first(jobs, **narrowed, on_the_row=bool(order or workflow))
    order = order or newest
    # As the console's forms read it: blanks around the text are not searched for (a text of
    # blanks alone would match nearly every row, through no index).
    q = (q or "").strip()
    if q:
        names = distinct_names("task_path")
        common = is_common(walked, q, task_paths=names, order=order)
        if not common and order == listing.LISTED:
            # A rare text's matches come from the search indexes and are sorted: by the job
            # row's own columns, with no lookup of each match's listing.
            walked, order = listing.newest_first(jobs, **narrowed, on_the_row=True)
        walked = search(walked, q, task_paths=names, order=order, common=common)
    return walked, order


def filtered_jobs(**filters) -> QuerySet:
    """The jobs matching the console's filters (listed_jobs' keywords)."""
    return listed_jobs(**filters)[0]


def describe_filter(filters: dict) -> str:
    """A filter in words for the audit: `state=dead_letter q=smtp`, or `every job`."""
    return " ".join(f"{k}={v}" for k, v in filters.items()) or "every job"


def jobs_page(filters: dict, *, cursor, limit) -> Page:
    jobs, order = listed_jobs(**filters)
    return keyset_page(jobs.only(*LIST_COLUMNS), order=order, cursor=cursor, limit=limit)


def dead_letters(filters: dict):
    return filtered_jobs(state=JobState.DEAD_LETTER, order=FINISHED, **filters)


@dataclass(frozen=True, kw_only=True, slots=True)
class DeadLetterGroups:
    rows: list[dict]
    # How many of the most recent dead letters the groups cover.
    window: int
    # Do the groups cover every matching dead letter?
    complete: bool

    @property
    def total(self) -> Tally:
        """The matching dead letters: exact when the groups cover them all."""
        return Tally(value=self.window, exact=self.complete, at_least=not self.complete)


def dead_letter_groups(dead: QuerySet, *, searched: bool) -> DeadLetterGroups:
    """The most recent of the `dead` letters by task and error type: count, first and last
    seen. `searched`: are they a text search's matches?"""
    window = DEAD_LETTER_SEARCH_WINDOW if searched else DEAD_LETTER_WINDOW
    columns = ("task_path", "error_type", "finished_at")
    recent = dead.order_by("-finished_at", "-id").values(*columns)[:window]
    try:
        sql, params = recent.query.sql_with_params()
    except EmptyResultSet:
        # A filter that can match nothing compiles to no SQL at all.
        return DeadLetterGroups(rows=[], window=0, complete=True)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT task_path, error_type, COUNT(*), MIN(finished_at), MAX(finished_at)
            FROM ({sql}) AS recent
            GROUP BY task_path, error_type
            ORDER BY COUNT(*) DESC, task_path, error_type
            """,
            params,
        )
        rows = [
            {
                "task_path": task_path,
                "error_type": error_type,
                "count": count,
                "first_seen": read_timestamp(first),
                "last_seen": read_timestamp(last),
            }
            for task_path, error_type, count, first, last in cursor.fetchall()
        ]
    covered = sum(row["count"] for row in rows)
    return DeadLetterGroups(
        rows=rows[:DEAD_LETTER_GROUPS],
        window=covered,
        complete=covered < window,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class DeadLetterList:
    page: Page
    groups: DeadLetterGroups
    # How many dead letters match: the state's tally when unfiltered, else the groups' sum.
    matching: Tally


def dead_letter_list(filters: dict, *, cursor, limit) -> DeadLetterList:
    """The dead-letters page: its rows, the groups and how many match, from one reading of the
    filters (under a search, reading them reads the task names and probes the text)."""
    dead = dead_letters(filters)
    page = keyset_page(dead.only(*LIST_COLUMNS), order=FINISHED, cursor=cursor, limit=limit)
    groups = dead_letter_groups(dead, searched=bool(filters.get("q")))
    matching = groups.total if filters else tally(dead, STATE_CAP)
    return DeadLetterList(page=page, groups=groups, matching=matching)


def dead_letter_ids(filters: dict, *, cap: int) -> list[uuid.UUID]:
    """The ids of at most `cap` dead letters matching `filters`, the most recent first."""
    return list(
        dead_letters(filters).order_by("-finished_at", "-id").values_list("id", flat=True)[:cap]
    )


# One job.


def job_attempts(job: Job) -> list[Attempt]:
    return list(job.attempts.order_by("number"))


def job_audit(job: Job, limit: int = 100) -> list[AuditEntry]:
    return list(job.audit_entries.order_by("-at", "-id")[:limit])


@dataclass(frozen=True, kw_only=True, slots=True)
class Lineage:
    # The runs this one reruns, the nearest first.
    rerun_of: list
    reruns: list
    parent: Job | None
    continuations: list
    # A workflow node's own edges (a continuation's parent is `parent`): the unsuccessful
    # first, then the unfinished, so the one that cancelled a node is always in view.
    after: list
    before: list

    def __bool__(self):
        return bool(
            self.rerun_of
            or self.reruns
            or self.parent
            or self.continuations
            or self.after
            or self.before
        )


LINEAGE_COLUMNS = (
    "id",
    "task_path",
    "node_name",
    "state",
    "enqueued_at",
    "finished_at",
    "rerun_of_id",
)


def job_lineage(job: Job) -> Lineage:
    ancestors: list[Job] = []
    ancestor_id = job.rerun_of_id
    while ancestor_id and len(ancestors) < LINEAGE_DEPTH:
        ancestor = Job.objects.only(*LINEAGE_COLUMNS).filter(id=ancestor_id).first()
        if ancestor is None:
            break
        ancestors.append(ancestor)
        ancestor_id = ancestor.rerun_of_id
    related = Job.objects.only(*LINEAGE_COLUMNS).order_by("-enqueued_at", "-id")
    after = before = []
    if job.workflow_id is not None:
        unsuccessful_first = Case(
            When(state__in=[JobState.DEAD_LETTER, JobState.CANCELLED], then=0),
            When(state=JobState.SUCCEEDED, then=2),
            default=1,
        )
        nodes = Job.objects.only(*LINEAGE_COLUMNS).order_by(unsuccessful_first, "node_name", "id")
        upstream = nodes.filter(downstream_edges__downstream=job)
        if job.parent_id is not None:
            upstream = upstream.exclude(id=job.parent_id)
        after = list(upstream[:LINEAGE_DEPTH])
        before = list(
            nodes.filter(upstream_edges__upstream=job, parent__isnull=True)[:LINEAGE_DEPTH]
        )
    return Lineage(
        rerun_of=ancestors,
        reruns=list(related.filter(rerun_of=job)[:LINEAGE_DEPTH]),
        parent=related.filter(id=job.parent_id).first() if job.parent_id else None,
        continuations=list(related.filter(parent=job)[:LINEAGE_DEPTH]),
        after=after,
        before=before,
    )
