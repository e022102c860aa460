"""The console's actions on one job or one queue: each calls the engine (`jobs.actions`,
`jobs.queues`), reports its message and goes back where it came from. Under HTMX the redirect is
followed by the same request, which then gets the fragment."""

from django.http import HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from jobs import actions, queues
from jobs.models import Job

from . import buttons as action_buttons
from . import flash
from .access import operator_required
from .errors import error_page
from .forms import EditRerunForm
from .redirects import safe_next
from .views import job_page

# Who acted, in the audit log.
SOURCE = "dashboard"


def _retry_report(request, result, job_id):
    """A retry names and links the job it put back in line; the job's page then says what
    became of it since, when a worker has already taken it on (see `views._since_retry`)."""
    if result.changed and result.job is not None:
        url = reverse("dashboard:job", args=[job_id])
        text = format_html(
            '{}: <a href="{}">{} {}</a>',
            result.message,
            url,
            result.job.task_path.rpartition(".")[2],
            str(job_id)[:8],
        )
        flash.success(request, text, extra_tags=f"retried-{job_id}")
        return _back(request, job_id)
    return _report(request, result, job_id)


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
    # A list's one action form carries one token for all its rows, so the key names the job too
    # (and stays within the audit log's 100 characters).
    token = request.POST.get("token", "")[:32]
    key = f"dashboard:{request.user.pk}:{job_id}:{token}" if token else ""
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
            return job_page(request, job, edit_form=form)
    else:
        result = actions.rerun_job(job_id, user=request.user, source=SOURCE, request_key=key)
    if not result.changed and result.new_job is not None:
        flash.warning(request, _already_rerun(result.new_job.id))
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
    flash.success(request, f"job {str(job_id)[:8]} discarded with its attempts")
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
        flash.error(request, str(exc))
    else:
        (flash.success if changed else flash.info)(
            request, f"queue {name} {done if changed else unchanged}"
        )
    return redirect("dashboard:queues")


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
    (flash.success if result.changed else flash.warning)(request, text)
    return _back(request, job_id)


def _back(request, job_id):
    return HttpResponseRedirect(_back_url(request, job_id))


def _back_url(request, job_id):
    return _next(request) or reverse("dashboard:job", args=[job_id])


def _next(request):
    """The page a form came from (its `next` field), when it is one of ours."""
    return safe_next(request, request.POST.get("next"))


def _already_rerun(new_id):
    url = reverse("dashboard:job", args=[new_id])
    return format_html('already rerun from this page: <a href="{}">open the new run</a>', url)
