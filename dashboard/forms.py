"""The GET filters of the lists and the POST of a bulk retry, validated before any query runs."""

import uuid

from django import forms
from django.core.exceptions import ValidationError

from jobs.states import JobState

from . import json_input
from .pagination import DEFAULT_LIMIT, MAX_LIMIT, Cursor, InvalidCursor

# A bulk action touches at most this many jobs, so one click cannot stall the database.
BULK_CAP = 1_000


def paging_fields():
    """The hidden fields of every paged list's form: where its page starts (`cursor`, decoded
    with `page_cursor`) and how many rows the page holds (`limit`)."""
    return (
        forms.CharField(required=False, max_length=200, widget=forms.HiddenInput),
        forms.IntegerField(
            required=False, min_value=1, max_value=MAX_LIMIT, widget=forms.HiddenInput
        ),
    )


def page_cursor(text: str, decode, errors=(InvalidCursor,)):
    """The cursor a page link carries, decoded; None on the first page, refused when broken."""
    if not text:
        return None
    try:
        return decode(text)
    except errors as exc:
        raise ValidationError("This page link is broken; start from the first page.") from exc


class ListFilterForm(forms.Form):
    queue = forms.CharField(required=False, max_length=100)
    task = forms.CharField(required=False, max_length=255)
    q = forms.CharField(required=False, max_length=200, label="Search")
    cursor, limit = paging_fields()

    def clean_cursor(self):
        return page_cursor(self.cleaned_data["cursor"], Cursor.decode)

    def clean_limit(self):
        return self.cleaned_data["limit"] or DEFAULT_LIMIT

    def page(self, fetch):
        """What `fetch(filters, cursor=, limit=)` gives for the page the form asks for (the dead
        letters: their `DeadLetterList`); None when invalid."""
        if not self.is_valid():
            return None
        data = self.cleaned_data
        return fetch(self.filters, cursor=data["cursor"], limit=data["limit"])

    @property
    def filters(self):
        """The cleaned filters that narrow the rows (not the paging), blanks dropped."""
        paging = {"cursor", "limit"}
        return {k: v for k, v in self.cleaned_data.items() if k not in paging and v}


class JobFilterForm(ListFilterForm):
    state = forms.ChoiceField(required=False, choices=[("", "Any state"), *JobState.choices])
    # The nodes of one workflow or batch (its page links here).
    workflow = forms.UUIDField(required=False, widget=forms.HiddenInput)
    field_order = ["state", "queue", "task", "q"]


class DeadLetterFilterForm(ListFilterForm):
    error = forms.CharField(required=False, max_length=255, label="Error type")
    field_order = ["task", "error", "queue", "q"]


class BulkRetryForm(forms.Form):
    """Step one names the jobs (ticked rows, or every match of the filter); step two confirms.

    The confirmation carries its ids in one field, `id_list`: a thousand separate fields would
    pass Django's DATA_UPLOAD_MAX_NUMBER_FIELDS.
    """

    SELECTED = "selected"
    MATCHING = "matching"

    scope = forms.ChoiceField(choices=[(SELECTED, SELECTED), (MATCHING, MATCHING)])
    ids = forms.TypedMultipleChoiceField(required=False, coerce=str)
    id_list = forms.CharField(required=False, max_length=BULK_CAP * 40)
    confirm = forms.BooleanField(required=False)

    def __init__(self, data=None, **kwargs):
        super().__init__(data, **kwargs)
        # Any well-formed id is a valid choice; whether it is a dead letter is the action's call.
        self.fields["ids"].valid_value = lambda value: True

    def clean(self):
        cleaned = super().clean()
        listed = [v for v in cleaned.get("id_list", "").split(",") if v.strip()]
        values = [*cleaned.get("ids", []), *listed]
        try:
            ids = list(dict.fromkeys(uuid.UUID(value.strip()) for value in values))
        except ValueError as exc:
            raise ValidationError("One of the selected ids is not a job id.") from exc
        if len(ids) > BULK_CAP:
            raise ValidationError(f"At most {BULK_CAP:,} jobs per action.")
        cleaned["ids"] = ids
        return cleaned


class BulkActionForm(forms.Form):
    """An action over every job a filter matches: the filter fields of both lists, plus what."""

    action = forms.ChoiceField(
        choices=[("retry", "Retry"), ("cancel", "Cancel"), ("discard", "Discard")]
    )
    state = forms.ChoiceField(required=False, choices=[("", "Any state"), *JobState.choices])
    queue = forms.CharField(required=False, max_length=100)
    task = forms.CharField(required=False, max_length=255)
    error = forms.CharField(required=False, max_length=255)
    q = forms.CharField(required=False, max_length=200)
    workflow = forms.UUIDField(required=False)
    # The count the operator saw on the confirmation page; present only on the second step.
    confirm = forms.BooleanField(required=False)

    @property
    def filters(self):
        names = ("state", "queue", "task", "error", "q", "workflow")
        return {k: self.cleaned_data[k] for k in names if self.cleaned_data.get(k)}


class EditRerunForm(forms.Form):
    """New arguments for a rerun, as JSON text; checked like an enqueue by `jobs.actions`."""

    args = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 4}))
    kwargs = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 4}))

    def _json(self, name, kind, words):
        text = self.cleaned_data[name].strip()
        if not text:
            return kind()
        try:
            value = json_input.loads(text)
        except RecursionError:
            raise ValidationError("Nested too deeply.") from None
        except json_input.UnfitNumber as exc:  # valid JSON, but no job may carry it
            raise ValidationError(f"{str(exc)[0].upper()}{str(exc)[1:]}.") from None
        except ValueError as exc:
            raise ValidationError(f"Not valid JSON: {exc}") from None
        if not isinstance(value, kind):
            raise ValidationError(f"{name} must be a JSON {words}.")
        return value

    def clean_args(self):
        return self._json("args", list, 'list, like [1, "two"]')

    def clean_kwargs(self):
        return self._json("kwargs", dict, 'object, like {"key": "value"}')


class LimitForm(forms.Form):
    """Set a limit for every worker: blank fields mean no limit of that kind."""

    name = forms.CharField(max_length=255, help_text="queue:NAME, task:DOTTED.PATH or key:GLOB")
    concurrency = forms.IntegerField(required=False, min_value=1, label="Concurrency")
    rate_count = forms.IntegerField(required=False, min_value=1, label="Starts")
    rate_seconds = forms.FloatField(required=False, min_value=0.001, label="per seconds")

    def clean(self):
        data = super().clean()
        count, seconds = data.get("rate_count"), data.get("rate_seconds")
        if "rate_count" in self.errors or "rate_seconds" in self.errors:
            return data  # a value refused on its own: already said
        if (count is None) != (seconds is None):
            raise forms.ValidationError("a rate needs both its number of starts and its seconds")
        return data

    def rate(self):
        count, seconds = self.cleaned_data["rate_count"], self.cleaned_data["rate_seconds"]
        return None if count is None else [count, seconds]
