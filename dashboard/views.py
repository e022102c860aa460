"""The console's pages. A request with HX-Request gets the page's fragment; the actions the
pages post to are in `action_views` (one job, one queue) and `bulk_views` (many jobs)."""

import json
from functools import partial

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from jobs import actions, attempt_log, limit_usage, queues
from jobs.models import Job
from jobs.states import CLAIMABLE, JobState

from . import openapi, queries, queue_rows, task_stats, worker_rows
from .access import to_login
from .api_docs import api_docs as read_api_docs
from .audit_log import KNOWN_ACTIONS, AuditFilterForm
from .chart import attempts_chart
from .errors import error_page
from .forms import BULK_CAP, DeadLetterFilterForm, EditRerunForm, JobFilterForm
from .health import no_worker_alert
from .pages import console_page, list_status, render_page
from .permissions import can_view


@console_page
def overview(request):
    now = timezone.now()
    states = queue_rows.state_tallies()
    context = {
        "states": [(state, state.label, count) for state, count in states.items()],
        "running": states[JobState.RUNNING],
        "queues": queue_rows.queue_rows(now, states),
        "workers": worker_rows.worker_counts(),
        "chart": attempts_chart(queries.attempts_per_minute(now)),
    }
    return render_page(request, "dashboard/overview.html", "overview", context)


@console_page
def job_list(request):
    form = JobFilterForm(request.GET)
    page = form.page(queries.jobs_page)
    now = timezone.now()
    context = {
        "form": form,
        "page": page,
        # The "runs at" column only where a row waits for a later moment.
        "shows_runs_at": bool(page) and any(actions.due_later(j, now) for j in page.rows),
        # Only the whole page shows the suggestions, so only it runs these queries.
        "queue_names": partial(queries.distinct_names, "queue_name"),
        "task_names": partial(queries.distinct_names, "task_path"),
    }
    return render_page(
        request, "dashboard/jobs.html", "job-list", context, status=list_status(page)
    )


@console_page
def job_detail(request, job_id):
    job = Job.objects.filter(id=job_id).first()
    if job is None:
        return error_page(request, 404, f"No job has the id {job_id}.")
    return job_page(request, job)


def job_page(request, job, *, edit_form=None, status=200):
    context = {
        "job": job,
        "due_later": actions.due_later(job),
        "held_by": limit_usage.holding(job),
        "paused_queue": _paused_queue(job),
        "lease_lapsed": job.lease_lapsed,
        "attempts": queries.job_attempts(job),
        "logs": attempt_log.read_all(job.id),
        "lineage": queries.job_lineage(job),
        "audit_entries": queries.job_audit(job),
        "edit_form": edit_form or _edit_form_for(job),
        "since_retry": _since_retry(request, job),
    }
    return render_page(request, "dashboard/job_detail.html", "job", context, status=status)


def _paused_queue(job):
    """The pause of the job's queue, when it is what keeps the job (due or not) from a worker."""
    if job.state not in CLAIMABLE:
        return None
    return queues.pause_of(job.queue_name)


def _edit_form_for(job):
    def text(value):
        return json.dumps(value, indent=2, ensure_ascii=False)

    return EditRerunForm(initial={"args": text(job.args), "kwargs": text(job.kwargs)})


@console_page
def dead_letter_list(request):
    form = DeadLetterFilterForm(request.GET)
    listed = form.page(queries.dead_letter_list)
    context = {"form": form, "page": listed.page if listed else None, "bulk_cap": BULK_CAP}
    if listed is not None:
        context |= {"groups": listed.groups, "matching": listed.matching}
    status = list_status(context["page"])
    return render_page(
        request, "dashboard/dead_letters.html", "dead-letters", context, status=status
    )


@console_page
def queue_list(request):
    context = {"queues": queue_rows.queue_statuses(timezone.now())}
    return render_page(request, "dashboard/queues.html", "queues", context)


@console_page
def worker_list(request):
    context = {
        "workers": worker_rows.worker_rows(timezone.now()),
        "lease_seconds": worker_rows.lease_seconds(),
    }
    return render_page(request, "dashboard/workers.html", "workers", context)


@console_page
def task_list(request):
    context = {"tasks": task_stats.task_list()}
    return render_page(request, "dashboard/tasks.html", "tasks", context)


@console_page
def task_detail(request, task_path):
    # No stored task path holds a NUL (PostgreSQL refuses one in a query).
    detail = None if "\x00" in task_path else task_stats.task_detail(task_path)
    if detail is None:
        return error_page(request, 404, f"No job of the task {task_path!r} is stored.")
    context = {"task_path": task_path, "detail": detail}
    return render_page(request, "dashboard/task_detail.html", "task", context)


@console_page
def audit(request):
    form = AuditFilterForm(request.GET)
    page = form.page()
    context = {"form": form, "page": page, "known_actions": KNOWN_ACTIONS}
    return render_page(
        request, "dashboard/audit.html", "audit-log", context, status=list_status(page)
    )


@console_page
def api_docs(request):
    # The API lives wherever the host project mounted the console (as its document says).
    base = reverse("dashboard:api:job-list").removesuffix("/jobs")
    context = {"docs": read_api_docs(openapi.document(base))}
    return render(request, "dashboard/api_docs.html", context)


@console_page
def worker_banner(request):
    context = {"alert": no_worker_alert()}
    return render(request, "dashboard/includes/worker_banner.html", context)


@require_GET
def no_access(request):
    if can_view(request.user):
        return redirect("dashboard:overview")
    if not request.user.is_authenticated:
        return to_login(request, reverse("dashboard:overview"))
    return render(request, "dashboard/no_access.html", status=403)


def _since_retry(request, job) -> str:
    """What happened to `job` after this operator's retry, when it is no longer just waiting."""
    if job.state in (JobState.PENDING, JobState.SCHEDULED):
        return ""
    tag = f"retried-{job.id}"
    if not any(tag in message.extra_tags.split() for message in messages.get_messages(request)):
        return ""
    if job.state == JobState.RUNNING:
        return f"Since then a worker took it: attempt {job.attempt} is running."
    outcome = SINCE_RETRY_WORDS.get(job.state, f"it is {JobState(job.state).label.lower()}")
    return f"Since then attempt {job.attempt} ran: {outcome}."


# What became of a retried job, by the state it is in when its page is shown.
SINCE_RETRY_WORDS = {
    JobState.SUCCEEDED: "it succeeded",
    JobState.RETRYING: "it failed and waits for its next attempt",
    JobState.DEAD_LETTER: "it failed again and is a dead letter",
    JobState.CANCELLED: "it was cancelled",
}
