"""Times a job carries: refused at every way in when Python or a database could not hold them,
and rows stored out of range by an earlier version mended instead of breaking every page."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection
from django.test import Client

from jobs import maintenance, moments
from jobs.compat import InvalidTask
from jobs.models import Job
from jobs.states import JobState
from tests import tasks
from tests.factories import make_job

pytestmark = pytest.mark.django_db

PLUS_14 = timezone(timedelta(hours=14))
MINUS_14 = timezone(timedelta(hours=-14))
# Legal in Python, yet year 10000 or 1 BC in UTC, or a moment no time zone can show.
OUT_OF_RANGE = [
    datetime(9999, 12, 31, 23, 59, 59, tzinfo=MINUS_14),
    datetime(1, 1, 1, 0, 0, 0, tzinfo=PLUS_14),
    datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
    datetime(1, 1, 1, tzinfo=UTC),
    moments.LATEST + timedelta(microseconds=1),
    moments.EARLIEST - timedelta(microseconds=1),
]


@pytest.mark.parametrize("when", OUT_OF_RANGE, ids=str)
@pytest.mark.parametrize("name", ["run_after", "not_after"])
def test_a_time_out_of_range_is_refused_by_using_and_nothing_is_stored(name, when):
    with pytest.raises(InvalidTask, match=f"{name} .* is out of range"):
        tasks.add.using(**{name: when}).enqueue(1, 2)

    assert not Job.objects.exists()


@pytest.mark.parametrize("when", OUT_OF_RANGE[:2], ids=str)
def test_a_time_out_of_range_is_refused_by_enqueue_many(when):
    with pytest.raises(InvalidTask, match="out of range"):
        tasks.add.using(run_after=when).enqueue_many([((1, 2), {})])

    assert not Job.objects.exists()


@pytest.mark.parametrize("when", [moments.EARLIEST, moments.LATEST], ids=str)
def test_the_ends_of_the_range_are_stored_and_every_page_reads_them(admin_client, when):
    result = tasks.add.using(run_after=when, not_after=moments.LATEST).enqueue(1, 2)

    job = Job.objects.get(id=result.id)
    assert (job.run_after, job.not_after) == (when, moments.LATEST)
    for path in ("/", "/jobs/", f"/jobs/{job.id}/", "/queues/", "/api/v1/jobs"):
        assert admin_client.get(path).status_code == 200, path


def store_out_of_range(job, run_after, not_after=None):
    """Write times as an earlier version could (PostgreSQL kept them), past what Python reads."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_job SET run_after = %s::timestamptz, not_after = %s::timestamptz "
            "WHERE id = %s",
            [run_after, not_after, job.id],
        )


needs_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="only PostgreSQL stores years past 9999"
)


@needs_postgresql
def test_the_api_cancels_and_discards_a_job_stored_out_of_range(operator_headers):
    job = make_job(JobState.PENDING)
    store_out_of_range(job, "10000-01-01 13:59:59+00", "0001-12-31 10:00:00+00 BC")
    client = Client()

    cancelled = client.post(f"/api/v1/jobs/{job.id}/cancel", headers=operator_headers)
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == JobState.CANCELLED

    discarded = client.post(f"/api/v1/jobs/{job.id}/discard", headers=operator_headers)
    assert discarded.json() == {"discarded": str(job.id)}
    assert not Job.objects.filter(id=job.id).exists()


@needs_postgresql
def test_a_worker_starting_mends_rows_stored_out_of_range_and_the_pages_answer(admin_client):
    job = make_job(JobState.PENDING)
    store_out_of_range(job, "10000-01-01 13:59:59+00", "0001-12-31 10:00:00+00 BC")

    maintenance.run_due("w-test", round=1)

    assert Job.objects.get(id=job.id).run_after == moments.LATEST
    assert Job.objects.get(id=job.id).not_after == moments.EARLIEST
    for path in ("/", "/jobs/", f"/jobs/{job.id}/", "/queues/", "/api/v1/jobs"):
        assert admin_client.get(path).status_code == 200, path


def test_mending_leaves_rows_in_range_alone():
    job = make_job(JobState.PENDING, not_after=None)

    assert moments.repair_stored() == 0
    assert Job.objects.get(id=job.id).not_after is None


def test_a_moment_goes_to_whole_microseconds_and_back_exactly():
    utc = datetime(2026, 1, 1, 0, 0, 0, 250, tzinfo=UTC)
    assert moments.to_micros(utc) == 1_767_225_600_000_250
    india = datetime(
        2026, 11, 28, 11, 4, 3, 999_999, tzinfo=timezone(timedelta(hours=5, minutes=30))
    )
    assert moments.from_micros(moments.to_micros(india)) == india


def test_every_storable_moment_goes_to_microseconds_and_back_exactly():
    before_the_epoch = datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC)
    for moment in (moments.EARLIEST, before_the_epoch, moments.LATEST - timedelta(microseconds=1)):
        assert moments.from_micros(moments.to_micros(moment)) == moment
    assert moments.to_micros(before_the_epoch) == -999_999
