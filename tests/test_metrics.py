"""Counts and counters: /api/v1/metrics/summary (JSON) and /metrics (Prometheus)."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobs import db
from jobs.states import JobState
from tests import tasks
from tests.factories import make_job
from tests.test_api_support import bearer, make_user, token_for

CONTRACT_COUNTERS = [
    "jobs_enqueued",
    "jobs_succeeded",
    "jobs_failed",
    "jobs_requeued",
    "jobs_dead_lettered",
    "jobs_recovered",
]


@pytest.fixture
def headers(db):
    return bearer(token_for(make_user("reader")))


def summary(client, headers):
    response = client.get("/api/v1/metrics/summary", headers=headers)
    assert response.status_code == 200
    return response.json()


def scrape(client, headers, accept=""):
    """{sample name: {labels as a sorted tuple: value}} from /metrics."""
    response = client.get("/metrics", headers={**headers, "Accept": accept})
    assert response.status_code == 200
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


@pytest.mark.django_db
def test_the_summary_counts_jobs_per_state_and_per_queue(client, headers):
    for state, queue in [
        (JobState.PENDING, "default"),
        (JobState.PENDING, "emails"),
        (JobState.DEAD_LETTER, "emails"),
        (JobState.SUCCEEDED, "emails"),
    ]:
        make_job(state, queue_name=queue)

    data = summary(client, headers)

    assert data["states"] == {
        "pending": 2,
        "scheduled": 0,
        "running": 0,
        "retrying": 0,
        "succeeded": 1,
        "cancelled": 0,
        "dead_letter": 1,
    }
    assert list(data["queues"]) == ["default", "emails"]
    assert data["queues"]["emails"]["pending"] == 1
    assert data["queues"]["emails"]["dead_letter"] == 1
    assert sum(data["queues"]["default"].values()) == 1


@pytest.mark.django_db
def test_the_summary_has_every_counter_even_before_anything_happened(client, headers):
    data = summary(client, headers)

    assert all(data["counters"][name] == 0 for name in CONTRACT_COUNTERS)
    assert set(data["states"].values()) == {0}
    assert data["queues"] == {}


@pytest.mark.django_db
def test_counters_sum_every_increment_and_survive_compaction(client, headers):
    db.add_counters({"jobs_failed": 2, "jobs_requeued": 1})
    db.add_counters({"jobs_failed": 3, "jobs_dead_lettered": 1})
    before = summary(client, headers)["counters"]

    db.compact_counters()

    assert before["jobs_failed"] == 5
    assert (before["jobs_requeued"], before["jobs_dead_lettered"]) == (1, 1)
    assert summary(client, headers)["counters"] == before


@pytest.mark.django_db
def test_prometheus_exposes_counters_with_total_and_jobs_by_state_and_queue(client, headers):
    make_job(JobState.DEAD_LETTER, queue_name="emails")
    db.add_counters({"jobs_succeeded": 2, "jobs_dead_lettered": 1})

    samples = scrape(client, headers)

    assert samples["jobsite_jobs_succeeded_total"] == {(): 2.0}
    assert samples["jobsite_jobs_dead_lettered_total"] == {(): 1.0}
    assert samples["jobsite_jobs_recovered_total"] == {(): 0.0}
    jobs = samples["jobsite_jobs"]
    assert jobs[(("queue", "emails"), ("state", "dead_letter"))] == 1.0
    assert jobs[(("queue", "emails"), ("state", "pending"))] == 0.0


@pytest.mark.django_db
def test_prometheus_text_is_the_default_and_openmetrics_is_negotiated(client, headers):
    plain = client.get("/metrics", headers=headers)
    open_metrics = client.get(
        "/metrics", headers={**headers, "Accept": "application/openmetrics-text; version=1.0.0"}
    )

    assert plain["Content-Type"].startswith("text/plain")
    assert b"# TYPE jobsite_jobs_enqueued_total counter" in plain.content
    assert open_metrics["Content-Type"].startswith("application/openmetrics-text")
    assert open_metrics.content.rstrip().endswith(b"# EOF")


@pytest.mark.django_db(transaction=True)
def test_counters_match_what_two_worker_processes_did(client, start_worker):
    headers = bearer(token_for(make_user("reader")))
    for i in range(5):
        tasks.add.enqueue(i, i)
    for i in range(3):
        tasks.flaky.enqueue(f"flaky-{i}")
    for i in range(2):
        tasks.always_fails.enqueue(f"fails-{i}")

    workers = [start_worker("--burst", "--concurrency", "2") for _ in range(2)]
    outputs = [w.communicate(timeout=120)[0] for w in workers]

    assert [w.returncode for w in workers] == [0, 0], outputs
    data = summary(client, headers)
    states = {k: v for k, v in data["states"].items() if v}
    assert states == {"succeeded": 8, "dead_letter": 2}, outputs
    expected = {
        "jobs_enqueued": 10,
        "jobs_succeeded": 8,
        "jobs_failed": 3 + 2 * 3,  # flaky's first attempts, then every attempt of always_fails
        "jobs_requeued": 3 + 2 * 2,
        "jobs_dead_lettered": 2,
        "jobs_recovered": 0,
    }
    assert {name: data["counters"][name] for name in expected} == expected, outputs
    samples = scrape(client, headers)
    assert {name: samples[f"jobsite_{name}_total"][()] for name in expected} == expected
    assert samples["jobsite_jobs"][(("queue", "default"), ("state", "succeeded"))] == 8


@pytest.mark.django_db
def test_prometheus_has_each_queues_due_jobs_and_the_age_of_its_oldest(client, headers):
    from datetime import timedelta

    from django.utils import timezone

    from jobs.models import PausedQueue

    now = timezone.now()
    make_job(JobState.PENDING, queue_name="emails", run_after=now - timedelta(seconds=600))
    make_job(JobState.PENDING, queue_name="emails", run_after=now - timedelta(seconds=30))
    make_job(JobState.RETRYING, queue_name="emails", run_after=now - timedelta(seconds=5))
    make_job(JobState.PENDING, queue_name="emails", run_after=now + timedelta(hours=1))
    make_job(JobState.PENDING, queue_name="later", run_after=now + timedelta(hours=1))
    make_job(JobState.PENDING, queue_name="held", run_after=now - timedelta(seconds=60))
    PausedQueue.objects.create(name="held")
    make_job(JobState.DEAD_LETTER, queue_name="broken")

    samples = scrape(client, headers)

    assert samples["jobsite_queue_due_jobs"] == {
        (("queue", "emails"),): 3.0,
        (("queue", "held"),): 0.0,
        (("queue", "later"),): 0.0,
    }
    ages = samples["jobsite_queue_oldest_due_age_seconds"]
    assert 600 <= ages[(("queue", "emails"),)] < 3600
    assert ages[(("queue", "held"),)] == ages[(("queue", "later"),)] == 0.0
