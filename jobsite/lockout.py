"""The page a throttled login gets (django-axes' AXES_LOCKOUT_CALLABLE): the console's look,
status 429, and how many minutes are left before the next attempt is accepted."""

import math

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_cool_off, get_failure_limit
from django.db.models import Max, Sum
from django.shortcuts import render
from django.utils import timezone


def lockout_response(request, original_response=None, credentials=None):
    limit = get_failure_limit(request, credentials)
    return render(
        request,
        "registration/locked_out.html",
        {"minutes_left": minutes_left(request, credentials, limit), "failure_limit": limit},
        status=429,
    )


def minutes_left(request, credentials, limit) -> int:
    """Whole minutes until the lockout ends: the cool-off runs from the newest failure of each
    username or address that reached the limit; the latest of those ends last."""
    ends = []
    for attempts in AxesDatabaseHandler().get_user_attempts(request, credentials):
        totals = attempts.aggregate(failures=Sum("failures_since_start"), last=Max("attempt_time"))
        if (totals["failures"] or 0) >= limit:
            ends.append(totals["last"] + get_cool_off(request))
    if not ends:
        return math.ceil(get_cool_off(request).total_seconds() / 60)
    return max(1, math.ceil((max(ends) - timezone.now()).total_seconds() / 60))
