"""The JSON API of flow-control limits: list them; override one, or clear its override."""

from django.http import HttpResponse, JsonResponse

from jobs import limits
from jobs.limit_spec import LimitError
from jobs.limit_usage import usage

from .api import json_body, refuse_parameters
from .auth import api_view
from .limit_rows import limit_json, limit_row, taken_first_warning
from .serializers import error

SOURCE = "api"


@api_view("GET")
def limit_list(request):
    refuse_parameters(request)
    return JsonResponse({"results": [limit_json(row) for row in usage()]})


@api_view("POST", "DELETE", operate=True)
def limit_detail(request, name):
    refuse_parameters(request)
    cleared = False
    try:
        if request.method == "DELETE":
            cleared = limits.clear_limit(name, user=request.user, source=SOURCE)
        else:
            body = json_body(request, ("concurrency", "rate"))
            if not body:
                # An empty body would lift the limit for every worker: said, never assumed.
                return error(
                    400,
                    'give "concurrency" and/or "rate" (null lifts that part of the limit)',
                )
            limits.set_limit(
                name,
                concurrency=body.get("concurrency"),
                rate=body.get("rate"),
                user=request.user,
                source=SOURCE,
            )
    except LimitError as e:
        return error(400, str(e))
    row = limit_row(name)
    if row is None and cleared:
        return HttpResponse(status=204)  # the override was the whole limit: none is left
    if row is None:
        return error(404, "no such limit: it is neither in LIMITS nor overridden")
    answer = limit_json(row)
    if request.method == "POST" and (warning := taken_first_warning(name)):
        answer["warning"] = warning
    return JsonResponse(answer)
