"""Every query the console's pages run, each sized for a job table of millions of rows.

No page counts or sorts the whole table: lists are keyset pages on the console indexes, counts
are capped (see `counts`), and the lists of queue and task names come from a loose index scan.
"""

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import Count, Q
from django.db.models.functions import TruncMinute

from jobs import db, queues, state_counts, timing
from jobs.models import Attempt, AuditEntry, Job, WorkerNode
from jobs.search import search
from jobs.states import AttemptOutcome, JobState, is_failed_attempt

from .columns import LIST_COLUMNS
from .counts import STATE_CAP, Tally, tally
from .pagination import Page, keyset_page

# The loose index scan stops after this many names; beyond it the list would not help anyone.
MAX_NAMES = 500
DEAD_LETTER_GROUPS = 50
# The dead letters grouped on the page: the most recent ones, so the cost stays flat however
# many have piled up.
DEAD_LETTER_WINDOW = 2_000
# Under a text search the newest matches are found row by row when the text is common (see
# jobs.search), so the window is smaller: 500 is still every error of a triage at a glance.
DEAD_LETTER_SEARCH_WINDOW = 500
QUEUE_SAMPLE = 1_000
MAX_RUNNING_SHOWN = 500
RUNNING_SHOWN_PER_WORKER = 10
LINEAGE_DEPTH = 20


def lease_seconds() -> float:
    return timing.configured().lease_seconds


# Names of queues and tasks.


def distinct_names(column: str, limit: int = MAX_NAMES) -> list[str]:
    """Distinct values of an indexed column, one index probe per value (a loose index scan)."""
    if column not in ("queue_name", "task_path"):
        raise ValueError(column)
    table = connection.ops.quote_name(Job._meta.db_table)
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


# Overview.


def state_tallies() -> dict[str, Tally]:
    """A tally of the jobs in each state, in lifecycle order: exact where the database keeps
    the counts, capped (`counts.tally`) where counting would scan."""
    if state_counts.kept():
        by_state = dict.fromkeys(JobState, 0)
        for (_, state), n in state_counts.job_counts().items():
            by_state[state] = by_state.get(state, 0) + n
        return {state: Tally(value=by_state[state]) for state in JobState}
    return {state: tally(Job.objects.filter(state=state), STATE_CAP) for state in JobState}


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueRow:
    name: str
    pending: Tally
    running: Tally
    retrying: Tally
    dead_letter: Tally
    # How long the job that has waited longest since it became due has been waiting.
    oldest_due_age: timedelta | None
    # Do workers claim nothing from it (`jobs.queues.pause`)?
    paused: bool = False


QUEUE_COLUMNS = (JobState.PENDING, JobState.RUNNING, JobState.RETRYING, JobState.DEAD_LETTER)


def queue_rows(now: datetime, states: dict[str, Tally]) -> list[QueueRow]:
    """Per queue: jobs in the states that need watching, and the age of the oldest due job."""
    paused = queues.paused()
    if state_counts.kept():
        counts = queues.job_counts()
        return [
            QueueRow(
                name=name,
                **{state: Tally(value=counts[name].get(state, 0)) for state in QUEUE_COLUMNS},
                oldest_due_age=_age(now, oldest_due(name, now)),
                paused=name in paused,
            )
            for name in sorted(counts)
        ]
    split = {state: per_queue(state, states[state]) for state in QUEUE_COLUMNS}
    return [
        QueueRow(
            name=name,
            **{state: split[state].get(name, _none_in(split[state])) for state in QUEUE_COLUMNS},
            oldest_due_age=_age(now, oldest_due(name, now)),
            paused=name in paused,
        )
        for name in distinct_names("queue_name")
    ]


def per_queue(state: str, total: Tally) -> dict[str, Tally]:
    """How the jobs in `state` split across queues.

    Read from the `QUEUE_SAMPLE` most recent jobs in that state (one index range): exact when
    that is all of them, otherwise the state's total shared out in the sample's proportions.
    """
    table = connection.ops.quote_name(Job._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT queue_name, COUNT(*) FROM (
                SELECT queue_name FROM {table} WHERE state = %s
                ORDER BY enqueued_at DESC, id DESC LIMIT %s
            ) AS recent GROUP BY queue_name
            """,
            [state, QUEUE_SAMPLE],
        )
        sample = dict(cursor.fetchall())
    sampled = sum(sample.values())
    if sampled < QUEUE_SAMPLE:
        return {name: Tally(value=n) for name, n in sample.items()}
    if total.at_least:
        return {name: Tally(value=n, exact=False, at_least=True) for name, n in sample.items()}
    return {
        name: Tally(value=round(total.value * n / sampled), exact=False)
        for name, n in sample.items()
    }


def _none_in(split: dict[str, Tally]) -> Tally:
    """What a queue absent from the split has: none, or none among the jobs sampled."""
    sampled_all = all(t.exact for t in split.values())
    return Tally(value=0, exact=sampled_all)


def oldest_due(queue: str, now: datetime) -> datetime | None:
    """The earliest run_after among the due jobs of `queue`.

    The queue claim index orders a queue by priority, then run_after: the claim's own walk over
    the priority levels (Engine.level_walk) finds the levels in use, and the earliest due job
    of each is one probe.
    """
    engine = db.engine()
    queue_test = "AND queue_name = %s"
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            {engine.level_walk(queue_test, 1)}
            SELECT (SELECT run_after FROM {engine.claim_source(1)}
                    WHERE {engine.claimable(1)} {queue_test}
                      AND priority = level.priority AND run_after <= %s
                    ORDER BY run_after LIMIT 1) AS first_due
            FROM level WHERE level.priority IS NOT NULL
            """,
            [queue, queue, queue, now],
        )
        found = [as_datetime(row[0]) for row in cursor.fetchall() if row[0] is not None]
    return min(found, default=None)


def _age(now, moment):
    return now - moment if moment else None


def as_datetime(value) -> datetime:
    """A timestamp from a raw cursor: SQLite hands back text."""
    if isinstance(value, datetime):
        moment = value
    else:
        moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# Queues.


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueStatus:
    name: str
    paused: bool
    paused_at: datetime | None
    # Who paused it: an operator's username, "circuit breaker", or "".
    paused_by: str = ""
    counts: dict[str, Tally]
    oldest_due_at: datetime | None
    oldest_due_age: timedelta | None
    # Attempts finished in the last hour, and how many of them failed (None: no attempt).
    finished_last_hour: Tally
    failure_rate: float | None


def queue_statuses(now: datetime) -> list[QueueStatus]:
    """Every queue (with jobs, or paused): counts per state, oldest due job, last hour's runs.

    Counts per state are exact (`jobs.queues.job_counts`); the last hour's runs are counted up
    to a cap and split across queues by the most recent of them (`jobs.queues.last_hour`).
    """
    counts = queues.job_counts()
    paused = queues.paused()
    hour = queues.last_hour(now)
    statuses = []
    for name in sorted(set(counts) | set(paused)):
        due = oldest_due(name, now)
        runs = hour.finished.get(name, 0)
        held = counts.get(name, {})
        statuses.append(
            QueueStatus(
                name=name,
                paused=name in paused,
                paused_at=paused[name].paused_at if name in paused else None,
                paused_by=paused[name].paused_by if name in paused else "",
                counts={state: Tally(value=held.get(state, 0)) for state in JobState},
                oldest_due_at=due,
                oldest_due_age=_age(now, due),
                finished_last_hour=Tally(value=runs, exact=hour.exact, at_least=hour.capped),
                failure_rate=hour.failed.get(name, 0) / runs if runs else None,
            )
        )
    return statuses


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerCounts:
    online: int
    # Not stopped, but silent for longer than the lease: presumed dead.
    lost: int


def worker_counts() -> WorkerCounts:
    online = WorkerNode.objects.online(lease_seconds()).count()
    unstopped = WorkerNode.objects.filter(stopped_at__isnull=True).count()
    return WorkerCounts(online=online, lost=unstopped - online)


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


def filtered_jobs(*, state=None, queue=None, task=None, q=None, error=None, workflow=None):
    jobs = Job.objects.all()
    if workflow:
        jobs = jobs.filter(workflow_id=workflow)
    if state:
        jobs = jobs.filter(state=state)
    if queue:
        jobs = jobs.filter(queue_name=queue)
    if task:
        jobs = jobs.filter(task_path=task)
    if error:
        jobs = jobs.filter(error_type=error)
    if q:
        jobs = search(jobs, q, task_paths=distinct_names("task_path"))
    return jobs


def describe_filter(filters: dict) -> str:
    """A filter in words for the audit: `state=dead_letter q=smtp`, or `every job`."""
    return " ".join(f"{k}={v}" for k, v in filters.items()) or "every job"


def jobs_page(filters: dict, *, cursor, limit) -> Page:
    jobs = filtered_jobs(**filters).only(*LIST_COLUMNS)
    return keyset_page(jobs, time_field="enqueued_at", cursor=cursor, limit=limit)


def dead_letters(filters: dict):
    return filtered_jobs(state=JobState.DEAD_LETTER, **filters)


def dead_letter_page(filters: dict, *, cursor, limit) -> Page:
    jobs = dead_letters(filters).only(*LIST_COLUMNS)
    return keyset_page(jobs, time_field="finished_at", cursor=cursor, limit=limit)


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


def dead_letter_groups(filters: dict) -> DeadLetterGroups:
    """The most recent dead letters by task and error type: count, first and last seen."""
    window = DEAD_LETTER_SEARCH_WINDOW if filters.get("q") else DEAD_LETTER_WINDOW
    recent = (
        dead_letters(filters)
        .order_by("-finished_at", "-id")
        .values("task_path", "error_type", "finished_at")[:window]
    )
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
                "first_seen": as_datetime(first),
                "last_seen": as_datetime(last),
            }
            for task_path, error_type, count, first, last in cursor.fetchall()
        ]
    covered = sum(row["count"] for row in rows)
    return DeadLetterGroups(
        rows=rows[:DEAD_LETTER_GROUPS],
        window=covered,
        complete=covered < window,
    )


def dead_letter_total(filters: dict, groups: DeadLetterGroups) -> Tally:
    """How many dead letters match: the state's tally when unfiltered, else the groups' sum."""
    if filters:
        return groups.total
    return tally(dead_letters({}), STATE_CAP)


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

    def __bool__(self):
        return bool(self.rerun_of or self.reruns or self.parent or self.continuations)


LINEAGE_COLUMNS = ("id", "task_path", "state", "enqueued_at", "finished_at", "rerun_of_id")


def job_lineage(job: Job) -> Lineage:
    ancestors = []
    ancestor_id = job.rerun_of_id
    while ancestor_id and len(ancestors) < LINEAGE_DEPTH:
        ancestor = Job.objects.only(*LINEAGE_COLUMNS).filter(id=ancestor_id).first()
        if ancestor is None:
            break
        ancestors.append(ancestor)
        ancestor_id = ancestor.rerun_of_id
    related = Job.objects.only(*LINEAGE_COLUMNS).order_by("-enqueued_at", "-id")
    return Lineage(
        rerun_of=ancestors,
        reruns=list(related.filter(rerun_of=job)[:LINEAGE_DEPTH]),
        parent=related.filter(id=job.parent_id).first() if job.parent_id else None,
        continuations=list(related.filter(parent=job)[:LINEAGE_DEPTH]),
    )


# Workers.


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerRow:
    node: WorkerNode
    # "online", "lost" (no heartbeat within the lease) or "stopped".
    status: str
    heartbeat_age: timedelta
    running: list  # the first RUNNING_SHOWN_PER_WORKER of its running jobs
    running_count: int = 0
    # Free executors for a sync job and free coroutine slots at its last heartbeat (None:
    # not reported), each with the worker's total.
    free_sync: int | None = None
    sync_total: int = 0
    free_async: int | None = None
    async_total: int = 0

    @property
    def running_more(self) -> int:
        return self.running_count - len(self.running)


# What the workers page shows of each running job (its progress bar included).
RUNNING_COLUMNS = "id task_path queue_name worker_id started_at attempt state progress"


def worker_rows(now: datetime, *, recent: timedelta = timedelta(hours=24)) -> list[WorkerRow]:
    lease = timedelta(seconds=lease_seconds())
    nodes = list(
        WorkerNode.objects.filter(
            Q(stopped_at__isnull=True) | Q(stopped_at__gte=now - recent)
        ).order_by("stopped_at", "-last_heartbeat_at")[:200]
    )
    running: dict[str, list] = {}
    jobs = (
        Job.objects.running()
        .filter(worker_id__in=[n.id for n in nodes])
        .only(*RUNNING_COLUMNS.split())
        .order_by("started_at")[:MAX_RUNNING_SHOWN]
    )
    for job in jobs:
        running.setdefault(job.worker_id, []).append(job)
    return [
        WorkerRow(
            node=node,
            status=_worker_status(node, now, lease),
            heartbeat_age=now - node.last_heartbeat_at,
            running=running.get(node.id, [])[:RUNNING_SHOWN_PER_WORKER],
            running_count=len(running.get(node.id, [])),
            **_slots(node),
        )
        for node in nodes
    ]


def _slots(node: WorkerNode) -> dict:
    if node.stopped_at:
        return {}
    return {
        "free_sync": node.free_sync_slots,
        "sync_total": node.concurrency,
        "free_async": node.free_async_slots,
        "async_total": node.concurrency * node.async_concurrency,
    }


def _worker_status(node: WorkerNode, now: datetime, lease: timedelta) -> str:
    if node.stopped_at:
        return "stopped"
    return "online" if now - node.last_heartbeat_at <= lease else "lost"
