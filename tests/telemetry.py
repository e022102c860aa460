"""The real OpenTelemetry SDK and Sentry SDK, recording locally, for the integration tests.

In the test process: an in-memory span exporter. In a worker subprocess (settings module
tests.telemetry_settings): every finished span, and every Sentry envelope, is appended to the
JSON-lines file named by $JOBSITE_TEST_SPANS / $JOBSITE_TEST_SENTRY as the SDKs hand it over.
"""

import json
import os
from pathlib import Path

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from sentry_sdk.transport import Transport


def span_record(span) -> dict:
    def ids(context):
        return None if context is None else [f"{context.trace_id:032x}", f"{context.span_id:016x}"]

    return {
        "name": span.name,
        "context": ids(span.context),
        "parent": ids(span.parent),
        "links": [ids(link.context) for link in span.links],
        "attributes": dict(span.attributes),
        "events": [{"name": e.name, "attributes": dict(e.attributes)} for e in span.events],
        "status": span.status.status_code.name,
    }


class FileSpanExporter(SpanExporter):
    def __init__(self, path):
        self.path = Path(path)

    def export(self, spans):
        with self.path.open("a") as f:
            for span in spans:
                f.write(json.dumps(span_record(span)) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


class RecordingTransport(Transport):
    """Writes each envelope's items (events, check-ins) instead of sending them."""

    def __init__(self, options=None):
        super().__init__(options)
        self.path = Path(os.environ["JOBSITE_TEST_SENTRY"])

    def capture_envelope(self, envelope):
        with self.path.open("a") as f:
            for item in envelope.items:
                payload = item.payload.json
                if payload is not None:
                    f.write(json.dumps({"type": item.type, "payload": payload}) + "\n")

    def flush(self, timeout, callback=None):
        pass


def configure_from_environment():
    """Set the SDKs up as $JOBSITE_TEST_SPANS / $JOBSITE_TEST_SENTRY ask."""
    if os.environ.get("JOBSITE_TEST_SPANS"):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        provider = TracerProvider()
        provider.add_span_processor(
            SimpleSpanProcessor(FileSpanExporter(os.environ["JOBSITE_TEST_SPANS"]))
        )
        trace.set_tracer_provider(provider)
    if os.environ.get("JOBSITE_TEST_SENTRY"):
        import sentry_sdk

        sentry_sdk.init(
            dsn="https://public@sentry.invalid/1",
            transport=RecordingTransport,
        )


def read_lines(path) -> list[dict]:
    path = Path(path)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
