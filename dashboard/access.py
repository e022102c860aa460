"""Who gets into the console: view decorators over the rules in `permissions`."""

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.shortcuts import render
from django.urls import reverse
from django_htmx.middleware import HtmxDetails

from .permissions import can_operate, can_view


def staff_required(view):
    """Staff see the console; anyone else is sent to the host project's login page."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        # The host project need not install django-htmx's middleware: the console reads the
        # HX-Request header through the same `request.htmx` either way.
        if not hasattr(request, "htmx"):
            request.htmx = HtmxDetails(request)
        if can_view(request.user):
            return view(request, *args, **kwargs)
        if request.user.is_authenticated:
            # The login page sends a signed-in user straight on to `next`: pointing it back here
            # would loop, so a signed-in user without access lands on a page that says so.
            return redirect_to_login(reverse("dashboard:no_access"))
        return redirect_to_login(request.get_full_path())

    return wrapper


def operator_required(view):
    """Acting on jobs needs the operate permission; a read-only user gets 403."""

    @wraps(view)
    @staff_required
    def wrapper(request, *args, **kwargs):
        if not can_operate(request.user):
            return render(request, "dashboard/forbidden.html", status=403)
        return view(request, *args, **kwargs)

    return wrapper
