import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from dashboard.pagination import Cursor, keyset_page
from jobs.db.search_sql import search_numbers, search_strings
from jobs.listing import LISTED, ON_THE_ROW, newest_first
from jobs.models import Job
from jobs.search import COMMON_IN_PROBE, search
from jobs.states import JobState
from tests.factories import make_job
from tests.tasks import record

pytestmark = pytest.mark.django_db


def found(text, **kwargs):
    return set(
        search(Job.objects.all(), text, order=ON_THE_ROW, **kwargs).values_list("id", flat=True)
    )


def test_finds_a_string_argument_at_any_depth_ignoring_case():
    deep = make_job(kwargs={"report": {"columns": ["Revenue_EUR", "cost"]}})
    make_job(kwargs={"report": {"columns": ["cost"]}})
    assert found("revenue_eur") == {deep.id}
    assert found("REVENUE") == {deep.id}


def test_finds_a_number_argument_only_by_its_exact_decimal_text():
    invoice = make_job(args=[1003])
    make_job(args=[10030])
    nested = make_job(kwargs={"ids": [[7, 1003.5]]})
    assert found("1003") == {invoice.id}
    assert found("1003.5") == {nested.id}


def test_a_string_holding_digits_matches_by_substring():
    job = make_job(kwargs={"ref": "invoice-10030"})
    assert found("1003") == {job.id}


def test_finds_keys_values_not_key_names():
    make_job(kwargs={"customer_email": "a@b.c"})
    assert found("customer_email") == set()
    assert len(found("a@b.c")) == 1


def test_finds_by_dedup_key_error_type_and_error_message():
    keyed = make_job(dedup_key="Welcome-42")
    failed = make_job(
        JobState.DEAD_LETTER, error_type="SMTPServerDisconnected", error_message="Conn lost"
    )
    assert found("welcome-4") == {keyed.id}
    assert found("smtp") == {failed.id}
    assert found("CONN LOST") == {failed.id}


def test_finds_by_id_prefix_of_six_hex_characters_or_more():
    job = make_job()
    make_job()
    assert found(job.id.hex[:12]) == {job.id}
    assert found(str(job.id)[:13].upper()) == {job.id}
    assert found(str(job.id)) == {job.id}


def test_finds_by_part_of_a_task_path_given_the_known_paths():
    job = make_job(task_path="tests.tasks.send_invoice")
    assert found("send_inv", task_paths=["tests.tasks.send_invoice", "tests.tasks.add"]) == {job.id}


def test_wildcards_in_the_text_are_taken_literally():
    make_job(kwargs={"name": "abc"})
    percent = make_job(kwargs={"name": "50%_off"})
    assert found("%") == {percent.id}
    assert found("_") == {percent.id}


def test_search_text_functions_mirror_what_postgresql_computes():
    assert search_strings('[1, "A", {"b": ["C"]}]', '{"k": "D"}', "Key") == "a\nc\nd\nkey"
    assert search_numbers("[1, 2.5, true, null]", "{}") == " 1 2.5 "


def test_quotes_and_backslashes_are_found_too():
    job = make_job(kwargs={"note": 'say "hi" \\ there'})
    assert found('"hi"') == {job.id}
    assert found("\\ the") == {job.id}


def test_a_number_inside_a_string_is_not_a_number_match_but_a_text_one():
    text = make_job(kwargs={"ref": "x1003"})
    number = make_job(args=[1003])
    assert found("1003") == {text.id, number.id}
    assert found("x100") == {text.id}


def test_a_text_many_jobs_hold_pages_through_every_match_newest_first():
    start = timezone.now() - timedelta(hours=1)
    common = [
        make_job(
            JobState.DEAD_LETTER,
            error_type="ConnectionError",
            error_message=f"SMTP refused ({n})",
            enqueued_at=start + timedelta(seconds=n),
        )
        for n in range(3 * COMMON_IN_PROBE)
    ]
    make_job(JobState.DEAD_LETTER, error_type="KeyError", error_message="'customer_id'")
    seen, cursor = [], None
    while True:
        page = keyset_page(
            search(Job.objects.all(), "smtp", order=ON_THE_ROW),
            order=ON_THE_ROW,
            cursor=cursor,
            limit=4,
        )
        seen += [job.id for job in page.rows]
        if page.next_cursor is None:
            break
        cursor = Cursor.decode(page.next_cursor)
    assert seen == [job.id for job in reversed(common)]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL plan choice")
def test_a_page_of_a_text_common_among_the_newest_jobs_is_matched_row_by_row():
    for n in range(COMMON_IN_PROBE):
        make_job(kwargs={"email": f"ann-{n}@example.com"})
    make_job(kwargs={"email": "bob@example.org"})
    common = search(Job.objects.all(), "example.com", order=ON_THE_ROW)
    rare = search(Job.objects.all(), "bob@", order=ON_THE_ROW)
    assert "WHERE COALESCE(" in str(common.order_by("-enqueued_at")[:50].query)
    assert "COALESCE(" not in str(common.query)  # every match, or a count: through the index
    assert "COALESCE(" not in str(rare.order_by("-enqueued_at")[:50].query)
    assert common.count() == COMMON_IN_PROBE and len(common[:50]) == COMMON_IN_PROBE
    assert found("bob@") == {Job.objects.get(kwargs__email="bob@example.org").id}


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's listing rows")
def test_a_common_texts_page_in_the_listed_order_reads_the_arguments_text_of_the_listing():
    jobs = [make_job(kwargs={"email": f"ann-{n}@example.com"}) for n in range(COMMON_IN_PROBE)]
    changed = make_job(kwargs={"email": "bob@example.org"})
    Job.objects.filter(id=changed.id).update(kwargs={"email": "cy@example.com"})
    listed, order = newest_first(Job.objects.all())
    assert order == LISTED
    page = search(listed, "example.com", order=order).order_by(*order.order_by)[:50]
    assert '"jobs_searchtext"."text"' in str(page.query)
    assert "args::text" not in str(page.query)
    assert {job.id for job in page} == {job.id for job in jobs} | {changed.id}


def _search_text_rows(job):
    """The job's search text and where it is stored: a rewrite moves it, even within the
    test's one transaction (which every row version it writes shares as its xmin)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT ctid::text, text FROM jobs_searchtext WHERE job_id = %s", [job.id])
        return cursor.fetchall()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's search text table")
def test_claims_and_finishes_never_rewrite_a_jobs_search_text():
    job = make_job(kwargs={"email": "ann@example.com"})
    [(stored_at, text)] = _search_text_rows(job)
    assert "ann@example.com" in text
    Job.objects.filter(id=job.id).update(
        state=JobState.RUNNING, attempt=1, lease_id=job.id, started_at=timezone.now()
    )
    Job.objects.filter(id=job.id).update(state=JobState.SUCCEEDED, finished_at=timezone.now())
    assert _search_text_rows(job) == [(stored_at, text)]
    assert found("ann@") == {job.id}
    assert "jobs_searchtext" in str(
        search(Job.objects.all(), "ann@", order=ON_THE_ROW).order_by("-id")[:50].query
    )


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's search text table")
def test_arguments_changed_after_enqueue_are_found_by_their_new_text_only():
    job = make_job(kwargs={"email": "ann@example.com"}, dedup_key="first-key")
    Job.objects.filter(id=job.id).update(kwargs={"email": "bob@example.org"}, dedup_key="second")
    assert found("bob@") == {job.id}
    assert found("second") == {job.id}
    assert found("ann@") == set() and found("first-key") == set()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's search text table")
def test_a_deleted_job_leaves_no_search_text_behind():
    kept, gone = make_job(args=["kept"]), make_job(args=["gone"])
    Job.objects.filter(id=gone.id).delete()
    assert _search_text_rows(gone) == []
    assert len(_search_text_rows(kept)) == 1


def test_a_changed_or_cleared_error_is_found_by_its_new_text_only():
    job = make_job(JobState.DEAD_LETTER, error_type="KeyError", error_message="'customer_id'")
    Job.objects.filter(id=job.id).update(error_type="TimeoutError", error_message="took 31 s")
    assert found("customer_id") == set() and found("keyerror") == set()
    assert found("took 31") == {job.id} and found("timeouterror") == {job.id}
    Job.objects.filter(id=job.id).update(error_type="", error_message="")
    assert found("took 31") == set()


def test_jobs_enqueued_one_at_a_time_and_in_bulk_are_found_by_their_arguments():
    one = record.enqueue("invoice-7781")
    many = record.enqueue_many([(("invoice-7782",), {}), (("receipt-12",), {})])
    ids = [uuid.UUID(str(i)) for i in (one.id, *many)]
    assert found("INVOICE-778") == {ids[0], ids[1]}
    assert found("receipt-12") == {ids[2]}
