"""OpenTelemetry spans for enqueues and attempts (the `jobsite[otel]` extra).

Active only when the opentelemetry API is installed and the project has set a tracer
provider; otherwise each hook is one check and nothing more.

An enqueue makes a span `enqueue <task path>` and stores its trace context (W3C traceparent,
through the global propagator) in the job row. Each attempt makes a span `run <task path>`:
the first attempt's is a child of the enqueue's span, later attempts start their own trace
and link to it (a retry an hour later is its own operation, caused by the enqueue). The
attempt span is made by the worker from the attempt's own start and end times once its
outcome is written; a failure is recorded on it as an exception event with ERROR status.
"""

from contextlib import contextmanager

try:
    from opentelemetry import context, propagate, trace
except ImportError:  # the otel extra is not installed
    trace = None  # type: ignore[assignment]

TRACER = "jobsite"


def active() -> bool:
    """Whether spans go anywhere: the API is installed and a tracer provider is set."""
    return trace is not None and not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider
    )


@contextmanager
def enqueue_span(row: dict, *, count: int = 1):
    """Around an enqueue of `row` (a new job's values, or a batch's template of `count`
    jobs): the span, and the row's trace_context set to carry it."""
    if not active():
        yield
        return
    path = row["task_path"]
    attributes = {"jobsite.queue": row["queue_name"], "jobsite.task": path}
    if count == 1:
        attributes["jobsite.job_id"] = str(row["id"])
    else:
        attributes["jobsite.job_count"] = count
    with _producer_span(f"enqueue {path}", attributes, [row]):
        yield


@contextmanager
def enqueue_rows_span(rows: list[dict], *, name: str, attributes: dict):
    """Around an enqueue of `rows` that are no one task's batch (a workflow's nodes, a
    schedule's fire times): one span, `name`, whose context every row carries."""
    if not active() or not rows:
        yield
        return
    with _producer_span(name, {**attributes, "jobsite.job_count": len(rows)}, rows):
        yield


@contextmanager
def _producer_span(name: str, attributes: dict, rows: list[dict]):
    tracer = trace.get_tracer(TRACER)
    with tracer.start_as_current_span(name, kind=trace.SpanKind.PRODUCER, attributes=attributes):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        for row in rows:
            row["trace_context"] = carrier or None
        yield


def record_attempts(settled) -> None:
    """One span per attempt in `settled` ((Finish, Claimed) pairs whose outcome was written)."""
    if not active():
        return
    ran = [(f, c) for f, c in settled if f.outcome is not None and c is not None]
    if not ran:
        return
    from .models import Job

    carriers = dict(
        Job.objects.filter(id__in=[f.job_id for f, _ in ran], trace_context__isnull=False)
        .values_list("id", "trace_context")
        .iterator()
    )
    tracer = trace.get_tracer(TRACER)
    for f, claimed in ran:
        _attempt_span(tracer, f, claimed, _carrier(carriers.get(f.job_id)))


def _carrier(stored):
    """A job's stored trace context as propagators read it: a dict of texts, or None. A row
    holding anything else (written by hand, or by another tool) gets a span of its own rather
    than costing the spans of the attempts reported with it."""
    if not isinstance(stored, dict) or not stored:
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in stored.items()):
        return None
    return stored


def _attempt_span(tracer, f, claimed, carrier):
    enqueued = propagate.extract(carrier) if carrier else None
    parent, links = context.Context(), []
    if enqueued is not None:
        span_context = trace.get_current_span(enqueued).get_span_context()
        if span_context.is_valid:
            if claimed.attempt == 1:
                parent = enqueued
            else:
                links = [trace.Link(span_context)]
    span = tracer.start_span(
        f"run {claimed.task_path}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "jobsite.job_id": str(f.job_id),
            "jobsite.attempt": claimed.attempt,
            "jobsite.queue": claimed.queue_name,
            "jobsite.outcome": f.outcome,
        },
        links=links,
        start_time=_nanoseconds(f.started_at),
    )
    if f.error_type:
        # What span.record_exception writes, from the attempt's recorded error (the exception
        # itself lived in the executor process).
        span.add_event(
            "exception",
            {
                "exception.type": f.error_type,
                "exception.message": f.error_message,
                "exception.stacktrace": f.error_traceback,
            },
            timestamp=_nanoseconds(f.finished_at),
        )
        span.set_status(trace.Status(trace.StatusCode.ERROR, f"{f.error_type}: {f.error_message}"))
    span.end(end_time=_nanoseconds(f.finished_at))


def _nanoseconds(moment):
    return int(moment.timestamp() * 1_000_000_000) if moment else None
