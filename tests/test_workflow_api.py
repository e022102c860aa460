"""The workflow API (dashboard.workflow_api): list, read with nodes and `after`, cancel."""

import pytest

from jobs.models import AuditEntry, Job
from jobs.states import JobState
from jobs.workflows import Batch, Workflow
from tests import tasks

pytestmark = pytest.mark.django_db


def diamond():
    wf = Workflow("import-42")
    top = wf.add(tasks.node, "top", name="fetch")
    left = wf.add(tasks.node, "left", after=[top], name="parse")
    right = wf.add(tasks.node, "right", after=[top], name="load")
    wf.add(tasks.join, "last", after=[left, right], name="report")
    return wf.enqueue(), top


def test_the_list_shows_each_workflow_with_its_progress(client, reader_headers):
    workflow_id, _ = diamond()
    batch_id = Batch("resize", on_finish=tasks.batch_callback).enqueue()
    answer = client.get("/api/v1/workflows", headers=reader_headers)
    assert answer.status_code == 200
    results = {w["id"]: w for w in answer.json()["results"]}
    assert results[workflow_id]["name"] == "import-42"
    assert (results[workflow_id]["state"], results[workflow_id]["done"]) == ("pending", 0)
    assert results[workflow_id]["total"] == 4
    assert results[workflow_id]["counts"] == {"pending": 1, "scheduled": 3}
    assert results[batch_id]["kind"] == "batch"
    assert answer.json()["next_cursor"] is None


def test_the_list_pages_with_a_cursor(client, reader_headers):
    for _ in range(3):
        diamond()
    first = client.get("/api/v1/workflows?limit=2", headers=reader_headers).json()
    assert len(first["results"]) == 2 and first["next_cursor"]
    rest = client.get(
        f"/api/v1/workflows?limit=2&cursor={first['next_cursor']}", headers=reader_headers
    ).json()
    assert len(rest["results"]) == 1
    assert client.get("/api/v1/workflows?cursor=x", headers=reader_headers).status_code == 400


def test_a_workflow_shows_its_nodes_with_their_after_lists(client, reader_headers):
    workflow_id, _ = diamond()
    answer = client.get(f"/api/v1/workflows/{workflow_id}", headers=reader_headers)
    assert answer.status_code == 200
    nodes = {n["node_name"]: n for n in answer.json()["nodes"]}
    assert set(nodes) == {"fetch", "parse", "load", "report"}
    assert nodes["fetch"]["after"] == []
    assert nodes["parse"]["after"] == [nodes["fetch"]["id"]]
    assert sorted(nodes["report"]["after"]) == sorted([nodes["parse"]["id"], nodes["load"]["id"]])
    assert {n["workflow_id"] for n in nodes.values()} == {workflow_id}
    assert [nodes[n]["layer"] for n in ("fetch", "parse", "load", "report")] == [0, 1, 1, 2]


def test_a_job_of_the_api_carries_its_workflow_id(client, reader_headers):
    workflow_id, top = diamond()
    job = client.get(f"/api/v1/jobs/{top.job_id}", headers=reader_headers).json()
    assert job["workflow_id"] == workflow_id
    lone = tasks.add.enqueue(1, 2)
    assert (
        client.get(f"/api/v1/jobs/{lone.id}", headers=reader_headers).json()["workflow_id"] is None
    )


def test_cancel_ends_every_unfinished_node(client, operator_headers):
    workflow_id, _ = diamond()
    answer = client.post(f"/api/v1/workflows/{workflow_id}/cancel", headers=operator_headers)
    assert answer.status_code == 200
    assert (answer.json()["changed"], answer.json()["state"]) == (4, "cancelled")
    states = Job.objects.filter(workflow_id=workflow_id).values_list("state", flat=True)
    assert set(states) == {JobState.CANCELLED}
    entry = AuditEntry.objects.get(action="cancel workflow")
    assert (entry.subject, entry.source, entry.username) == (workflow_id, "api", "operator")


def test_cancel_needs_the_operate_permission_and_a_known_workflow(
    client, reader_headers, operator_headers
):
    workflow_id, _ = diamond()
    refused = client.post(f"/api/v1/workflows/{workflow_id}/cancel", headers=reader_headers)
    assert refused.status_code == 403
    assert not Job.objects.filter(state=JobState.CANCELLED).exists()
    for unknown in ("00000000-0000-0000-0000-000000000000", "not-an-id"):
        answer = client.post(f"/api/v1/workflows/{unknown}/cancel", headers=operator_headers)
        assert answer.status_code == 404
        assert client.get(f"/api/v1/workflows/{unknown}", headers=reader_headers).status_code == 404


def test_retry_failed_puts_failed_nodes_back_and_their_followers_wait(client, operator_headers):
    workflow_id, top = diamond()
    client.post(f"/api/v1/workflows/{workflow_id}/cancel", headers=operator_headers)
    answer = client.post(f"/api/v1/workflows/{workflow_id}/retry-failed", headers=operator_headers)
    assert answer.status_code == 200 and answer.json()["changed"] == 4
    assert answer.json()["counts"] == {"pending": 1, "scheduled": 3}
