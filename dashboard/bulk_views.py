"""The console's actions on many jobs: a filter's every match (the job list, dead letters)
or the dead letters ticked on a page, each asked first."""

from collections import Counter
from urllib.parse import urlencode

from django.http import StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from jobs import actions, bulk
from jobs.states import JobState

from . import flash, queries
from .access import operator_required
from .action_views import SOURCE
from .forms import BULK_CAP, BulkActionForm, BulkRetryForm, DeadLetterFilterForm


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
        _bulk_progress(request, action, jobs, filters, back),
        content_type="text/html; charset=utf-8",
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
        flash.info(request, "Nothing to retry: tick the rows to retry first.")
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
    flash.success(request, _bulk_summary(results))
    return redirect(back)


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


def _bulk_summary(results) -> str:
    changed = sum(1 for r in results if r.changed)
    parts = [f"{changed:,} job{'s' if changed != 1 else ''} put back in line"]
    unchanged = Counter(r.message for r in results if not r.changed)
    parts += [f"{n:,} not changed ({message})" for message, n in unchanged.most_common()]
    return "; ".join(parts)


def _query(filters: dict) -> str:
    return f"?{urlencode(filters)}" if filters else ""
