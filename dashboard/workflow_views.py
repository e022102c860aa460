"""The console's workflow pages: the list of workflows and batches, one workflow's graph, and
its Cancel workflow / Retry failed nodes actions."""

from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from jobs import workflows
from jobs.models import Workflow

from . import flash
from .access import operator_required
from .errors import error_page
from .forms import ListFilterForm
from .pages import console_page, render_page
from .pagination import CREATED, keyset_page
from .permissions import can_operate
from .workflow_graph import GRAPH_LIMIT, draw, layer_counts

SOURCE = "dashboard"
# Node columns the graph reads (no arguments, return values or tracebacks).
NODE_COLUMNS = ("id", "task_path", "state", "node_name", "enqueued_at", "workflow_id")


class WorkflowPageForm(ListFilterForm):
    """Only the paging of the list (the filters of the job lists do not apply)."""

    field_order = ["cursor", "limit"]


@console_page
def workflow_list(request):
    form = WorkflowPageForm(request.GET)
    page = None
    if form.is_valid():
        data = form.cleaned_data
        page = keyset_page(
            Workflow.objects.all(),
            order=CREATED,
            cursor=data["cursor"],
            limit=data["limit"],
        )
    context = {
        "page": page,
        "rows": workflows.summaries(page.rows) if page else [],
        "form": form,
    }
    status = 200 if page is not None else 400
    return render_page(request, "dashboard/workflows.html", "workflows", context, status=status)


@console_page
def workflow_detail(request, workflow_id):
    record = Workflow.objects.filter(id=workflow_id).first()
    if record is None:
        return error_page(request, 404, f"No workflow has the id {workflow_id}.")
    summary = workflows.summaries([record])[0]
    graph = workflows.graph(record.id, columns=NODE_COLUMNS)
    drawn = len(graph.nodes) <= GRAPH_LIMIT
    context = {
        "summary": summary,
        "workflow": record,
        "drawing": draw(graph) if drawn else None,
        "layers": None if drawn else layer_counts(graph),
        "graph_limit": GRAPH_LIMIT,
        "can_operate": can_operate(request.user),
        "cancel_question": CANCEL_QUESTION,
    }
    return render_page(request, "dashboard/workflow_detail.html", "workflow", context)


# Asked before Cancel workflow acts: by dashboard.js in a dialog, else on a page of its own.
CANCEL_QUESTION = (
    "Every unfinished node is cancelled, and running ones are asked to stop. Retry failed "
    "nodes puts them back in line."
)


@require_POST
@operator_required
def cancel(request, workflow_id):
    if request.POST.get("confirm") == "ask":  # no script ran: ask on a page
        record = Workflow.objects.filter(id=workflow_id).first()
        if record is None:
            return error_page(request, 404, f"No workflow has the id {workflow_id}.")
        context = {
            "workflow": record,
            "summary": workflows.summaries([record])[0],
            "question": CANCEL_QUESTION,
        }
        return render(request, "dashboard/workflow_confirm.html", context)
    return _act(
        request,
        workflow_id,
        workflows.cancel,
        done="{n} nodes cancelled or asked to stop",
        none="no unfinished node to cancel",
    )


@require_POST
@operator_required
def retry_failed(request, workflow_id):
    return _act(
        request,
        workflow_id,
        workflows.retry_failed,
        done="{n} failed nodes put back in line",
        none="no failed node to retry",
    )


def _act(request, workflow_id, action, *, done: str, none: str):
    """Run `action` on the workflow, say how many nodes it changed (`done`, `{n}` for the number)
    or that it changed none, and go back to the workflow's page."""
    n = action(workflow_id, user=request.user, source=SOURCE)
    if n:
        flash.success(request, done.format(n=n))
    else:
        flash.warning(request, none)
    return redirect("dashboard:workflow", workflow_id=workflow_id)
