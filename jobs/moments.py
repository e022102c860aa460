"""The moments a job can carry: what Python and both databases hold, read in any time zone.

PostgreSQL keeps years up to 294276 and back to 4713 BC, Python only years 1 to 9999: a time
like 9999-12-31T23:59:59-14:00 is year 10000 in UTC, stored by PostgreSQL and then unreadable
by every page that lists it. A day of margin at each end keeps a stored moment readable in any
time zone (offsets are less than a day).
"""

from datetime import UTC, datetime, timedelta

EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, tzinfo=UTC)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(moment: datetime) -> int:
    """An aware moment as whole microseconds since the epoch: exact, and far cheaper to send
    than the datetime itself (to an executor) or its ISO text (to PostgreSQL)."""
    return (moment - _EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    """The aware moment (in UTC) that to_micros made `micros` of."""
    # Multiplying the one-microsecond delta is exact and half the cost of building a
    # timedelta from a keyword (the worker turns two of these back per attempt).
    return _EPOCH + _MICROSECOND * micros


def refusal(name: str, value: datetime) -> str | None:
    """Why the aware datetime `value` cannot be stored as `name`, or None when it can."""
    try:
        in_range = EARLIEST <= value.astimezone(UTC) <= LATEST
    except OverflowError:
        in_range = False
    if in_range:
        return None
    return (
        f"{name} {value.isoformat()} is out of range: give a time from "
        f"{EARLIEST.date().isoformat()} to {LATEST.date().isoformat()} (UTC)"
    )


def repair_stored(job_ids=None) -> int:
    """Bring run_after and not_after stored out of range (by an earlier version) back to the
    nearest end, in one UPDATE that never reads them; only the jobs `job_ids` when given.

    Reading such a row fails, so SQL compares and rewrites it: a time past LATEST meant
    "never" and a time before EARLIEST "at once", as the ends still mean. Returns rows changed.
    """
    from django.db.models import Case, F, Q, Value, When

    from .models import Job

    def clamped(field):
        return Case(
            When(**{f"{field}__gt": LATEST}, then=Value(LATEST)),
            When(**{f"{field}__lt": EARLIEST}, then=Value(EARLIEST)),
            default=F(field),
        )

    fields = ("run_after", "not_after")
    outside = Q()
    for field in fields:
        outside |= Q(**{f"{field}__gt": LATEST}) | Q(**{f"{field}__lt": EARLIEST})
    jobs = Job.objects.filter(outside)
    if job_ids is not None:
        jobs = jobs.filter(id__in=job_ids)
    return jobs.update(**{field: clamped(field) for field in fields})
