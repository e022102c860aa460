"""What the overview and the queues page show per state and per queue: counts that stay
exact (or say they are not) at millions of jobs, and the oldest due job of each queue."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection

from jobs import db, queues, state_counts
from jobs.db.console_sql import read_timestamp
from jobs.models import Job
from jobs.states import JobState

from .counts import STATE_CAP, Tally, tally
from .queries import distinct_names

QUEUE_SAMPLE = 1_000


def state_tallies() -> dict[str, Tally]:
    """A tally of the jobs in each state, in lifecycle order: exact where the database keeps
    the counts, capped (`counts.tally`) where counting would scan."""
    if state_counts.kept():
        by_state: dict[str, int] = dict.fromkeys(JobState, 0)
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
        found = [read_timestamp(row[0]) for row in cursor.fetchall() if row[0] is not None]
    return min(found, default=None)


def _age(now, moment):
    return now - moment if moment else None


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
