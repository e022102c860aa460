"""The columns the engine writes by hand, derived from the models (`Job._meta`, `Attempt._meta`).

A field added to `Job` is inserted by `insert_job` without touching a statement, unless only a
later step writes it (`LATER`). The PostgreSQL types the statements cast to follow from each
field's kind; a column's special treatment at enqueue follows from its definition: a
`timezone.now` default is the database clock, an empty-string default turns None into "".
"""

from dataclasses import dataclass
from functools import cache
from typing import cast

from django.db import models
from django.utils import timezone

# Written by a claim or a finish, never by an enqueue.
LATER = frozenset(
    {
        "started_at",
        "return_value",
        "lease_id",
        "lease_expires_at",
        "cancel_requested_at",
        "snoozes",
        "snoozes_forgiven",
        "attempts_given_back",
    }
)
# Set at enqueue only for a job enqueued already finished (a continuation of a failed parent).
FINISHED_AT = "finished_at"

PG_TYPES = {
    "UUIDField": "uuid",
    "CharField": "text",
    "TextField": "text",
    "JSONField": "jsonb",
    "SmallIntegerField": "int",
    "IntegerField": "int",
    "PositiveIntegerField": "int",
    "PositiveSmallIntegerField": "int",
    "FloatField": "float8",
    "BooleanField": "boolean",
    "DateTimeField": "timestamptz",
}


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    pg_type: str
    is_uuid: bool
    is_time: bool
    is_json: bool
    nullable: bool
    # The database clock when the row leaves it empty (a `timezone.now` default).
    defaults_to_now: bool
    # None is stored as "" (a not-null text column whose default is "").
    empty_text: bool
    # What a not-null column with a constant default takes when the row leaves it out.
    fallback: object = None


def _column_name(field: models.Field) -> str:
    return cast(str, field.column)  # a concrete field's column is never None


def _column(field: models.Field) -> Column:
    target = field.target_field if isinstance(field, models.ForeignKey) else field
    kind = target.get_internal_type()
    return Column(
        name=_column_name(field),
        pg_type=PG_TYPES[kind],
        is_uuid=kind == "UUIDField",
        is_time=kind == "DateTimeField",
        is_json=kind == "JSONField",
        nullable=field.null,
        defaults_to_now=field.default is timezone.now,
        empty_text=not field.null and field.default == "",
        fallback=None
        if field.null or callable(field.default) or field.default is models.NOT_PROVIDED
        else field.default,
    )


@cache
def job_inserted() -> tuple[Column, ...]:
    """The columns of a new job row, in the model's order (the id first)."""
    from ..models import Job

    return tuple(_column(f) for f in Job._meta.concrete_fields if f.name not in LATER)


@cache
def attempt_row() -> tuple[str, ...]:
    """The columns of an attempt row (all but its own key)."""
    from ..models import Attempt

    return tuple(_column_name(f) for f in Attempt._meta.concrete_fields if not f.primary_key)
