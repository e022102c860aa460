"""The JSON API (/api/v1/): thin views over the job table and `jobs.actions`."""

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.core import signing
from django.db.models import Q
from django.http import JsonResponse
from django.urls import reverse

from jobs import actions
from jobs.models import Job
from jobs.states import JobState

from . import metrics, openapi
from .auth import api_view
from .serializers import (
    DEFAULT_LIMIT,
    JOB_COLUMNS,
    MAX_LIMIT,
    BadRequest,
    error,
    job_detail_json,
    job_json,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
CURSOR_SALT = "jobsite.api.jobs-cursor"
LIST_PARAMETERS = ("state", "queue", "task", "limit", "cursor")
STATES = frozenset(state.value for state in JobState)


# --- the job list: filters and a keyset cursor -------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Position:
    """Where a page ended, in the list's order (enqueued_at desc, id desc)."""

    enqueued_at: datetime
    id: uuid.UUID

    def encode(self) -> str:
        # Signed so a client can only hand back what it was given.
        return signing.dumps([self.enqueued_at.isoformat(), self.id.hex], salt=CURSOR_SALT)

    @classmethod
    def decode(cls, cursor: str) -> "Position":
        try:
            moment, job_id = signing.loads(cursor, salt=CURSOR_SALT)
            return cls(enqueued_at=datetime.fromisoformat(moment), id=uuid.UUID(hex=job_id))
        except (signing.BadSignature, ValueError, TypeError, AttributeError):
            raise BadRequest("invalid cursor; use a next_cursor the API returned") from None

    def after(self):
        return Q(enqueued_at__lt=self.enqueued_at) | Q(enqueued_at=self.enqueued_at, id__lt=self.id)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobListQuery:
    state: str | None = None
    queue: str | None = None
    task: str | None = None
    limit: int = DEFAULT_LIMIT
    position: Position | None = None

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
            limit=parse_limit(values.get("limit")),
            position=Position.decode(cursor) if cursor is not None else None,
        )

    def page(self) -> tuple[list[Job], str | None]:
        jobs = Job.objects.only(*JOB_COLUMNS).order_by("-enqueued_at", "-id")
        if self.state:
            jobs = jobs.filter(state=self.state)
        if self.queue:
            jobs = jobs.filter(queue_name=self.queue)
        if self.task:
            jobs = jobs.filter(task_path=self.task)
        if self.position:
            jobs = jobs.filter(self.position.after())
        rows = list(jobs[: self.limit + 1])
        if len(rows) <= self.limit:
            return rows, None
        last = rows[self.limit - 1]
        return rows[: self.limit], Position(enqueued_at=last.enqueued_at, id=last.id).encode()


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


def find_job(job_id: str) -> Job | None:
    try:
        return Job.objects.filter(id=uuid.UUID(job_id)).first()
    except ValueError:
        return None


def no_such_job():
    return error(404, "no such job")


def action_response(result: actions.ActionResult):
    """200 with the job; 201 with the new job of a rerun; 409 with why and the job."""
    if result.job is None:
        return no_such_job()
    if not result.changed:
        held_by = {"held_by": str(result.held_by)} if result.held_by else {}
        return error(409, result.message, job=job_json(result.job), **held_by)
    if result.new_job is not None:
        location = reverse("dashboard:api:job-detail", args=[result.new_job.id])
        return JsonResponse(job_json(result.new_job), status=201, headers={"Location": location})
    return JsonResponse(job_json(result.job))


# --- views ---------------------------------------------------------------------------------------


@api_view("GET")
def job_list(request):
    jobs, next_cursor = JobListQuery.from_params(request.GET).page()
    return JsonResponse({"results": [job_json(job) for job in jobs], "next_cursor": next_cursor})


@api_view("GET")
def job_detail(request, job_id):
    refuse_parameters(request)
    job = find_job(job_id)
    if job is None:
        return no_such_job()
    return JsonResponse(job_detail_json(job, job.attempts.order_by("number")))


@api_view("POST", operate=True)
def retry(request, job_id):
    refuse_parameters(request)
    return action_response(actions.retry_job(job_id, user=request.user, source="api"))


@api_view("POST", operate=True)
def rerun(request, job_id):
    refuse_parameters(request)
    return action_response(actions.rerun_job(job_id, user=request.user, source="api"))


@api_view("POST", operate=True)
def cancel(request, job_id):
    refuse_parameters(request)
    return action_response(actions.cancel_job(job_id, user=request.user, source="api"))


@api_view("GET")
def summary(request):
    refuse_parameters(request)
    return JsonResponse(metrics.snapshot().as_json())


@api_view("GET")
def openapi_document(request):
    # The API lives wherever the host project mounted the console.
    base = reverse("dashboard:api:job-list").removesuffix("/jobs")
    return JsonResponse(openapi.document(base))


@api_view("GET", "POST", "PUT", "PATCH", "DELETE")
def not_found(request, rest=""):
    return error(404, f"no such API endpoint; see {reverse('dashboard:api:openapi')}")
