"""Who is calling the JSON API and /metrics: a bearer token or the session.

`api_view` wraps every endpoint: it authenticates, checks the method, enforces CSRF for session
writes (a bearer token cannot be sent by a browser on its own, so token requests need none) and
applies the console's permission rules. Every refusal is a JSON error, never a login redirect.
"""

import logging
from dataclasses import dataclass
from datetime import timedelta
from functools import wraps
from typing import cast

from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.middleware.csrf import CsrfViewMiddleware
from django.utils import timezone
from django.utils.log import log_response
from django.views.decorators.csrf import csrf_exempt

from jobs.reconnect import first_line, is_transient

from .models import ApiToken
from .permissions import OPERATE_PERMISSION, can_operate, can_view
from .serializers import BadRequest, error

# last_used_at is written at most this often per token, so polling scripts cost no writes.
TOUCH_INTERVAL = timedelta(minutes=1)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# What a 503 for a database out of reach asks clients to wait before trying again.
RETRY_AFTER_SECONDS = 5

logger = logging.getLogger(__name__)


class AuthenticationFailed(Exception):
    """Credentials were sent but are not valid."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Caller:
    user: object
    # None when the caller authenticated with the session.
    token: ApiToken | None = None


def authenticate(request) -> Caller | None:
    """The caller, or None when anonymous; raises AuthenticationFailed for bad credentials."""
    header = request.headers.get("Authorization")
    if header is None:
        user = getattr(request, "user", None)
        return Caller(user=user) if user is not None and user.is_authenticated else None
    scheme, _, key = header.strip().partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise AuthenticationFailed("the Authorization header must be 'Bearer <token>'")
    token = (
        ApiToken.objects.live()
        .select_related("user")
        .filter(key_hash=ApiToken.hash_key(key))
        .first()
    )
    if token is None or not token.user.is_active:
        raise AuthenticationFailed("invalid, revoked or expired token")
    touch(token)
    return Caller(user=token.user, token=token)


def touch(token: ApiToken) -> None:
    now = timezone.now()
    cutoff = now - TOUCH_INTERVAL
    if token.last_used_at is not None and token.last_used_at >= cutoff:
        return
    # Guarded, so concurrent requests of one token write once. Best effort: a database that
    # cannot write (a full disk) still answers reads, a Prometheus scrape among them.
    try:
        with transaction.atomic():
            ApiToken.objects.filter(pk=token.pk).filter(
                Q(last_used_at__isnull=True) | Q(last_used_at__lt=cutoff)
            ).update(last_used_at=now)
    except DatabaseError as exc:
        logger.warning("token %s: last use not recorded: %s", token.pk, first_line(exc))


class _CsrfCheck(CsrfViewMiddleware):
    """Django's CSRF check, answering why it fails instead of a 403 page."""

    def _reject(self, request, reason):  # type: ignore[override]
        return reason


def _unused_view(request):
    raise AssertionError("the CSRF check never calls the view")


def csrf_failure(request) -> str | None:
    """Why the request fails Django's CSRF check, or None when it passes."""
    check = _CsrfCheck(_unused_view)
    check.process_request(request)
    return cast(str | None, check.process_view(request, _unused_view, (), {}))


def unauthorized(message: str):
    return error(401, message, headers={"WWW-Authenticate": 'Bearer realm="jobsite"'})


def api_view(*methods: str, operate: bool = False):
    """Authenticate, check the method, CSRF and permissions, then call the view.

    A view raises `BadRequest` to answer 400. Every answer is JSON, a body over
    DATA_UPLOAD_MAX_MEMORY_SIZE (413) and an unhandled exception (500) included.
    """
    allowed = frozenset(methods) | ({"HEAD"} if "GET" in methods else frozenset())
    allow_header = ", ".join(sorted(allowed))

    def decorate(view):
        @csrf_exempt
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            try:
                return checked(request, *args, **kwargs)
            except RequestDataTooBig:
                limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
                return error(413, f"the body is larger than the {limit:,} bytes accepted")
            except SuspiciousOperation as exc:
                return error(400, str(exc) or "the request was refused")
            except DatabaseError as exc:
                if out_of_reach(exc):
                    return database_unavailable(request, exc)
                return server_error(request, exc)
            except Exception as exc:
                return server_error(request, exc)

        def checked(request, *args, **kwargs):
            try:
                caller = authenticate(request)
            except AuthenticationFailed as exc:
                return unauthorized(str(exc))
            if caller is None:
                return unauthorized("authentication required: log in or send a bearer token")
            if request.method not in allowed:
                return error(
                    405, f"method {request.method} not allowed", headers={"Allow": allow_header}
                )
            if caller.token is None and request.method not in SAFE_METHODS:
                reason = csrf_failure(request)
                if reason:
                    return error(403, f"CSRF check failed: {reason}")
            request.user = caller.user
            if not can_view(caller.user):
                return error(403, "staff access required")
            if operate and not can_operate(caller.user):
                return error(403, f"the permission {OPERATE_PERMISSION} is required")
            try:
                return view(request, *args, **kwargs)
            except BadRequest as exc:
                return error(400, str(exc), **exc.details)

        return wrapper

    return decorate


def out_of_reach(exc) -> bool:
    """A database error a client's retry may get past: a transient one (jobs.reconnect), not
    SQLite's missing table or column, which it raises as the same OperationalError."""
    return is_transient(exc) and not first_line(exc).lower().startswith("no such ")


def database_unavailable(request, exc):
    """A JSON 503 for a database that cannot be reached now (a cut connection, a pooler or
    server down, a lock held too long): worth trying again, unlike a 500. The error's text,
    which may name hosts, goes to the log only."""
    logger.warning("database unavailable for %s: %s", request.path, first_line(exc))
    return error(503, unavailable_text(exc), headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


def unavailable_text(exc) -> str:
    """What a client is told of a database out of reach: whether it is worth trying again."""
    text = str(exc).lower()
    if "disk is full" in text or "no space left" in text:
        return "the database cannot write: its disk is full (free space where it keeps its files)"
    return "the database is unavailable right now; try again shortly"


def server_error(request, exc):
    """The JSON 500, logged and signalled as Django does for any unhandled exception."""
    signals.got_request_exception.send(sender=None, request=request)
    response = error(500, "internal error; it has been logged")
    log_response(
        "Internal Server Error: %s", request.path, response=response, request=request, exception=exc
    )
    return response
