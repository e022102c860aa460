"""The console's schedules page and its Pause / Resume / Run now actions."""

from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from jobs import schedules

from . import flash
from .access import operator_required
from .pages import console_page, render_page
from .permissions import can_operate
from .schedule_rows import schedule_rows, unusable

SOURCE = "dashboard"


@console_page
def schedule_list(request):
    try:
        rows, config_error = schedule_rows(), ""
    except schedules.ScheduleError as exc:
        rows, config_error = [], unusable(exc)
    context = {
        "rows": rows,
        "config_error": config_error,
        "can_operate": can_operate(request.user),
        # While a run is still on its way (one just made by "Run now", say), refresh often.
        "busy": any(row.last_job and not row.last_job.is_terminal for row in rows),
    }
    return render_page(request, "dashboard/schedules.html", "schedules", context)


@require_POST
@operator_required
def pause(request, name):
    return _act(request, schedules.pause_schedule, name)


@require_POST
@operator_required
def resume(request, name):
    return _act(request, schedules.resume_schedule, name)


@require_POST
@operator_required
def trigger(request, name):
    return _act(request, schedules.trigger_schedule, name)


def _act(request, action, name):
    """Run the action, say what it did, and go back to the page (under HTMX: its fragment)."""
    try:
        result = action(name, user=request.user, source=SOURCE)
    except schedules.UnknownSchedule:
        raise Http404("no such schedule") from None
    except schedules.ScheduleError as exc:
        flash.error(request, unusable(exc))
        return redirect("dashboard:schedules")
    if result.job is not None:
        url = reverse("dashboard:job", args=[result.job.id])
        text = format_html('{}: {}: <a href="{}">open the job</a>', name, result.message, url)
    else:
        text = f"{name}: {result.message}"
    (flash.success if result.changed else flash.warning)(request, text)
    return redirect("dashboard:schedules")
