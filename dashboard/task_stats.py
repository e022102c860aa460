"""Per-task figures for the /tasks/ pages, built from the attempts over a bounded window.

No query reads more than a window of rows through an index, whatever the size of the tables:
the task list summarises the `RECENT_ATTEMPTS` most recent attempts (the `attempt_recent`
index); one task's page the attempts of its `TASK_JOBS` most recent jobs (an index-only scan of
the task's list order, `jobs.listing.newest_of_task`, then the attempts' (job, number) index).
The pages say which window they show.
"""

import math
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import F
from django.db.models.functions import Substr

from jobs import listing
from jobs.models import Attempt, Job
from jobs.states import AttemptOutcome, JobState, is_failed_attempt

from .queries import distinct_names

RECENT_ATTEMPTS = 1_000
TASK_JOBS = 300
RECENT_FAILURES = 10
MESSAGE_CHARS = 300
# Outcomes whose run time says how long the task takes (a lost or interrupted attempt does not).
TIMED_OUTCOMES = (AttemptOutcome.SUCCEEDED, AttemptOutcome.FAILED)


def percentile(sorted_values: list, p: float):
    """The nearest-rank percentile `p` (0-100) of an ascending list, or None when empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass(frozen=True, kw_only=True, slots=True)
class Failure:
    job_id: uuid.UUID
    number: int
    finished_at: datetime | None
    error_type: str
    error_message: str


@dataclass(kw_only=True, slots=True)
class TaskFigures:
    """What the attempts of one task in the window add up to."""

    task_path: str
    runs: int = 0
    failures: int = 0
    last_run_at: datetime | None = None
    durations: list[timedelta] = field(default_factory=list)
    # Most recent first, at most RECENT_FAILURES.
    recent_failures: list[Failure] = field(default_factory=list)

    def add(self, *, outcome, started_at, finished_at, job_id, number, error_type, error_text):
        """Count one attempt; attempts arrive most recent first."""
        self.runs += 1
        if self.last_run_at is None:
            self.last_run_at = finished_at
        if outcome in TIMED_OUTCOMES and started_at and finished_at:
            self.durations.append(finished_at - started_at)
        if is_failed_attempt(outcome):
            self.failures += 1
            if len(self.recent_failures) < RECENT_FAILURES:
                failure = Failure(
                    job_id=job_id,
                    number=number,
                    finished_at=finished_at,
                    error_type=error_type,
                    error_message=error_text,
                )
                self.recent_failures.append(failure)

    @property
    def failure_rate(self) -> float | None:
        return self.failures / self.runs if self.runs else None

    @property
    def p50(self) -> timedelta | None:
        return percentile(self._sorted_durations(), 50)

    @property
    def p95(self) -> timedelta | None:
        return percentile(self._sorted_durations(), 95)

    def _sorted_durations(self) -> list[timedelta]:
        self.durations.sort()
        return self.durations

    @property
    def last_error(self) -> Failure | None:
        return self.recent_failures[0] if self.recent_failures else None


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskList:
    rows: list[TaskFigures]
    # How many attempts the figures cover, and since when.
    attempts: int
    since: datetime | None
    # Did the window hold every attempt there is?
    complete: bool


ATTEMPT_COLUMNS = ("outcome", "started_at", "finished_at", "job_id", "number", "error_type")


def _attempt_values(queryset, **more):
    message = Substr("error_message", 1, MESSAGE_CHARS)
    return queryset.values(*ATTEMPT_COLUMNS, error_text=message, **more)


def task_list() -> TaskList:
    """Every task name, with the figures of its attempts among the most recent ones."""
    window = list(
        _attempt_values(
            Attempt.objects.filter(finished_at__isnull=False).order_by("-finished_at"),
            task_path=F("job__task_path"),
        )[: RECENT_ATTEMPTS + 1]
    )
    complete = len(window) <= RECENT_ATTEMPTS
    window = window[:RECENT_ATTEMPTS]
    figures = {name: TaskFigures(task_path=name) for name in distinct_names("task_path")}
    for row in window:
        task_path = row.pop("task_path")
        figures.setdefault(task_path, TaskFigures(task_path=task_path)).add(**row)
    rows = sorted(figures.values(), key=lambda f: (-f.runs, f.task_path))
    since = window[-1]["finished_at"] if window else None
    return TaskList(rows=rows, attempts=len(window), since=since, complete=complete)


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskDetail:
    figures: TaskFigures
    # Jobs per state among the most recent TASK_JOBS jobs, in lifecycle order.
    states: dict[str, int]
    jobs: int
    # Did the window hold every job of the task?
    complete: bool
    oldest_enqueued_at: datetime | None


def task_detail(task_path: str) -> TaskDetail | None:
    """One task's figures over its most recent jobs, or None when no job has that task."""
    recent = listing.newest_of_task(task_path, TASK_JOBS + 1)
    if not recent:
        return None
    complete = len(recent) <= TASK_JOBS
    recent = recent[:TASK_JOBS]
    ids = [job_id for job_id, _ in recent]
    attempts = _attempt_values(
        Attempt.objects.filter(job_id__in=ids, finished_at__isnull=False).order_by(
            "-finished_at", "-number"
        )
    )
    figures = TaskFigures(task_path=task_path)
    for row in attempts:
        figures.add(**row)
    counted = Counter(Job.objects.filter(id__in=ids).values_list("state", flat=True).order_by())
    return TaskDetail(
        figures=figures,
        states={state: counted.get(state, 0) for state in JobState},
        jobs=len(recent),
        complete=complete,
        oldest_enqueued_at=recent[-1][1],
    )
