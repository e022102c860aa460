"""Error pages inside the console layout, for the console's own errors and a project's handlers.

A project serving the console wires them in its root URLconf:

    handler400 = "dashboard.errors.bad_request"
    handler403 = "dashboard.errors.permission_denied"
    handler404 = "dashboard.errors.page_not_found"
    handler500 = "dashboard.errors.server_error"

and `CSRF_FAILURE_VIEW = "dashboard.errors.csrf_failure"` in its settings.
"""

import logging

from django.http import HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.urls import Resolver404, resolve

logger = logging.getLogger(__name__)

TEMPLATE = "dashboard/error.html"
PAGES = {
    400: ("Bad request", "The console could not understand this request."),
    403: ("Not allowed", "Your account may not open this page or take this action."),
    404: ("Not found", "There is no such page. A job that was pruned or discarded is gone too."),
    500: ("Something went wrong", "The console failed to answer. The error has been logged."),
    503: ("Database unavailable", "The database did not answer this request."),
}


def error_page(request, status: int, detail: str = "") -> HttpResponse:
    """The page for HTTP `status` in the console layout; `detail` says what was missing.

    Under the JSON API the answer is JSON too (a refusal before any API view ran: a bad Host
    header, a body the server would not read).
    """
    title, explanation = PAGES[status]
    if is_api(request):
        return JsonResponse({"error": f"{title.lower()}: {detail or explanation}"}, status=status)
    context = {"status": status, "title": title, "explanation": explanation, "detail": detail}
    try:
        body: str = render_to_string(TEMPLATE, context, request=request)
    except Exception:
        # The layout itself may be what broke (a database down behind the user lookup).
        logger.exception("rendering the %s page failed", status)
        body = f"<!doctype html><title>{title}</title><h1>{title}</h1><p>{explanation}</p>"
    return HttpResponse(body, status=status)


def bad_request(request, exception=None):
    return error_page(request, 400)


def permission_denied(request, exception=None):
    return error_page(request, 403)


def page_not_found(request, exception=None):
    return error_page(request, 404)


def server_error(request):
    return error_page(request, 500)


def csrf_failure(request, reason=""):
    """For CSRF_FAILURE_VIEW: a form whose security token was missing or stale."""
    return error_page(
        request, 403, "The form was refused: reload the page and try again (its token expired)."
    )


def is_api(request) -> bool:
    """Whether the request's path is under the console's JSON API (wherever it is mounted)."""
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return False
    return match.app_names[-2:] == ["dashboard", "api"]
