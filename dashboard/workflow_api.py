"""The JSON API of workflows and batches: list them, read one with its nodes, cancel one."""

from django.http import JsonResponse

from jobs import workflows
from jobs.models import Workflow

from .api import decode_cursor, find_by_id, parse_limit, refuse_parameters, single_values
from .auth import api_view
from .columns import API_COLUMNS
from .pagination import CREATED, keyset_page
from .serializers import error, job_json, page_response

SOURCE = "api"


def _time(value):
    return value.isoformat() if value is not None else None


def workflow_json(summary: workflows.Summary) -> dict:
    record = summary.record
    return {
        "id": str(record.id),
        "name": record.name,
        "kind": record.kind,
        "state": summary.state,
        "counts": summary.counts,
        "done": summary.done,
        "total": summary.total,
        "created_at": _time(record.created_at),
        "started_at": _time(summary.started_at),
        "finished_at": _time(summary.finished_at),
        "duration_seconds": summary.duration.total_seconds() if summary.duration else None,
    }


def workflow_detail_json(summary: workflows.Summary) -> dict:
    graph = workflows.graph(summary.record.id, columns=API_COLUMNS)
    nodes = [
        {**job_json(node), "after": [str(u) for u in node.after], "layer": node.layer}
        for node in graph.nodes
    ]
    return {**workflow_json(summary), "nodes": nodes}


def no_such_workflow():
    return error(404, "no such workflow")


@api_view("GET")
def workflow_list(request):
    values = single_values(request.GET, ("limit", "cursor"))
    cursor = values.get("cursor")
    page = keyset_page(
        Workflow.objects.all(),
        order=CREATED,
        cursor=decode_cursor(cursor) if cursor is not None else None,
        limit=parse_limit(values.get("limit")),
    )
    return page_response([workflow_json(s) for s in workflows.summaries(page.rows)], page)


@api_view("GET")
def workflow_detail(request, workflow_id):
    refuse_parameters(request)
    record = find_by_id(Workflow, workflow_id)
    if record is None:
        return no_such_workflow()
    return JsonResponse(workflow_detail_json(workflows.summaries([record])[0]))


@api_view("POST", operate=True)
def cancel(request, workflow_id):
    return _act(request, workflow_id, workflows.cancel)


@api_view("POST", operate=True)
def retry_failed(request, workflow_id):
    return _act(request, workflow_id, workflows.retry_failed)


def _act(request, workflow_id, action):
    """200 with the workflow and how many nodes the action changed (0 is no error)."""
    refuse_parameters(request)
    record = find_by_id(Workflow, workflow_id)
    if record is None:
        return no_such_workflow()
    changed = action(record.id, user=request.user, source=SOURCE)
    return JsonResponse({**workflow_json(workflows.summaries([record])[0]), "changed": changed})
