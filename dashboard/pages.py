"""How a console page answers: GET only, staff only, and under HTMX only its fragment."""

from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from .access import staff_required


def console_page(view):
    """A page of the console: read by GET, by staff, cached apart for HTMX requests."""
    return require_GET(staff_required(vary_on_headers("HX-Request")(view)))


def render_page(request, template, fragment, context, *, status=200):
    """The page `template`, or under HTMX its partial `fragment` alone."""
    if request.htmx:
        template += f"#{fragment}"
    return render(request, template, context, status=status)


def list_status(page) -> int:
    """A list page answers 400 when its filter form was refused (no page to show)."""
    return 200 if page is not None else 400
