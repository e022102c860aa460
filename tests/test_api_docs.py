"""The API's documentation page, drawn from the OpenAPI document the API serves."""

import re

import django
import pytest

from dashboard import openapi
from dashboard.api_docs import api_docs, type_text

pytestmark = pytest.mark.django_db


def test_the_page_documents_every_operation_and_schema_of_the_served_document(viewer_client):
    served = viewer_client.get("/api/v1/openapi.json").json()
    html = viewer_client.get("/api/docs/").content.decode()
    for path, item in served["paths"].items():
        for method in item:
            assert (
                f">{method.upper()}</span> <code>{served['servers'][0]['url']}{path}</code>" in html
            )
            assert item[method]["summary"] in html.replace("&#x27;", "'")
    for name in served["components"]["schemas"]:
        assert f'id="schema-{name}"' in html
    # A response names its schema and links to it.
    assert '<a class="mono" href="#schema-JobList">JobList</a>' in html


def test_the_page_needs_no_script_or_style_of_its_own_and_keeps_the_csp(viewer_client):
    response = viewer_client.get("/api/docs/")
    html = response.content.decode()
    if django.VERSION >= (6, 0):  # Django's own CSP header is new in 6.0
        assert "style-src 'self'" in response.headers["Content-Security-Policy"]
        assert (
            response.headers["Content-Security-Policy"]
            == viewer_client.get("/").headers["Content-Security-Policy"]
        )
    scripts = re.findall(r"<script[^>]*>", html)
    assert all('src="/static/dashboard/' in tag for tag in scripts)
    assert "<style" not in html and " style=" not in html
    assert not re.search(r'(src|href)="https?://', html)


def test_the_page_is_linked_from_the_console_navigation(viewer_client):
    html = viewer_client.get("/").content.decode()
    assert '<a href="/api/docs/">API</a>' in html
    assert '<a href="/audit/">Audit</a>' in html


def test_schemas_read_as_words():
    assert type_text({"type": "string", "format": "uuid", "nullable": True}).text == (
        "string (uuid) or null"
    )
    listed = type_text({"type": "array", "items": {"$ref": "#/components/schemas/Job"}})
    assert (listed.text, listed.ref) == ("array of Job", "Job")
    assert type_text({"type": "integer", "minimum": 1, "maximum": 100}).text == (
        "integer; ≥ 1, ≤ 100"
    )


def test_every_operation_of_the_document_is_read_in_path_order():
    docs = api_docs(openapi.document("/ops/api/v1"))
    assert docs.base == "/ops/api/v1"
    assert [op.path for op in docs.operations] == sorted(op.path for op in docs.operations)
    rerun = next(op for op in docs.operations if op.path == "/jobs/{job_id}/rerun")
    assert [field.name for field in rerun.body] == ["args", "kwargs"]
    assert {r.status for r in rerun.responses} >= {"201", "409", "404"}
