"""Who did what to a job or a queue, from the console, the API or Python."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .job import Job


class AuditRecord(models.Model):
    """Who acted, from where (console, API or Python), what came of it, and when."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    username = models.CharField(max_length=150, blank=True, default="")
    action = models.CharField(max_length=32)
    source = models.CharField(max_length=16, blank=True, default="python")
    outcome = models.CharField(max_length=255, blank=True, default="")
    # The job the action created: the new run of a rerun, the job of a schedule's "run now".
    result_job_id = models.UUIDField(null=True, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        abstract = True

    @classmethod
    def record(cls, *, user=None, action: str, outcome: str, source: str = "python", **fields):
        """Write one entry."""
        return cls._default_manager.create(
            **cls._who(user), action=action, source=source, outcome=outcome, **fields
        )

    @classmethod
    def record_each(
        cls, each: list[dict], *, user=None, action: str, outcome: str, source: str = "python"
    ) -> None:
        """Write one entry per item of `each` (its own fields, such as `job_id`), in one
        statement: an action that changed many jobs at once, each entry as `record` writes."""
        who = cls._who(user)
        cls._default_manager.bulk_create(
            [cls(**who, action=action, source=source, outcome=outcome, **f) for f in each],
            batch_size=500,
        )

    @staticmethod
    def _who(user) -> dict:
        """How an acting user is kept: a saved user by reference and name; anyone else, or no
        one, as no one."""
        known = getattr(user, "pk", None) is not None
        return {"user": user if known else None, "username": user.get_username() if known else ""}


class AuditEntry(AuditRecord):
    """Who did what to a job, from the console, the API or Python."""

    # Null for actions on no single job (a queue, a bulk action) and for a discard, whose job is
    # gone; `subject` then names what was acted on.
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.CASCADE, related_name="audit_entries"
    )
    # A caller's key for one press of a button: the same key twice has one effect.
    request_key = models.CharField(max_length=100, blank=True, default="")
    # A discarded job's id, a queue's name, or a bulk action's filter.
    subject = models.CharField(max_length=255, blank=True, default="")
    task_path = models.CharField(max_length=255, blank=True, default="")
    # What the action changed: old and new arguments of an edited rerun, a bulk action's counts.
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["job", "-at"], name="audit_job_recent"),
            models.Index(
                fields=["subject", "-at"], condition=~Q(subject=""), name="audit_subject_recent"
            ),
            # The console's audit log, filtered by who or by what, pages back by id.
            models.Index(fields=["username", "-id"], name="audit_user_recent"),
            models.Index(fields=["action", "-id"], name="audit_action_recent"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["request_key"], condition=~Q(request_key=""), name="audit_request_once"
            )
        ]

    def __str__(self):
        target = self.job_id or self.subject
        return f"{self.username or 'system'} {self.action} {target} at {self.at:%Y-%m-%d %H:%M}"
