"""The console's audit log: who did what to which job, when and from where, newest first.

Pages go back by id (the order entries were written), with the last id shown as a signed
cursor: no COUNT, no OFFSET. Each filter has an index that walks it in that order.
"""

import uuid
from dataclasses import dataclass

from django import forms
from django.core import signing
from django.core.exceptions import ValidationError
from django.db.models import Q

from jobs.models import AuditEntry

from .forms import page_cursor, paging_fields
from .pagination import DEFAULT_LIMIT

SALT = "jobsite.dashboard.audit-cursor"
# The actions written today, offered as suggestions; the filter takes any text.
KNOWN_ACTIONS = (
    "retry",
    "rerun",
    "cancel",
    "run now",
    "discard",
    "bulk retry",
    "bulk cancel",
    "bulk discard",
    "pause",
    "resume",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditPage:
    rows: list
    next_cursor: str | None
    is_first: bool


class AuditFilterForm(forms.Form):
    user = forms.CharField(required=False, max_length=150)
    action = forms.CharField(required=False, max_length=32)
    job = forms.CharField(required=False, max_length=36, label="Job id")
    cursor, limit = paging_fields()

    def clean_user(self):
        return _no_nul(self.cleaned_data["user"].strip())

    def clean_action(self):
        return _no_nul(self.cleaned_data["action"].strip())

    def clean_job(self):
        text = self.cleaned_data["job"].strip()
        if not text:
            return None
        try:
            return uuid.UUID(text)
        except ValueError:
            raise ValidationError("Give a job's whole id, as its page shows it.") from None

    def clean_cursor(self):
        errors = (signing.BadSignature, ValueError, TypeError)
        return page_cursor(self.cleaned_data["cursor"], _decode_cursor, errors)

    @property
    def filters(self) -> dict:
        """The filters given, blanks dropped, as they go in a link."""
        data = self.cleaned_data
        return {k: str(data[k]) for k in ("user", "action", "job") if data.get(k)}

    def page(self) -> AuditPage | None:
        """The page the form asks for; None when a filter was refused."""
        if not self.is_valid():
            return None
        data = self.cleaned_data
        limit = data["limit"] or DEFAULT_LIMIT
        entries = AuditEntry.objects.all()
        if data["user"]:
            entries = entries.filter(username=data["user"])
        if data["action"]:
            entries = entries.filter(action=data["action"])
        if data["job"]:
            # A discarded job's entries name it in `subject`, their job link cleared.
            entries = entries.filter(Q(job_id=data["job"]) | Q(subject=str(data["job"])))
        if data["cursor"] is not None:
            entries = entries.filter(id__lt=data["cursor"])
        rows = list(entries.order_by("-id")[: limit + 1])
        next_cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            next_cursor = signing.dumps(rows[-1].id, salt=SALT)
        return AuditPage(rows=rows, next_cursor=next_cursor, is_first=data["cursor"] is None)


def _decode_cursor(text: str) -> int:
    return int(signing.loads(text, salt=SALT))


def _no_nul(text: str) -> str:
    if "\x00" in text:
        raise ValidationError("A filter cannot hold a NUL character.")
    return text
