"""The console's pages and actions. A request with HX-Request gets the page's fragment."""

import json
from collections import Counter
from functools import partial
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from jobs import actions, attempt_log, bulk, limit_usage, queues
from jobs.models import Job
from jobs.states import JobState

from . import buttons as action_buttons
from . import openapi, queries, task_stats
from .access import operator_required
from .api_docs import api_docs as read_api_docs
from .audit_log import KNOWN_ACTIONS, AuditFilterForm
from .chart import attempts_chart
from .errors import error_page
from .forms import (
    BULK_CAP,
    BulkActionForm,
    BulkRetryForm,
    DeadLetterFilterForm,
    EditRerunForm,
    JobFilterForm,
)
from .health import no_worker_alert
from .pages import console_page, list_status, render_page
from .permissions import can_view
from .redirects import safe_next

SOURCE = "dashboard"
# How long a Rerun form's token is remembered, so resubmitting that form cannot run twice.


# Pages.


@console_page
def overview(request):
    now = timezone.now()
    states = queries.state_tallies()
    context = {
        "states": [(state, state.label, count) for state, count in states.items()],
        "running": states[JobState.RUNNING],
        "queues": queries.queue_rows(now, states),
        "workers": queries.worker_counts(),
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
    return _job_page(request, job)


def _job_page(request, job, *, edit_form=None, status=200):
    context = {
        "job": job,
        "due_later": actions.due_later(job),
        "held_by": limit_usage.holding(job),
        "attempts": queries.job_attempts(job),
        "logs": attempt_log.read_all(job.id),
        "lineage": queries.job_lineage(job),
        "audit_entries": queries.job_audit(job),
        "edit_form": edit_form or _edit_form_for(job),
        "since_retry": _since_retry(request, job),
    }
    return render_page(request, "dashboard/job_detail.html", "job", context, status=status)


def _edit_form_for(job):
    def text(value):
        return json.dumps(value, indent=2, ensure_ascii=False)

    return EditRerunForm(initial={"args": text(job.args), "kwargs": text(job.kwargs)})


@console_page
def dead_letter_list(request):
    form = DeadLetterFilterForm(request.GET)
    context = {"form": form, "page": form.page(queries.dead_letter_page), "bulk_cap": BULK_CAP}
    if context["page"] is not None:
        groups = queries.dead_letter_groups(form.filters)
        context |= {"groups": groups, "matching": queries.dead_letter_total(form.filters, groups)}
    status = list_status(context["page"])
    return render_page(
        request, "dashboard/dead_letters.html", "dead-letters", context, status=status
    )


@console_page
def queue_list(request):
    context = {"queues": queries.queue_statuses(timezone.now())}
    return render_page(request, "dashboard/queues.html", "queues", context)


@console_page
def worker_list(request):
    context = {
        "workers": queries.worker_rows(timezone.now()),
        "lease_seconds": queries.lease_seconds(),
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
        return redirect_to_login(reverse("dashboard:overview"))
    return render(request, "dashboard/no_access.html", status=403)


# Actions: each calls jobs.actions, reports its message and goes back where it came from.
# Under HTMX the redirect is followed by the same request, which then gets the fragment.


def _retry_report(request, result, job_id):
    """A retry names and links the job it put back in line; the job's page then says what
    became of it since, when a worker has already taken it on (see `_since_retry`)."""
    if result.changed and result.job is not None:
        url = reverse("dashboard:job", args=[job_id])
        text = format_html(
            '{}: <a href="{}">{} {}</a>',
            result.message,
            url,
            result.job.task_path.rpartition(".")[2],
            str(job_id)[:8],
        )
        messages.success(request, text, extra_tags=f"retried-{job_id}")
        return _back(request, job_id)
    return _report(request, result, job_id)


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


def _job_action(act, *, ask_first=None):
    """The view of an action on one job; with `ask_first` (its button), a form that asks first
    gets the confirmation page."""

    @require_POST
    @operator_required
    def view(request, job_id):
        if ask_first and (asking := _ask_first(request, ask_first, job_id)):
            return asking
        result = act(job_id, user=request.user, source=SOURCE)
        if act is actions.retry_job:
            return _retry_report(request, result, job_id)
        return _report(request, result, job_id)

    return view


retry = _job_action(actions.retry_job)
cancel = _job_action(actions.cancel_job, ask_first=action_buttons.CANCEL)
run_now = _job_action(actions.run_now_job)


@require_POST
@operator_required
def rerun(request, job_id):
    if asking := _ask_first(request, action_buttons.RERUN, job_id):
        return asking
    # The form carries a one-time token: the same press sent twice reruns once, across processes.
    token = request.POST.get("token", "")[:64]
    key = f"dashboard:{request.user.pk}:{token}" if token else ""
    arguments = {}
    if request.POST.get("edit"):
        # Edit and rerun: the new arguments, shown back with their errors when they are refused.
        job = Job.objects.filter(id=job_id).first()
        if job is None:
            return error_page(request, 404, f"No job has the id {job_id}.")
        form = EditRerunForm(request.POST)
        if form.is_valid():
            arguments = {"args": form.cleaned_data["args"], "kwargs": form.cleaned_data["kwargs"]}
            try:
                result = actions.rerun_job(
                    job_id, user=request.user, source=SOURCE, request_key=key, **arguments
                )
            except (TypeError, ValueError, RecursionError) as exc:
                form.add_error(None, str(exc) or "These arguments cannot be stored.")
        if form.errors:
            # The page again with the errors by their fields, as a form page answers (200).
            return _job_page(request, job, edit_form=form)
    else:
        result = actions.rerun_job(job_id, user=request.user, source=SOURCE, request_key=key)
    if not result.changed and result.new_job is not None:
        messages.warning(request, _already_rerun(result.new_job.id))
        return _back(request, job_id)
    return _report(request, result, job_id)


@require_POST
@operator_required
def discard(request, job_id):
    if asking := _ask_first(request, action_buttons.DISCARD, job_id):
        return asking
    result = actions.discard_job(job_id, user=request.user, source=SOURCE)
    if result.job is None:
        return error_page(request, 404, f"No job has the id {job_id}.")
    if not result.changed:
        return _report(request, result, job_id)
    messages.success(request, f"job {str(job_id)[:8]} discarded with its attempts")
    target = _next(request)
    if target is None or str(job_id) in target:
        # The job's own page is gone with it.
        target = reverse("dashboard:jobs")
    if request.htmx:
        return HttpResponseClientRedirect(target)
    return HttpResponseRedirect(target)


@require_POST
@operator_required
def queue_pause(request, name):
    return _queue_action(request, name, queues.pause, "paused", "was already paused")


@require_POST
@operator_required
def queue_resume(request, name):
    return _queue_action(request, name, queues.resume, "resumed", "was not paused")


def _queue_action(request, name, act, done, unchanged):
    try:
        changed = act(name, user=request.user, source=SOURCE)
    except ValueError as exc:
        messages.error(request, str(exc))
    else:
        (messages.success if changed else messages.info)(
            request, f"queue {name} {done if changed else unchanged}"
        )
    return redirect("dashboard:queues")


@require_POST
@operator_required
def bulk_action(request):
    """Step one shows how many jobs the filter matches; step two (confirm) acts, in batches."""
    form = BulkActionForm(request.POST)
    if not form.is_valid():
        return render(request, "dashboard/bulk_action.html", {"form": form}, status=400)
    action, filters = form.cleaned_data["action"], form.filters
    jobs = queries.filtered_jobs(**filters)
    back = _list_url(filters)
    if not form.cleaned_data["confirm"]:
        context = {
            "form": form,
            "action": action,
            "filters": filters,
            "filter_words": _filter_words(filters),
            "matched": bulk.apply(action, jobs, dry_run=True).matched,
            "back": back,
            "nav_here": _nav_of(filters),
        }
        return render(request, "dashboard/bulk_action.html", context)
    return StreamingHttpResponse(
        _bulk_progress(request, action, jobs, filters, back), content_type="text/html"
    )


def _bulk_progress(request, action, jobs, filters, back):
    """The result page, streamed: one line per batch as it is applied, then the totals."""
    context = {
        "action": action,
        "filters": filters,
        "filter_words": _filter_words(filters),
        "back": back,
        "after": _after_bulk_url(action, filters),
        "request": request,
        "nav_here": _nav_of(filters),
    }
    page = render_to_string("dashboard/bulk_progress.html", context, request=request)
    head, rest = page.split("<!-- progress -->")
    between, tail = rest.split("<!-- done -->")
    yield head
    result = bulk.BulkResult(matched=0, applied=0)
    batches = bulk.run(
        action,
        jobs,
        user=request.user,
        source=SOURCE,
        description=queries.describe_filter(filters),
    )
    for result in batches:
        yield format_html(
            "<li>{} jobs done, {} changed</li>\n", f"{result.matched:,}", f"{result.applied:,}"
        )
    yield between
    yield render_to_string("dashboard/bulk_done.html", {**context, "result": result})
    yield tail


@require_POST
@operator_required
def bulk_retry(request):
    form = BulkRetryForm(request.POST)
    filters = DeadLetterFilterForm(request.POST)
    if not (form.is_valid() and filters.is_valid()):
        return render(
            request, "dashboard/bulk_retry.html", {"form": form, "filters": filters}, status=400
        )
    if form.cleaned_data["scope"] == BulkRetryForm.MATCHING:
        ids = queries.dead_letter_ids(filters.filters, cap=BULK_CAP)
    else:
        ids = form.cleaned_data["ids"]
    back = reverse("dashboard:dead_letters") + _query(filters.filters)
    if not ids:
        messages.info(request, "Nothing to retry: tick the rows to retry first.")
        return redirect(back)
    if not form.cleaned_data["confirm"]:
        context = {
            "ids": ids,
            "filters": filters.filters,
            "back": back,
            "capped": form.cleaned_data["scope"] == BulkRetryForm.MATCHING and len(ids) == BULK_CAP,
        }
        return render(request, "dashboard/bulk_retry.html", context)
    results = [actions.retry_job(job_id, user=request.user, source=SOURCE) for job_id in ids]
    messages.success(request, _bulk_summary(results))
    return redirect(back)


# Helpers of the actions.


def _ask_first(request, button, job_id):
    """The page asking to confirm, when the form came with confirm=ask (no script ran).

    dashboard.js asks in a dialog and posts confirm=yes; a POST without the field (scripts,
    tests) acts at once, as the contract says.
    """
    if request.POST.get("confirm") != "ask":
        return None
    job = Job.objects.filter(id=job_id).first()
    if job is None:
        return error_page(request, 404, f"No job has the id {job_id}.")
    carried = [(name, request.POST[name]) for name in ("next", "token") if request.POST.get(name)]
    context = {"button": button, "job": job, "carried": carried, "back": _back_url(request, job_id)}
    return render(request, "dashboard/confirm.html", context)


def _report(request, result, job_id):
    if result.job is None:
        return error_page(request, 404, f"No job has the id {job_id}.")
    if result.new_job is not None:
        url = reverse("dashboard:job", args=[result.new_job.id])
        text = format_html('{}: <a href="{}">open the new run</a>', result.message, url)
    elif result.held_by is not None:
        url = reverse("dashboard:job", args=[result.held_by])
        text = format_html('{}: <a href="{}">open that job</a>', result.message, url)
    else:
        text = result.message
    (messages.success if result.changed else messages.warning)(request, text)
    return _back(request, job_id)


def _back(request, job_id):
    return HttpResponseRedirect(_back_url(request, job_id))


def _back_url(request, job_id):
    return _next(request) or reverse("dashboard:job", args=[job_id])


def _next(request):
    """The page a form came from (its `next` field), when it is one of ours."""
    return safe_next(request, request.POST.get("next"))


def _list_url(filters: dict) -> str:
    """The list a bulk action's filter came from: dead letters, or the job list."""
    if filters.get("state") == JobState.DEAD_LETTER:
        rest = {k: v for k, v in filters.items() if k != "state"}
        return reverse("dashboard:dead_letters") + _query(rest)
    return reverse("dashboard:jobs") + _query(filters)


FILTER_LABELS = {
    "state": "state",
    "queue": "queue",
    "task": "task",
    "error": "error type",
    "q": "search",
}


def _filter_words(filters: dict) -> list[tuple[str, str]]:
    """A bulk action's filter as an operator reads it: ("state", "Dead letter"), ...."""
    return [
        (FILTER_LABELS.get(name, name), JobState(value).label if name == "state" else value)
        for name, value in filters.items()
    ]


def _nav_of(filters: dict) -> str:
    """The console page a bulk action on `filters` came from, for the navigation."""
    return "dead_letters" if filters.get("state") == JobState.DEAD_LETTER else "jobs"


def _after_bulk_url(action: str, filters: dict) -> str | None:
    """Where the jobs a bulk action changed can be seen (discarded ones are gone)."""
    rest = {k: v for k, v in filters.items() if k not in ("state", "error")}
    if action == "retry":
        return reverse("dashboard:jobs") + _query(rest)
    if action == "cancel":
        return reverse("dashboard:jobs") + _query({"state": JobState.CANCELLED, **rest})
    return None


def _already_rerun(new_id):
    url = reverse("dashboard:job", args=[new_id])
    return format_html('already rerun from this page: <a href="{}">open the new run</a>', url)


def _bulk_summary(results) -> str:
    changed = sum(1 for r in results if r.changed)
    parts = [f"{changed:,} job{'s' if changed != 1 else ''} put back in line"]
    unchanged = Counter(r.message for r in results if not r.changed)
    parts += [f"{n:,} not changed ({message})" for message, n in unchanged.most_common()]
    return "; ".join(parts)


def _query(filters: dict) -> str:
    return f"?{urlencode(filters)}" if filters else ""
