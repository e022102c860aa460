"""Which index a list of jobs walks, newest first.

PostgreSQL keeps three list orders (every job, by queue, by task) on `Listing` rows, written
once when a job is inserted (migration 0023), and the order by state on the job row
(`job_state_recent`). The state changes with every claim and finish; the other columns never
change after the enqueue, and on the job row each claim and finish would write their index
entries again (bench/README.md). SQLite keeps all four orders on the job row: its updates only
rewrite the indexes holding a column they set.

A page walks one order and stops once it holds the page, so a list filtered by state and by
queue or task walks whichever of the two holds fewer jobs: the other filter then lets through
about as large a share of the rows it reads.
"""

from dataclasses import dataclass

from django.db import connection

from . import state_counts
from .models import Job, Listing

# A task is counted up to this many jobs to compare it with a state (an index-only range read).
TASK_COUNT_CAP = 10_000


@dataclass(frozen=True, slots=True)
class Order:
    """Newest first by a time, then by id: the fields a query sorts on, and the attribute of a
    job row holding the same time (for a page's cursor)."""

    time: str
    id: str = "id"
    attribute: str = ""

    @property
    def order_by(self) -> tuple[str, str]:
        return (f"-{self.time}", f"-{self.id}")

    @property
    def row_time(self) -> str:
        return self.attribute or self.time


ON_THE_ROW = Order("enqueued_at")
LISTED = Order("listing__enqueued_at", "listing__job_id", attribute="enqueued_at")


def kept_apart() -> bool:
    """Are the list orders kept on `Listing` rows rather than on the job row?"""
    return connection.vendor == "postgresql"


def newest_first(jobs, *, state=None, queue=None, task=None, on_the_row=False):
    """`jobs` narrowed to a state, queue and task, and the Order that pages them fastest.

    `on_the_row`: the list is read in an order of its own on the job row (dead letters by
    finish time, a workflow's few nodes), so every filter applies to the job row.
    """
    if state:
        jobs = jobs.filter(state=state)
    if on_the_row or not kept_apart() or (state and not (queue or task)):
        return _on_the_row(jobs, queue, task), ON_THE_ROW
    if state and _state_is_smaller(state, queue, task):
        return _on_the_row(jobs, queue, task), ON_THE_ROW
    listed = {"listing__queue_name": queue, "listing__task_path": task}
    # The filter makes the join an inner one, which the planner can drive from the listing.
    narrowed = {name: value for name, value in listed.items() if value}
    return jobs.filter(**(narrowed or {"listing__isnull": False})), LISTED


def _on_the_row(jobs, queue, task):
    if queue:
        jobs = jobs.filter(queue_name=queue)
    if task:
        jobs = jobs.filter(task_path=task)
    return jobs


def _state_is_smaller(state, queue, task) -> bool:
    """Does `state` hold no more jobs than the smaller of the queue and the task?"""
    counts = state_counts.job_counts()
    in_state = sum(n for (_, s), n in counts.items() if s == state)
    if queue and sum(n for (q, _), n in counts.items() if q == queue) < in_state:
        return False
    if task:
        cap = min(in_state, TASK_COUNT_CAP)
        in_task = Listing.objects.filter(task_path=task).order_by()[: cap + 1].count()
        if in_task <= cap and in_task < in_state:
            return False
    return True


def names_table() -> str:
    """The table whose indexes lead with queue_name and with task_path (a loose index scan
    reads each distinct name from them)."""
    model = Listing if kept_apart() else Job
    return connection.ops.quote_name(model._meta.db_table)


def newest_of_task(task_path: str, n: int) -> list:
    """(id, enqueued_at) of the task's `n` newest jobs: an index-only read of one range."""
    rows = Listing.objects if kept_apart() else Job.objects
    return list(
        rows.filter(task_path=task_path)
        .order_by("-enqueued_at", "-pk")
        .values_list("pk", "enqueued_at")[:n]
    )
