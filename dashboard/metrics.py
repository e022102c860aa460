"""Job counts and lifetime counters, read from the database on every scrape.

Counters are the sums of `CounterDelta` rows that the engine writes in the same transactions
as the state changes they count, so every worker process on every machine contributes and
nothing is kept in memory here. Gauges are the jobs per state and queue from
`jobs.state_counts`, which on PostgreSQL never counts the job table itself, and per queue the
due jobs and the age of the oldest (what an autoscaler reads: deploy/keda-scaledobject.yaml).
"""

from dataclasses import dataclass

from django.db import connection
from django.http import HttpResponse
from django.urls import path
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from jobs import db, queues
from jobs.limit_usage import usage
from jobs.models import CounterDelta, Schedule
from jobs.state_counts import job_counts
from jobs.states import JobState

from .auth import api_view
from .queue_rows import oldest_due

COUNTERS = {
    "jobs_enqueued": "Jobs enqueued.",
    "jobs_succeeded": "Jobs that succeeded.",
    "jobs_failed": "Failed attempts (every one, retried or not).",
    "jobs_requeued": "Failed attempts that scheduled another attempt.",
    "jobs_dead_lettered": "Jobs that became dead letters.",
    "jobs_recovered": "Jobs rescued from workers that stopped renewing their lease.",
    "jobs_cancelled": "Jobs cancelled.",
    "jobs_snoozed": "Attempts that ended in a Snooze (one past MAX_SNOOZES dead-letters its job).",
}
STATES = [state.value for state in JobState]
# Due jobs are counted through the claim index up to this many per queue (an autoscaler needs
# to know the backlog is large, not by how much past this).
DUE_CAP = 100_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    # Jobs per state, every state present.
    states: dict[str, int]
    # Jobs per queue, then per state, every state present.
    queues: dict[str, dict[str, int]]
    # Lifetime counters, every name of COUNTERS present.
    counters: dict[str, int]

    def as_json(self) -> dict:
        return {"states": self.states, "queues": self.queues, "counters": self.counters}


def snapshot() -> Snapshot:
    states = dict.fromkeys(STATES, 0)
    queues: dict[str, dict[str, int]] = {}
    for (queue_name, state), n in job_counts().items():
        states[state] = states.get(state, 0) + n
        queue = queues.setdefault(queue_name, dict.fromkeys(STATES, 0))
        queue[state] = n
    counters = dict.fromkeys(COUNTERS, 0) | CounterDelta.objects.totals()
    return Snapshot(states=states, queues=dict(sorted(queues.items())), counters=counters)


class JobsCollector(Collector):
    """Reads one snapshot per scrape."""

    def collect(self):
        snap = snapshot()
        for name, help_text in COUNTERS.items():
            yield CounterMetricFamily(f"jobsite_{name}", help_text, value=snap.counters[name])
        jobs = GaugeMetricFamily(
            "jobsite_jobs", "Jobs by state and queue.", labels=["state", "queue"]
        )
        for queue, states in snap.queues.items():
            for state, n in states.items():
                jobs.add_metric([state, queue], n)
        yield jobs
        yield from due_gauges()
        yield from schedule_counters()
        yield from limit_gauges()


def limit_gauges():
    """Per limit in force: its jobs running, and the due jobs it holds back."""
    running = GaugeMetricFamily(
        "jobsite_limit_running", "Jobs running under a limit (all its keys).", labels=["limit"]
    )
    waiting = GaugeMetricFamily(
        "jobsite_limit_waiting", "Due jobs a limit holds back now.", labels=["limit"]
    )
    for row in usage():
        running.add_metric([row.spec.name], row.running)
        waiting.add_metric([row.spec.name], row.waiting)
    yield running
    yield waiting


def due_gauges():
    """Per queue holding pending or retrying jobs: how many are due now (a worker would claim
    them), and how long the one due longest has waited. A paused queue has none due."""
    due = GaugeMetricFamily(
        "jobsite_queue_due_jobs",
        f"Jobs due now per queue (claimable, not paused; counted up to {DUE_CAP}).",
        labels=["queue"],
    )
    age = GaugeMetricFamily(
        "jobsite_queue_oldest_due_age_seconds",
        "Seconds the longest-waiting due job of a queue has been due (0: none due).",
        labels=["queue"],
    )
    now = timezone.now()
    paused = queues.paused()
    for queue, states in sorted(queues.job_counts().items()):
        if not states.get(JobState.PENDING) and not states.get(JobState.RETRYING):
            continue
        if queue in paused:
            n, oldest = 0, None
        else:
            n, oldest = due_count(queue, now), oldest_due(queue, now)
        due.add_metric([queue], n)
        age.add_metric([queue], max(0.0, (now - oldest).total_seconds()) if oldest else 0.0)
    yield due
    yield age


def due_count(queue: str, now) -> int:
    """Due jobs of `queue`, read from the claim index (up to DUE_CAP)."""
    engine = db.engine()
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT count(*) FROM (
                SELECT 1 FROM {engine.claim_source(1)}
                WHERE {engine.claimable(1)} AND queue_name = %s AND run_after <= %s
                LIMIT %s
            ) AS due
            """,
            [queue, now, DUE_CAP],
        )
        return cursor.fetchone()[0]


def schedule_counters():
    """Fires and missed fires per schedule, kept on the schedule rows by the firing worker."""
    fires = CounterMetricFamily(
        "jobsite_schedule_fires", "Fire times of a schedule enqueued.", labels=["schedule"]
    )
    missed = CounterMetricFamily(
        "jobsite_schedule_missed",
        "Fire times of a schedule passed over (no worker ran; the missed policy skipped them).",
        labels=["schedule"],
    )
    for name, n_fires, n_missed in Schedule.objects.values_list("name", "fires", "missed"):
        fires.add_metric([name], n_fires)
        missed.add_metric([name], n_missed)
    yield fires
    yield missed


@api_view("GET")
def metrics(request):
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobsCollector())
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encode(registry), content_type=content_type)


# Included at `metrics` by dashboard/urls.py.
urlpatterns = [path("", metrics, name="metrics")]
