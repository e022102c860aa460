"""The console's limits page: every limit with what it uses, and its edit form."""

from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from jobs import limits
from jobs.limit_spec import LimitError
from jobs.limit_usage import usage

from . import flash
from .access import operator_required
from .forms import LimitForm
from .limit_rows import taken_first_warning
from .pages import console_page, render_page
from .permissions import can_operate

SOURCE = "dashboard"


@console_page
def limit_list(request):
    return _page(request, LimitForm())


def _page(request, form, status=200):
    context = {"rows": usage(), "can_operate": can_operate(request.user), "form": form}
    return render_page(request, "dashboard/limits.html", "limits", context, status=status)


@require_POST
@operator_required
def set_limit(request):
    form = LimitForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    name = form.cleaned_data["name"]
    try:
        limits.set_limit(
            name,
            concurrency=form.cleaned_data["concurrency"],
            rate=form.rate(),
            user=request.user,
            source=SOURCE,
        )
    except LimitError as e:
        form.add_error(None, str(e))
        return _page(request, form, status=400)
    flash.success(request, f"{name}: limit set for every worker")
    if warning := taken_first_warning(name):
        flash.warning(request, warning)
    return redirect("dashboard:limits")


@require_POST
@operator_required
def clear_limit(request):
    name = request.POST.get("name", "")
    try:
        cleared = limits.clear_limit(name, user=request.user, source=SOURCE)
    except LimitError as e:
        flash.warning(request, str(e))
        return redirect("dashboard:limits")
    if cleared and name in limits.declared():
        flash.success(request, f"{name}: override cleared; the setting applies again")
    elif cleared:
        flash.success(request, f"{name}: override cleared; no such limit is set any more")
    else:
        flash.warning(request, f"{name}: had no override")
    return redirect("dashboard:limits")
