"""The console's pages and actions. A request with HX-Request gets the page's fragment."""

from collections import Counter
from functools import partial
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from jobs import actions
from jobs.models import Job
from jobs.states import JobState

from . import queries
from .access import operator_required, staff_required
from .buttons import job_buttons
from .chart import attempts_chart
from .forms import BULK_CAP, BulkRetryForm, DeadLetterFilterForm, JobFilterForm
from .permissions import can_view

SOURCE = "dashboard"
# How long a Rerun form's token is remembered, so resubmitting that form cannot run twice.


# Pages.


@require_GET
@staff_required
@vary_on_headers("HX-Request")
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
    template = "dashboard/overview.html"
    if request.htmx:
        template += "#overview"
    return render(request, template, context)


@require_GET
@staff_required
@vary_on_headers("HX-Request")
def job_list(request):
    form = JobFilterForm(request.GET)
    page = None
    if form.is_valid():
        page = queries.jobs_page(
            form.filters, cursor=form.cleaned_data["cursor"], limit=form.cleaned_data["limit"]
        )
    context = {
        "form": form,
        "page": page,
        # Only the whole page shows the suggestions, so only it runs these queries.
        "queue_names": partial(queries.distinct_names, "queue_name"),
        "task_names": partial(queries.distinct_names, "task_path"),
    }
    template = "dashboard/jobs.html"
    if request.htmx:
        template += "#job-list"
    return render(request, template, context, status=200 if page else 400)


@require_GET
@staff_required
@vary_on_headers("HX-Request")
def job_detail(request, job_id):
    job = get_object_or_404(Job, id=job_id)
    context = {
        "job": job,
        "attempts": queries.job_attempts(job),
        "lineage": queries.job_lineage(job),
        "audit_entries": queries.job_audit(job),
        "buttons": job_buttons(job, request.user),
    }
    template = "dashboard/job_detail.html"
    if request.htmx:
        template += "#job"
    return render(request, template, context)


@require_GET
@staff_required
@vary_on_headers("HX-Request")
def dead_letter_list(request):
    form = DeadLetterFilterForm(request.GET)
    context = {"form": form, "page": None, "bulk_cap": BULK_CAP}
    if form.is_valid():
        groups = queries.dead_letter_groups(form.filters)
        context |= {
            "groups": groups,
            "matching": queries.dead_letter_total(form.filters, groups),
            "page": queries.dead_letter_page(
                form.filters, cursor=form.cleaned_data["cursor"], limit=form.cleaned_data["limit"]
            ),
        }
    template = "dashboard/dead_letters.html"
    if request.htmx:
        template += "#dead-letters"
    return render(request, template, context, status=200 if context["page"] else 400)


@require_GET
@staff_required
@vary_on_headers("HX-Request")
def worker_list(request):
    context = {
        "workers": queries.worker_rows(timezone.now()),
        "lease_seconds": queries.lease_seconds(),
    }
    template = "dashboard/workers.html"
    if request.htmx:
        template += "#workers"
    return render(request, template, context)


@require_GET
def no_access(request):
    if can_view(request.user):
        return redirect("dashboard:overview")
    if not request.user.is_authenticated:
        return redirect_to_login(reverse("dashboard:overview"))
    return render(request, "dashboard/no_access.html", status=403)


# Actions: each calls jobs.actions, reports its message and goes back where it came from.
# Under HTMX the redirect is followed by the same request, which then gets the fragment.


@require_POST
@operator_required
def retry(request, job_id):
    result = actions.retry_job(job_id, user=request.user, source=SOURCE)
    return _report(request, result, job_id)


@require_POST
@operator_required
def cancel(request, job_id):
    result = actions.cancel_job(job_id, user=request.user, source=SOURCE)
    return _report(request, result, job_id)


@require_POST
@operator_required
def rerun(request, job_id):
    # The form carries a one-time token: the same press sent twice reruns once, across processes.
    token = request.POST.get("token", "")[:64]
    key = f"dashboard:{request.user.pk}:{token}" if token else ""
    result = actions.rerun_job(job_id, user=request.user, source=SOURCE, request_key=key)
    if not result.changed and result.new_job is not None:
        messages.warning(request, _already_rerun(result.new_job.id))
        return _back(request, job_id)
    return _report(request, result, job_id)


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


def _report(request, result, job_id):
    if result.job is None:
        raise Http404("no such job")
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
    target = request.POST.get("next", "")
    if "\x00" in target or not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = reverse("dashboard:job", args=[job_id])
    return redirect(target)


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
