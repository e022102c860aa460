"""Pausing queues: workers claim nothing from a paused queue until it is resumed.

The pause is a row in `PausedQueue`, so it is shared by every worker and survives restarts.
Jobs already running finish; enqueues still land and wait. Each call is audited.
"""

from django.db import IntegrityError, transaction

from . import db
from .models import AuditEntry, PausedQueue


def _audit(name, action, outcome, *, user=None, source="python"):
    AuditEntry.objects.create(
        user=user if getattr(user, "pk", None) else None,
        username=user.get_username() if getattr(user, "pk", None) else "",
        action=action,
        source=source,
        outcome=outcome,
        subject=name,
    )


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name or len(name) > 100 or "\x00" in name:
        raise ValueError("a queue name is 1-100 characters without NUL")
    return name


def pause(name: str, *, user=None, source="python") -> bool:
    """Pause queue `name`; returns False when it was already paused."""
    name = _check_name(name)
    username = user.get_username() if getattr(user, "pk", None) else ""
    try:
        with transaction.atomic():
            PausedQueue.objects.create(name=name, paused_by=username)
            _audit(name, "pause queue", "queue paused", user=user, source=source)
    except IntegrityError:
        return False
    return True


def resume(name: str, *, user=None, source="python") -> bool:
    """Resume queue `name`; returns False when it was not paused."""
    name = _check_name(name)
    with transaction.atomic():
        deleted, _ = PausedQueue.objects.filter(name=name).delete()
        if deleted:
            _audit(name, "resume queue", "queue resumed", user=user, source=source)
    if deleted:
        db.notify_workers()
    return bool(deleted)


def paused() -> dict[str, PausedQueue]:
    """The paused queues by name."""
    return {row.name: row for row in PausedQueue.objects.all()}


def is_paused(name: str) -> bool:
    return PausedQueue.objects.filter(name=name).exists()
