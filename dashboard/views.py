from django.contrib.admin.views.decorators import staff_member_required
from django.shortcuts import render

from jobs.models import Job


@staff_member_required(login_url="login")
def overview(request):
    counts = {row["state"]: row["n"] for row in _state_counts()}
    return render(request, "dashboard/overview.html", {"counts": counts})


def _state_counts():
    from django.db.models import Count

    return Job.objects.order_by().values("state").annotate(n=Count("id"))
