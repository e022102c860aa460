"""The JSON API of the schedules: list them; pause, resume or run one now."""

from django.http import JsonResponse
from django.urls import reverse

from jobs import schedules

from .api import refuse_parameters
from .auth import api_view
from .schedule_rows import schedule_row, schedule_rows, unusable
from .serializers import error, job_json, schedule_json

SOURCE = "api"


@api_view("GET")
def schedule_list(request):
    refuse_parameters(request)
    try:
        rows = schedule_rows(limit=1)
    except schedules.ScheduleError as exc:
        return error(500, unusable(exc))
    return JsonResponse({"results": [schedule_json(row) for row in rows]})


@api_view("POST", operate=True)
def pause(request, name):
    return _act(request, schedules.pause_schedule, name)


@api_view("POST", operate=True)
def resume(request, name):
    return _act(request, schedules.resume_schedule, name)


@api_view("POST", operate=True)
def trigger(request, name):
    refuse_parameters(request)
    try:
        result = schedules.trigger_schedule(name, user=request.user, source=SOURCE)
    except schedules.UnknownSchedule:
        return no_such_schedule()
    except schedules.ScheduleError as exc:
        return error(500, unusable(exc))
    location = reverse("dashboard:api:job-detail", args=[result.job.id])
    return JsonResponse(job_json(result.job), status=201, headers={"Location": location})


def _act(request, action, name):
    """200 with the schedule, whether or not it changed (pausing a paused one is no error)."""
    refuse_parameters(request)
    try:
        action(name, user=request.user, source=SOURCE)
    except schedules.UnknownSchedule:
        return no_such_schedule()
    except schedules.ScheduleError as exc:
        return error(500, unusable(exc))
    return JsonResponse(schedule_json(schedule_row(name)))


def no_such_schedule():
    return error(404, "no such schedule")
