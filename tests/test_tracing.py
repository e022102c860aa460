"""OpenTelemetry with the real SDK: an enqueue's span (in-memory exporter, this process) is
the parent of the first attempt's span and linked from later ones (a real worker subprocess
exporting to a file)."""

import subprocess
import sys

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from jobs.models import Job
from tests import tasks
from tests.conftest import ROOT
from tests.telemetry import read_lines, span_record

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def enqueue_spans():
    """A tracer provider for this process while the test runs; its finished spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    # The global provider may be set once per process: put back "none set" for the others.
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE = Once()


@pytest.fixture
def traced_worker(subprocess_env, tmp_path):
    """Run a burst worker whose spans are written to a file; returns its spans."""
    spans = tmp_path / "spans.jsonl"

    def run():
        env = {
            **subprocess_env,
            "DJANGO_SETTINGS_MODULE": "tests.telemetry_settings",
            "JOBSITE_TEST_SPANS": str(spans),
        }
        proc = subprocess.run(
            [sys.executable, "manage.py", "worker", "--burst"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return read_lines(spans)

    return run


def test_the_first_attempt_is_the_enqueues_child_and_the_retry_links_to_it(
    enqueue_spans, traced_worker
):
    result = tasks.flaky.enqueue("traced")
    [enqueued] = [span_record(s) for s in enqueue_spans.get_finished_spans()]
    assert enqueued["name"] == "enqueue tests.tasks.flaky"
    assert enqueued["attributes"]["jobsite.job_id"] == result.id
    assert Job.objects.get(id=result.id).trace_context["traceparent"]

    runs = [s for s in traced_worker() if s["attributes"].get("jobsite.job_id") == result.id]
    first, second = sorted(runs, key=lambda s: s["attributes"]["jobsite.attempt"])
    assert first["name"] == second["name"] == "run tests.tasks.flaky"
    assert first["parent"] == enqueued["context"] and first["links"] == []
    assert second["parent"] is None and second["links"] == [enqueued["context"]]
    assert second["context"][0] != enqueued["context"][0]  # a trace of its own

    assert first["attributes"] == {
        "jobsite.job_id": result.id,
        "jobsite.attempt": 1,
        "jobsite.queue": "default",
        "jobsite.outcome": "failed",
    }
    assert first["status"] == "ERROR"
    [exception] = first["events"]
    assert exception["name"] == "exception"
    assert exception["attributes"]["exception.type"] == "ConnectionError"
    assert exception["attributes"]["exception.message"] == "attempt 1 of traced failed"
    assert "Traceback" in exception["attributes"]["exception.stacktrace"]
    assert (second["attributes"]["jobsite.outcome"], second["status"]) == ("succeeded", "UNSET")


def test_a_bulk_enqueue_is_one_span_every_job_refers_to(enqueue_spans, traced_worker):
    ids = tasks.add.enqueue_many([((n, 1), {}) for n in range(3)])
    [enqueued] = [span_record(s) for s in enqueue_spans.get_finished_spans()]
    assert (enqueued["name"], enqueued["attributes"]["jobsite.job_count"]) == (
        "enqueue tests.tasks.add",
        3,
    )
    runs = traced_worker()
    assert sorted(s["attributes"]["jobsite.job_id"] for s in runs) == sorted(map(str, ids))
    assert all(s["parent"] == enqueued["context"] for s in runs)


def test_a_workflows_enqueue_is_one_span_its_nodes_first_attempts_are_children_of(
    enqueue_spans, traced_worker
):
    from jobs.workflows import Workflow

    wf = Workflow("traced")
    first = wf.add(tasks.add, 1, 2)
    wf.add(tasks.add, 3, 4, after=[first])
    workflow_id = wf.enqueue()
    [enqueued] = [span_record(s) for s in enqueue_spans.get_finished_spans()]
    assert enqueued["name"] == "enqueue workflow traced"
    assert enqueued["attributes"]["jobsite.workflow_id"] == workflow_id
    assert enqueued["attributes"]["jobsite.job_count"] == 2
    runs = traced_worker()
    assert sorted(s["attributes"]["jobsite.job_id"] for s in runs) == sorted(
        str(n.job_id) for n in wf.nodes
    )
    assert all(s["parent"] == enqueued["context"] for s in runs)


def test_a_schedules_fires_and_run_now_each_make_an_enqueue_span_their_jobs_carry(
    enqueue_spans,
):
    from jobs import schedules
    from tests.test_schedules import PING, rewind, with_schedules

    with with_schedules(PING, SCHEDULE_GRACE_SECONDS=1000):
        schedules.tick()
        rewind("ping", 6)
        schedules.tick()
        fired = list(Job.objects.all())
        now = schedules.trigger("ping")
    spans = [span_record(s) for s in enqueue_spans.get_finished_spans()]
    assert [(s["name"], s["attributes"]["jobsite.schedule"]) for s in spans] == [
        ("enqueue tests.tasks.record", "ping")
    ] * 2
    assert spans[0]["attributes"]["jobsite.job_count"] == len(fired) > 0
    assert all(job.trace_context["traceparent"] for job in fired)
    assert Job.objects.get(id=now.id).trace_context["traceparent"]


def test_a_stored_trace_context_of_any_shape_costs_no_other_attempt_its_span(
    enqueue_spans, traced_worker
):
    ids = tasks.add.enqueue_many([((n, 1), {}) for n in range(4)])
    [enqueued] = [span_record(s) for s in enqueue_spans.get_finished_spans()]
    odd_ones = ["just a string", [1, 2, 3], {"traceparent": 5}]
    for job_id, odd in zip(ids[1:], odd_ones, strict=True):
        Job.objects.filter(id=job_id).update(trace_context=odd)
    runs = {s["attributes"]["jobsite.job_id"]: s for s in traced_worker()}
    assert sorted(runs) == sorted(map(str, ids))  # a span for every attempt
    assert runs[str(ids[0])]["parent"] == enqueued["context"]
    assert all(runs[str(job_id)]["parent"] is None for job_id in ids[1:])


def test_without_a_tracer_provider_an_enqueue_carries_no_trace_context(subprocess_env):
    script = (
        "import django, sys; django.setup()\n"
        "from jobs.models import Job\n"
        "from tests import tasks\n"
        "job = Job.objects.get(id=tasks.add.enqueue(1, 2).id)\n"
        "assert job.trace_context is None, job.trace_context\n"
        "assert 'opentelemetry.sdk' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=subprocess_env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
