"""Which index a list of jobs walks (jobs/listing.py), and the list orders written once."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard import queries
from dashboard.pagination import Cursor
from jobs import listing
from jobs.models import Job, Listing
from jobs.search import COMMON_IN_PROBE
from jobs.states import JobState
from tests.factories import make_job

pytestmark = pytest.mark.django_db

on_postgres = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="PostgreSQL keeps the list orders apart"
)


def order_of(**filters):
    return listing.newest_first(Job.objects.all(), **filters)[1]


def page_plan(**filters) -> str:
    """The plan of the first page of the console's job list with these filters."""
    with CaptureQueriesContext(connection) as captured:
        queries.jobs_page(filters, cursor=None, limit=50)
    sql = captured.captured_queries[-1]["sql"]
    with connection.cursor() as cursor:
        # A small table: which index gives the order, if any does.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("EXPLAIN " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_a_list_by_state_alone_walks_the_state_index_on_the_job_row():
    assert order_of(state=JobState.RUNNING) == listing.ON_THE_ROW


def test_sqlite_walks_every_list_on_the_job_row():
    if listing.kept_apart():
        pytest.skip("SQLite's layout")
    for filters in ({}, {"queue": "default"}, {"task": "tests.tasks.add"}):
        assert order_of(**filters) == listing.ON_THE_ROW


@on_postgres
def test_a_new_job_s_list_order_is_written_beside_it():
    job = make_job(queue_name="emails", task_path="tests.tasks.record")

    listed = Listing.objects.get(pk=job.id)

    assert (listed.enqueued_at, listed.queue_name, listed.task_path) == (
        job.enqueued_at,
        "emails",
        "tests.tasks.record",
    )


@on_postgres
def test_a_changed_enqueue_time_queue_or_task_is_followed_by_its_listing():
    job = make_job()
    earlier = job.enqueued_at - timedelta(days=1)

    Job.objects.filter(id=job.id).update(
        enqueued_at=earlier, queue_name="later", task_path="tests.tasks.record"
    )

    listed = Listing.objects.get(pk=job.id)
    assert (listed.enqueued_at, listed.queue_name, listed.task_path) == (
        earlier,
        "later",
        "tests.tasks.record",
    )


@on_postgres
def test_a_deleted_job_leaves_no_listing_behind():
    job = make_job(JobState.SUCCEEDED)

    Job.objects.filter(id=job.id).delete()

    assert not Listing.objects.filter(pk=job.id).exists()


@on_postgres
@pytest.mark.parametrize(
    ("filters", "index"),
    [
        ({}, "listing_recent"),
        ({"queue": "emails"}, "listing_queue_recent"),
        ({"task": "tests.tasks.add"}, "listing_task_recent"),
    ],
)
def test_the_lists_newest_first_by_queue_and_by_task_walk_the_listing(filters, index):
    for n in range(5):
        make_job(queue_name="emails", enqueued_at=timezone.now() - timedelta(seconds=n))

    plan = page_plan(**filters)

    assert re.search(rf"Index (Only )?Scan using {index} on jobs_searchtext", plan), plan
    assert "Sort" not in plan, plan


@on_postgres
@pytest.mark.parametrize(
    ("column", "name", "rare", "usual"),
    [
        ("queue_name", "queue", "rare", "default"),
        ("task_path", "task", "tests.tasks.record", "tests.tasks.add"),
    ],
)
def test_a_list_by_state_and_queue_or_task_walks_whichever_holds_fewer_jobs(
    column, name, rare, usual
):
    for _ in range(3):
        make_job(JobState.SUCCEEDED, **{column: rare})
    for _ in range(10):
        make_job(JobState.SUCCEEDED)
    make_job(JobState.DEAD_LETTER)

    assert order_of(state=JobState.SUCCEEDED, **{name: rare}) == listing.LISTED
    assert order_of(state=JobState.DEAD_LETTER, **{name: usual}) == listing.ON_THE_ROW


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"queue": "rare"},
        {"task": "tests.tasks.record"},
        {"state": JobState.SUCCEEDED, "queue": "rare"},
        {"state": JobState.SUCCEEDED, "task": "tests.tasks.add"},
    ],
)
def test_every_list_pages_its_jobs_once_newest_first_whichever_index_it_walks(filters):
    start = timezone.now() - timedelta(hours=1)
    for n in range(12):
        make_job(
            JobState.SUCCEEDED if n % 2 else JobState.PENDING,
            queue_name="rare" if n % 3 == 0 else "default",
            task_path="tests.tasks.record" if n % 4 == 0 else "tests.tasks.add",
            # Pairs of jobs share an enqueue time: the id orders them.
            enqueued_at=start + timedelta(seconds=n // 2),
        )
    expected = [job.id for job in queries.filtered_jobs(**filters).order_by("-enqueued_at", "-id")]
    seen, cursor = [], None
    while True:
        page = queries.jobs_page(filters, cursor=cursor, limit=2)
        seen += [job.id for job in page.rows]
        if page.next_cursor is None:
            break
        cursor = Cursor.decode(page.next_cursor)

    assert expected and seen == expected


def page_sql(**filters) -> str:
    with CaptureQueriesContext(connection) as captured:
        queries.jobs_page(filters, cursor=None, limit=50)
    return captured.captured_queries[-1]["sql"]


@on_postgres
def test_a_rare_text_s_matches_are_sorted_on_the_job_row_and_a_common_one_walks_the_listing():
    for n in range(COMMON_IN_PROBE):
        make_job(kwargs={"email": f"ann-{n}@example.com"})
    make_job(kwargs={"email": "bob@example.org"})
    joined = 'INNER JOIN "jobs_searchtext"'

    assert joined in page_sql(q="example.com")
    assert joined not in page_sql(q="bob@example.org")
