"""Keyset pagination, newest first, of the console's lists and the API's: no OFFSET, no COUNT.

A cursor is the (time, id) of the last row shown, signed so a page only takes back what it
handed out; the next page holds the rows strictly after it in the order `time DESC, id DESC`.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.core import signing
from django.db.models import Q

from jobs.listing import Order

SALT = "jobsite.dashboard.cursor"
# The lists not of jobs by enqueue time (jobs.listing has those), each on its table's row.
FINISHED = Order("finished_at")  # dead letters
CREATED = Order("created_at")  # workflows
# Page sizes, of the console and the API alike.
DEFAULT_LIMIT = 50
MAX_LIMIT = 500


class InvalidCursor(ValueError):
    pass


@dataclass(frozen=True, kw_only=True, slots=True)
class Cursor:
    at: datetime
    id: uuid.UUID

    def encode(self) -> str:
        return signing.dumps([self.at.isoformat(), self.id.hex], salt=SALT)

    @classmethod
    def decode(cls, text: str) -> "Cursor":
        try:
            at, job_id = signing.loads(text, salt=SALT)
            moment = datetime.fromisoformat(at)
            if moment.tzinfo is None:
                raise ValueError("cursor time without a zone")
            return cls(at=moment, id=uuid.UUID(hex=job_id))
        except (signing.BadSignature, ValueError, TypeError, AttributeError) as exc:
            raise InvalidCursor("not a cursor from this page") from exc


@dataclass(frozen=True, kw_only=True, slots=True)
class Page:
    rows: list
    next_cursor: str | None
    # Is this the first page (no cursor given)?
    is_first: bool


def keyset_page(queryset, *, order: Order, cursor: Cursor | None, limit: int) -> Page:
    """One page of `queryset` in `order`: its time, then id, both descending."""
    if cursor is not None:
        # (time, id) < (cursor.at, cursor.id), with the first term alone as a bound the
        # planner can use for an index range; the OR by itself would not be.
        queryset = queryset.filter(**{f"{order.time}__lte": cursor.at}).filter(
            Q(**{f"{order.time}__lt": cursor.at}) | Q(**{f"{order.id}__lt": cursor.id})
        )
    rows = list(queryset.order_by(*order.order_by)[: limit + 1])
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        next_cursor = Cursor(at=getattr(last, order.row_time), id=last.id).encode()
    return Page(rows=rows, next_cursor=next_cursor, is_first=cursor is None)
