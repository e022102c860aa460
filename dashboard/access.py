"""Who gets into the console: view decorators over the rules in `permissions`."""

import logging
from functools import wraps
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.db import DatabaseError
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django_htmx.middleware import HtmxDetails

from jobs.reconnect import first_line

from .auth import out_of_reach, unavailable_text
from .errors import error_page
from .permissions import can_operate, can_view

logger = logging.getLogger(__name__)


def staff_required(view):
    """Staff see the console; anyone else is sent to the host project's login page."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        # The host project need not install django-htmx's middleware: the console reads the
        # HX-Request header through the same `request.htmx` either way.
        if not hasattr(request, "htmx"):
            request.htmx = HtmxDetails(request)
        if can_view(request.user):
            try:
                return view(request, *args, **kwargs)
            except DatabaseError as exc:
                # A database out of reach (down, or its disk full) is said as such, not as a
                # server error; any other database error stays one.
                if not out_of_reach(exc):
                    raise
                logger.warning("database unavailable for %s: %s", request.path, first_line(exc))
                return error_page(request, 503, unavailable_text(exc).capitalize() + ".")
        if request.user.is_authenticated:
            # The login page sends a signed-in user straight on to `next`: pointing it back here
            # would loop, so a signed-in user without access lands on a page that says so.
            return to_login(request, reverse("dashboard:no_access"))
        return to_login(request, request.get_full_path())

    return wrapper


def to_login(request, path):
    """The project's login page, told to come back to `path`: as a full URL when the login
    page is on another host or scheme (a single sign-on service), as Django's own
    `login_required` does, else as a path."""
    login_url = resolve_url(settings.LOGIN_URL)
    login_scheme, login_host = urlsplit(login_url)[:2]
    if (login_scheme and login_scheme != request.scheme) or (
        login_host and login_host != request.get_host()
    ):
        path = request.build_absolute_uri(path)
    return redirect_to_login(path, login_url)


def operator_required(view):
    """Acting on jobs needs the operate permission; a read-only user gets 403."""

    @wraps(view)
    @staff_required
    def wrapper(request, *args, **kwargs):
        if not can_operate(request.user):
            return render(request, "dashboard/forbidden.html", status=403)
        return view(request, *args, **kwargs)

    return wrapper
