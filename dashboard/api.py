"""The JSON API (/api/v1/): thin views over the job table and `jobs.actions`."""

import uuid
from dataclasses import dataclass

from django.db import models
from django.http import JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.urls import reverse
from django.utils import timezone

from jobs import actions, attempt_log, bulk, queues
from jobs.models import Job
from jobs.names import check_queue_name
from jobs.states import JobState
from jobs.text import holds_as_is

from . import json_input, metrics, openapi, queries, queue_rows
from .auth import api_view
from .columns import API_COLUMNS
from .pagination import DEFAULT_LIMIT, MAX_LIMIT, Cursor, InvalidCursor, Page, keyset_page
from .serializers import (
    BadRequest,
    error,
    job_detail_json,
    job_json,
    log_json,
    page_response,
    queue_json,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
LIST_PARAMETERS = ("state", "queue", "task", "q", "limit", "cursor")
FILTER_KEYS = ("state", "queue", "task", "q")
MAX_SEARCH = 200
# A POST with no JSON body (a plain form post, an empty one) means no arguments.
FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")
STATES = frozenset(state.value for state in JobState)


# --- the job list: filters and a keyset cursor -------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class JobListQuery:
    state: str | None = None
    queue: str | None = None
    task: str | None = None
    q: str | None = None
    limit: int = DEFAULT_LIMIT
    cursor: Cursor | None = None

    @classmethod
    def from_params(cls, params) -> "JobListQuery":
        values = single_values(params, LIST_PARAMETERS)
        state = values.get("state")
        if state is not None and state not in STATES:
            raise BadRequest("unknown state", allowed=sorted(STATES))
        cursor = values.get("cursor")
        return cls(
            state=state,
            queue=values.get("queue"),
            task=values.get("task"),
            q=check_search(values.get("q")),
            limit=parse_limit(values.get("limit")),
            cursor=decode_cursor(cursor) if cursor is not None else None,
        )

    def page(self) -> Page:
        jobs, order = queries.listed_jobs(
            state=self.state, queue=self.queue, task=self.task, q=self.q
        )
        return keyset_page(
            jobs.only(*API_COLUMNS), order=order, cursor=self.cursor, limit=self.limit
        )


def decode_cursor(text: str) -> Cursor:
    try:
        return Cursor.decode(text)
    except InvalidCursor:
        raise BadRequest("invalid cursor; use a next_cursor the API returned") from None


def single_values(params, allowed) -> dict[str, str]:
    """Query parameters as {name: value}: known names, each at most once, no NUL; '' is absent."""
    unknown = sorted(name for name in params if name not in allowed)
    if unknown:
        raise BadRequest("unknown query parameter", unknown=unknown, allowed=list(allowed))
    values = {}
    for name in params:
        given = params.getlist(name)
        if len(given) > 1:
            raise BadRequest(f"give {name} at most once")
        if "\x00" in given[0]:
            raise BadRequest(f"{name} contains a NUL character")
        if given[0] != "":
            values[name] = given[0]
    return values


def check_search(text: str | None) -> str | None:
    if text is not None and len(text) > MAX_SEARCH:
        raise BadRequest(f"q is at most {MAX_SEARCH} characters")
    return text


def refuse_parameters(request) -> None:
    """For endpoints that take no query parameters: any given is a 400."""
    single_values(request.GET, ())


def parse_limit(text: str | None) -> int:
    """A 32-bit integer, clamped to 1-MAX_LIMIT; anything else is not a page size."""
    if text is None:
        return DEFAULT_LIMIT
    digits = text.removeprefix("-").removeprefix("+")
    if digits.isascii() and digits.isdigit() and len(digits) <= 10:
        limit = int(text)
        if INT32_MIN <= limit <= INT32_MAX:
            return min(max(limit, 1), MAX_LIMIT)
    raise BadRequest(f"limit must be a 32-bit integer; it is clamped to 1-{MAX_LIMIT}")


def find_by_id[M: models.Model](model: type[M], text: str) -> M | None:
    """The row of `model` a URL names by id: None when there is none, or the text is no uuid."""
    try:
        return model._default_manager.filter(id=uuid.UUID(text)).first()
    except ValueError:
        return None


def no_such_job():
    return error(404, "no such job")


def reruns_of(job_ids) -> dict:
    """The ids of the runs made from each of `job_ids`, newest first."""
    found: dict = {}
    rows = (
        Job.objects.filter(rerun_of__in=list(job_ids))
        .order_by("-enqueued_at", "-id")
        .values_list("rerun_of_id", "id")
    )
    for original, rerun in rows:
        found.setdefault(original, []).append(rerun)
    return found


def with_reruns(job) -> dict:
    return job_json(job, reruns_of([job.id]).get(job.id, ()))


def action_response(result: actions.ActionResult):
    """200 with the job; 201 with the new job of a rerun; 409 with why and the job."""
    if result.job is None:
        return no_such_job()
    if not result.changed:
        held_by = {"held_by": str(result.held_by)} if result.held_by else {}
        return error(409, result.message, job=with_reruns(result.job), **held_by)
    if result.new_job is not None:
        location = reverse("dashboard:api:job-detail", args=[result.new_job.id])
        return JsonResponse(job_json(result.new_job), status=201, headers={"Location": location})
    return JsonResponse(with_reruns(result.job))


def json_body(request, allowed) -> dict:
    """The request's JSON object body ({} when empty), with only the `allowed` keys."""
    if request.content_type in FORM_TYPES:
        try:
            given = bool(request.POST or request.FILES)
        except MultiPartParserError:
            given = True
        if given:
            raise BadRequest("send the body as JSON (Content-Type: application/json)")
        return {}
    if not request.body.strip():
        return {}
    try:
        body = json_input.loads(request.body)
    except json_input.RepeatedKey as e:
        raise BadRequest(f"the body is ambiguous: {e}") from None
    except json_input.UnfitNumber as e:
        raise BadRequest(f"the body is valid JSON, but {e}") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadRequest("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    unknown = sorted(key for key in body if key not in allowed)
    if unknown:
        raise BadRequest("unknown field", unknown=unknown, allowed=list(allowed))
    return body


def bulk_filter(value) -> dict:
    """A bulk action's `filter`, checked like the job list's query parameters."""
    if not isinstance(value, dict):
        raise BadRequest("filter must be an object")
    unknown = sorted(key for key in value if key not in FILTER_KEYS)
    if unknown:
        raise BadRequest("unknown filter", unknown=unknown, allowed=list(FILTER_KEYS))
    filters = {}
    for key, text in value.items():
        if text == "":
            continue
        if not isinstance(text, str) or not holds_as_is(text):
            raise BadRequest(f"filter {key} must be a string without NUL or a lone surrogate")
        filters[key] = text
    if "state" in filters and filters["state"] not in STATES:
        raise BadRequest("unknown state", allowed=sorted(STATES))
    check_search(filters.get("q"))
    return filters


def queue_response(name: str):
    for status in queue_rows.queue_statuses(timezone.now()):
        if status.name == name:
            return JsonResponse(queue_json(status))
    return JsonResponse(
        {"name": name, "paused": queues.is_paused(name), "counts": {}, "oldest_due_at": None}
    )


def queue_name(name: str) -> str:
    try:
        return check_queue_name(name)
    except ValueError as e:
        raise BadRequest(f"a queue name {e}") from None


# --- views ---------------------------------------------------------------------------------------


@api_view("GET")
def job_list(request):
    page = JobListQuery.from_params(request.GET).page()
    reruns = reruns_of(job.id for job in page.rows)
    return page_response([job_json(job, reruns.get(job.id, ())) for job in page.rows], page)


@api_view("GET")
def job_detail(request, job_id):
    refuse_parameters(request)
    job = find_by_id(Job, job_id)
    if job is None:
        return no_such_job()
    reruns = reruns_of([job.id]).get(job.id, ())
    return JsonResponse(job_detail_json(job, job.attempts.order_by("number"), reruns))


@api_view("GET")
def job_logs(request, job_id):
    values = single_values(request.GET, ("attempt",))
    job = find_by_id(Job, job_id)
    if job is None:
        return no_such_job()
    attempt = parse_attempt(values.get("attempt"), job)
    if attempt is None:
        return error(404, "no such attempt", attempts=job.attempt)
    return JsonResponse(log_json(job, attempt_log.read(job.id, attempt)))


def parse_attempt(text: str | None, job: Job) -> int | None:
    """The attempt asked for (the job's latest when not given); None when it has no such one."""
    if text is None:
        return job.attempt or None
    if not (text.isascii() and text.isdigit()) or not text.strip("0"):
        raise BadRequest("attempt must be a positive integer")
    if len(text) > 10:  # a positive integer, but beyond any attempt a job can have
        return None
    number = int(text)
    return number if number <= job.attempt else None


def _job_action(act):
    """The endpoint of an action on one job that takes no body."""

    @api_view("POST", operate=True)
    def endpoint(request, job_id):
        refuse_parameters(request)
        return action_response(act(job_id, user=request.user, source="api"))

    return endpoint


retry = _job_action(actions.retry_job)
cancel = _job_action(actions.cancel_job)
run_now = _job_action(actions.run_now_job)


def _queue_action(act):
    @api_view("POST", operate=True)
    def endpoint(request, name):
        refuse_parameters(request)
        act(queue_name(name), user=request.user, source="api")
        return queue_response(name)

    return endpoint


queue_pause = _queue_action(queues.pause)
queue_resume = _queue_action(queues.resume)


@api_view("POST", operate=True)
def rerun(request, job_id):
    """An optional body `{"args": [...], "kwargs": {...}}` makes an edited rerun."""
    refuse_parameters(request)
    body = json_body(request, ("args", "kwargs"))
    if any(body.get(key, ...) is None for key in ("args", "kwargs")):
        raise BadRequest("args and kwargs may be left out, not null")
    try:
        result = actions.rerun_job(
            job_id,
            args=body.get("args"),
            kwargs=body.get("kwargs"),
            user=request.user,
            source="api",
        )
    except (TypeError, ValueError) as exc:
        raise BadRequest(str(exc)) from None
    except RecursionError:
        raise BadRequest("args or kwargs are nested too deeply") from None
    return action_response(result)


@api_view("POST", operate=True)
def discard(request, job_id):
    refuse_parameters(request)
    result = actions.discard_job(job_id, user=request.user, source="api")
    if result.job is None:
        return no_such_job()
    if not result.changed:
        return error(409, result.message, job=with_reruns(result.job))
    return JsonResponse({"discarded": str(result.job.id)})


@api_view("POST", operate=True)
def bulk_action(request):
    """`{"action", "filter": {"state", "queue", "task", "q"}, "dry_run"}` → matched, applied."""
    refuse_parameters(request)
    body = json_body(request, ("action", "filter", "dry_run"))
    action = body.get("action")
    if not isinstance(action, str) or action not in bulk.ACTIONS:
        raise BadRequest("action must be one of", allowed=list(bulk.ACTIONS))
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise BadRequest("dry_run must be true or false")
    if "filter" not in body:
        # A forgotten filter must not retry, cancel or discard every job: {} says "all" on purpose.
        raise BadRequest("filter is required; {} acts on every job", allowed=list(FILTER_KEYS))
    filters = bulk_filter(body["filter"])
    result = bulk.apply(
        action,
        queries.filtered_jobs(**filters),
        dry_run=dry_run,
        user=request.user,
        source="api",
        description=queries.describe_filter(filters),
    )
    return JsonResponse({"matched": result.matched, "applied": result.applied})


@api_view("GET")
def queue_list(request):
    refuse_parameters(request)
    statuses = queue_rows.queue_statuses(timezone.now())
    return JsonResponse({"results": [queue_json(status) for status in statuses]})


@api_view("GET")
def summary(request):
    refuse_parameters(request)
    return JsonResponse(metrics.snapshot().as_json())


@api_view("GET")
def openapi_document(request):
    refuse_parameters(request)
    # The API lives wherever the host project mounted the console.
    base = reverse("dashboard:api:job-list").removesuffix("/jobs")
    return JsonResponse(openapi.document(base))


@api_view("GET", "POST", "PUT", "PATCH", "DELETE")
def not_found(request, rest=""):
    return error(404, f"no such API endpoint; see {reverse('dashboard:api:openapi')}")
