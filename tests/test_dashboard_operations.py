"""The console's operator features: search, queues, discard, edit and rerun, bulk by filter."""

import re
from contextlib import contextmanager

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from jobs import queues
from jobs.models import AuditEntry, Job
from jobs.states import JobState
from tests.factories import make_job
from tests.reliability_helpers import another_session

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client(client, django_user_model):
    user = django_user_model.objects.create_user("olivia", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(codename="operate_job", content_type__app_label="jobs")
    )
    client.force_login(user)
    return client


@pytest.fixture
def viewer_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("victor", is_staff=True))
    return client


def buttons_in(html: str) -> list[str]:
    return re.findall(r"<button[^>]*>\s*([^<]*?)\s*</button>", html)


# Search.


def test_the_job_list_finds_a_job_by_an_argument(operator_client):
    wanted = make_job(args=[1003])
    other = make_job(args=[10030])
    html = operator_client.get("/jobs/?q=1003", headers={"HX-Request": "true"}).content.decode()
    assert str(wanted.id) in html
    assert str(other.id) not in html


def test_the_dead_letters_find_a_job_by_its_error_message(operator_client):
    wanted = make_job(JobState.DEAD_LETTER, error_message="SMTP connection refused")
    make_job(JobState.DEAD_LETTER, error_message="disk full")
    html = operator_client.get("/dead-letters/?q=smtp").content.decode()
    assert str(wanted.id)[:8] in html
    assert "disk full" not in html


def test_the_dead_letters_group_and_list_every_job_a_common_error_names(operator_client):
    # Enough matches among the newest jobs for the search to walk them row by row.
    wanted = [
        make_job(JobState.DEAD_LETTER, error_type="SMTPError", error_message=f"refused ({n})")
        for n in range(4)
    ]
    make_job(JobState.DEAD_LETTER, error_message="disk full")
    html = operator_client.get("/dead-letters/?q=smtp").content.decode()
    assert all(str(job.id)[:8] in html for job in wanted)
    assert "disk full" not in html
    assert re.findall(r'<td class="num">(\d+)</td>', html) == ["4"]


def test_a_search_that_matches_nothing_answers_an_empty_list(operator_client):
    make_job(JobState.DEAD_LETTER)
    for path in ("/dead-letters/?q=no-such-thing", "/jobs/?q=no-such-thing"):
        response = operator_client.get(path)
        assert response.status_code == 200
        assert b"match" in response.content


def test_a_forged_list_cursor_is_a_400(operator_client):
    for path in ("/jobs/?cursor=9999-12-31T23:59:59-23:59", "/dead-letters/?cursor=abc"):
        response = operator_client.get(path)
        assert response.status_code == 400
        assert b"page link is broken" in response.content


def test_the_next_page_link_of_a_search_is_signed_and_works(operator_client):
    jobs = [make_job(kwargs={"customer": "acme"}) for _ in range(3)]
    first = operator_client.get("/jobs/?q=acme&limit=2").content.decode()
    older = re.search(r'href="(/jobs/\?[^"]*cursor=[^"]+)"[^>]*>Older', first).group(1)
    second = operator_client.get(older.replace("&amp;", "&"))
    assert second.status_code == 200
    shown = [j for j in jobs if str(j.id)[:8] in first + second.content.decode()]
    assert len(shown) == 3


# Queues.


def test_the_queues_page_lists_every_queue_with_counts_and_a_pause_button(operator_client):
    make_job(JobState.PENDING, queue_name="emails")
    make_job(JobState.DEAD_LETTER, queue_name="emails")
    queues.pause("reports")
    html = operator_client.get("/queues/").content.decode()
    assert "emails" in html and "reports" in html
    assert "Paused" in html
    assert buttons_in(html).count("Pause") == 1
    assert buttons_in(html).count("Resume") == 1


def test_pause_and_resume_from_the_console(operator_client):
    make_job(JobState.PENDING, queue_name="emails")
    response = operator_client.post(reverse("dashboard:queue_pause", args=["emails"]), follow=True)
    assert queues.is_paused("emails")
    assert b"queue emails paused" in response.content
    operator_client.post(reverse("dashboard:queue_resume", args=["emails"]))
    assert not queues.is_paused("emails")
    assert AuditEntry.objects.filter(subject="emails", source="dashboard").count() == 2


def test_without_the_messages_framework_actions_work_and_answer_without_an_error(
    operator_client, settings
):
    settings.MIDDLEWARE = [
        m
        for m in settings.MIDDLEWARE
        if m != "django.contrib.messages.middleware.MessageMiddleware"
    ]
    settings.TEMPLATES = [
        {
            **engine,
            "OPTIONS": {
                **engine["OPTIONS"],
                "context_processors": [
                    p for p in engine["OPTIONS"]["context_processors"] if "messages" not in p
                ],
            },
        }
        for engine in settings.TEMPLATES
    ]
    paused = operator_client.post(reverse("dashboard:queue_pause", args=["emails"]), follow=True)
    assert paused.status_code == 200 and queues.is_paused("emails")
    job = make_job(JobState.DEAD_LETTER, finished_at=timezone.now(), attempt=3)
    retried = operator_client.post(reverse("dashboard:retry", args=[job.id]), follow=True)
    assert retried.status_code == 200
    job.refresh_from_db()
    assert job.state == JobState.PENDING


@pytest.mark.django_db(transaction=True)
def test_an_action_the_database_cannot_take_now_answers_503_saying_so(operator_client):
    from jobs.models import PausedQueue

    table = PausedQueue._meta.db_table
    sqlite = connection.vendor == "sqlite"
    with connection.cursor() as cursor, holding_the_write_lock(table):
        cursor.execute("PRAGMA busy_timeout = 100" if sqlite else "SET lock_timeout = '100ms'")
        try:
            response = operator_client.post(reverse("dashboard:queue_pause", args=["emails"]))
        finally:
            with connection.cursor() as again:
                again.execute("PRAGMA busy_timeout = 30000" if sqlite else "RESET lock_timeout")
    assert response.status_code == 503
    html = response.content.decode()
    assert "Database unavailable" in html
    assert "The database is unavailable right now; try again shortly." in html
    assert not queues.is_paused("emails")


@contextmanager
def holding_the_write_lock(table):
    """Another session holds what a write to `table` needs, as a long transaction would."""
    if connection.vendor == "sqlite":
        import sqlite3

        other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
    else:
        other = another_session()
        other.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
    try:
        yield
    finally:
        other.rollback()
        other.close()


def test_a_queue_name_with_a_slash_can_be_paused(operator_client):
    operator_client.post(reverse("dashboard:queue_pause", args=["team/a"]))
    assert queues.is_paused("team/a")


def test_a_read_only_user_sees_no_queue_buttons_and_cannot_pause(viewer_client):
    make_job(JobState.PENDING, queue_name="emails")
    html = viewer_client.get("/queues/").content.decode()
    assert "Pause" not in buttons_in(html)
    response = viewer_client.post(reverse("dashboard:queue_pause", args=["emails"]))
    assert response.status_code == 403
    assert not queues.is_paused("emails")


# Discard.


def test_the_discard_form_asks_first(operator_client):
    job = make_job(JobState.DEAD_LETTER)
    html = operator_client.get(f"/jobs/{job.id}/").content.decode()
    form = re.search(r'<form[^>]*action="/jobs/[^"]+/discard/"[^>]*>', html).group(0)
    assert 'data-confirm="Discard this job and its attempts? This cannot be undone."' in form


def test_discard_deletes_the_job_and_goes_to_the_list(operator_client):
    job = make_job(JobState.SUCCEEDED)
    response = operator_client.post(
        reverse("dashboard:discard", args=[job.id]), {"next": f"/jobs/{job.id}/"}, follow=True
    )
    assert response.redirect_chain[-1][0] == "/jobs/"
    assert b"discarded" in response.content
    assert not Job.objects.filter(id=job.id).exists()


def test_discard_under_htmx_redirects_the_browser(operator_client):
    job = make_job(JobState.SUCCEEDED)
    response = operator_client.post(
        reverse("dashboard:discard", args=[job.id]),
        {"next": "/dead-letters/"},
        headers={"HX-Request": "true"},
    )
    assert response["HX-Redirect"] == "/dead-letters/"


def test_discard_of_a_pending_job_changes_nothing_and_says_why(operator_client):
    job = make_job(JobState.PENDING)
    response = operator_client.post(reverse("dashboard:discard", args=[job.id]), follow=True)
    assert b"only finished jobs can be discarded" in response.content
    assert Job.objects.filter(id=job.id).exists()


def test_a_read_only_user_cannot_discard(viewer_client):
    job = make_job(JobState.SUCCEEDED)
    assert "Discard" not in buttons_in(viewer_client.get(f"/jobs/{job.id}/").content.decode())
    assert viewer_client.post(reverse("dashboard:discard", args=[job.id])).status_code == 403
    assert Job.objects.filter(id=job.id).exists()


# Edit and rerun.


def test_edit_and_rerun_runs_the_new_arguments(operator_client):
    job = make_job(JobState.DEAD_LETTER, args=[1, 0], kwargs={})
    response = operator_client.post(
        reverse("dashboard:rerun", args=[job.id]),
        {"edit": "1", "args": "[1, 2]", "kwargs": '{"note": "fixed"}', "token": "t1"},
        follow=True,
    )
    assert response.status_code == 200
    new = Job.objects.get(rerun_of=job)
    assert (new.args, new.kwargs) == ([1, 2], {"note": "fixed"})
    page = operator_client.get(f"/jobs/{job.id}/").content.decode()
    assert "arguments were" in page


@pytest.mark.parametrize(
    ("args", "kwargs", "shown"),
    [
        ("[1, 2", "{}", "Not valid JSON"),
        ('{"a": 1}', "{}", "args must be a JSON list"),
        ("[]", "[1]", "kwargs must be a JSON object"),
        ("[]", '{"to": "a@x", "to": "b@x"}', "the key &#x27;to&#x27; appears twice"),
        ("[NaN]", "{}", "NaN"),
        ('["a\\u0000b"]', "{}", "NUL"),
        ("[" * 100_000, "{}", "Nested too deeply"),
        ('["' + "x" * 2_000_000 + '"]', "{}", "over the limit of 1,048,576"),
        ("[" + "9" * 5001 + "]", "{}", "An integer of 5,001 digits is longer than the 4,300"),
        ("[1e400]", "{}", "The number 1e400 is beyond the largest"),
    ],
    ids=lambda value: value[:20],
)
def test_edit_and_rerun_shows_bad_arguments_inline_and_creates_nothing(
    operator_client, args, kwargs, shown
):
    job = make_job(JobState.DEAD_LETTER)
    response = operator_client.post(
        reverse("dashboard:rerun", args=[job.id]), {"edit": "1", "args": args, "kwargs": kwargs}
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert shown in html
    assert '<details class="edit-rerun" open>' in html
    assert Job.objects.count() == 1


def test_a_read_only_user_sees_no_edit_form(viewer_client):
    job = make_job(JobState.DEAD_LETTER)
    assert "Edit and rerun" not in viewer_client.get(f"/jobs/{job.id}/").content.decode()


# Bulk by filter.


def test_bulk_retry_of_a_filter_shows_the_count_then_acts_with_progress(operator_client):
    for _ in range(3):
        make_job(JobState.DEAD_LETTER, queue_name="billing")
    other = make_job(JobState.DEAD_LETTER, queue_name="emails")
    url = reverse("dashboard:bulk_action")
    data = {"action": "retry", "state": "dead_letter", "queue": "billing"}
    confirm = operator_client.post(url, data)
    assert confirm.status_code == 200
    assert re.search(rb'class="bulk-count">3<', confirm.content)
    assert Job.objects.filter(state=JobState.PENDING).count() == 0
    done = operator_client.post(url, {**data, "confirm": "on"})
    html = b"".join(done.streaming_content).decode()
    assert "3 jobs done, 3 changed" in html
    assert "Done: 3 of 3 matching jobs changed" in html
    assert Job.objects.filter(state=JobState.PENDING, queue_name="billing").count() == 3
    assert Job.objects.get(id=other.id).state == JobState.DEAD_LETTER
    entry = AuditEntry.objects.get()
    assert entry.action == "bulk retry" and entry.detail["applied"] == 3


def test_bulk_discard_by_search_from_the_job_list(operator_client):
    make_job(JobState.SUCCEEDED, kwargs={"batch": "nightly"})
    make_job(JobState.PENDING, kwargs={"batch": "nightly"})
    done = operator_client.post(
        reverse("dashboard:bulk_action"), {"action": "discard", "q": "nightly", "confirm": "on"}
    )
    html = b"".join(done.streaming_content).decode()
    assert "Done: 1 of 2 matching jobs changed" in html
    assert Job.objects.count() == 1


def test_the_job_list_offers_bulk_actions_for_its_filter(operator_client):
    make_job(JobState.DEAD_LETTER, queue_name="billing")
    html = operator_client.get("/jobs/?queue=billing").content.decode()
    form = re.search(r'<form class="bulk bulk-filter".*?</form>', html, re.S).group(0)
    assert 'name="queue" value="billing"' in form
    assert buttons_in(form) == ["Retry all…", "Cancel all…", "Discard all…"]


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"action": "explode"},
        {"action": "retry", "state": "sleeping"},
        {"action": "retry", "queue": "q" * 101},
        {"action": "retry", "q": "a\x00b"},
    ],
)
def test_a_bad_bulk_post_is_a_400_and_changes_nothing(operator_client, data):
    job = make_job(JobState.DEAD_LETTER)
    response = operator_client.post(reverse("dashboard:bulk_action"), {**data, "confirm": "on"})
    assert response.status_code == 400
    assert Job.objects.get(id=job.id).state == JobState.DEAD_LETTER


def test_a_read_only_user_sees_no_bulk_buttons_and_gets_403(viewer_client):
    job = make_job(JobState.DEAD_LETTER)
    html = viewer_client.get("/jobs/").content.decode()
    assert "Retry all…" not in html
    response = viewer_client.post(
        reverse("dashboard:bulk_action"), {"action": "retry", "confirm": "on"}
    )
    assert response.status_code == 403
    assert Job.objects.get(id=job.id).state == JobState.DEAD_LETTER
