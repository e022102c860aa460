"""The operations console through Django's test client: every page and action, for anonymous
visitors, staff without the operate permission, and operators."""

import re
import uuid
from datetime import timedelta

import django
import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from jobs.models import Attempt, AuditEntry, Job, WorkerNode
from jobs.states import TERMINAL, JobState

PASSWORD = "correct horse battery staple"
PAGES = ["/", "/jobs/", "/dead-letters/", "/queues/", "/workers/"]
ACTIONS = ["retry", "rerun", "cancel"]
ACTION_LABELS = ("Retry", "Rerun", "Cancel", "Discard")
XSS_CORPUS = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "</textarea><svg onload=alert(1)>",
    "'><iframe src=javascript:alert(1)>",
]


# Factories.


def make_job(state=JobState.PENDING, **fields):
    """A job row that satisfies the table's constraints for `state`."""
    now = timezone.now()
    values = {"task_path": "tests.tasks.add", "args": [1, 2], "queue_name": "default"}
    if state in TERMINAL:
        values["finished_at"] = now
    if state == JobState.RUNNING:
        values |= {"lease_id": uuid.uuid4(), "worker_id": "w-1", "started_at": now, "attempt": 1}
    if state == JobState.DEAD_LETTER:
        values |= {
            "attempt": 3,
            "max_attempts": 3,
            "error_type": "ValueError",
            "error_message": "boom",
            "error_traceback": "Traceback (most recent call last):\nValueError: boom",
            "dead_letter_reason": "exhausted",
        }
    values |= fields
    return Job.objects.create(state=state, **values)


def make_user(django_user_model, username, *, staff=True, operate=False):
    user = django_user_model.objects.create_user(username, password=PASSWORD, is_staff=staff)
    if operate:
        user.user_permissions.add(
            Permission.objects.get(codename="operate_job", content_type__app_label="jobs")
        )
    return user


def action_url(action, job):
    return reverse(f"dashboard:{action}", args=[job.id])


def buttons_in(html: str) -> list[str]:
    return re.findall(r"<button[^>]*>\s*([^<]*?)\s*</button>", html)


# Fixtures.


@pytest.fixture
def dead_letter(db):
    return make_job(JobState.DEAD_LETTER)


# Who gets in.


@pytest.mark.django_db
@pytest.mark.parametrize("path", [*PAGES, "/jobs/{id}/"])
def test_anonymous_visitor_is_sent_to_login_from_every_page(client, dead_letter, path):
    path = path.format(id=dead_letter.id)
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert "next=" in response["Location"]


@pytest.mark.django_db
def test_a_login_page_on_another_host_is_told_the_whole_address_to_come_back_to(client, settings):
    settings.LOGIN_URL = "https://sso.example.com/login"
    response = client.get("/jobs/?state=dead_letter")
    assert response.status_code == 302
    location = response["Location"]
    assert location.startswith("https://sso.example.com/login?next=")
    assert "next=http%3A//testserver/jobs/%3Fstate%3Ddead_letter" in location
    anonymous = client.get(reverse("dashboard:no_access"))
    assert anonymous["Location"].startswith(
        "https://sso.example.com/login?next=http%3A//testserver/"
    )


@pytest.mark.django_db
def test_non_staff_user_is_sent_to_login_and_then_told_without_a_redirect_loop(
    client, django_user_model
):
    client.force_login(make_user(django_user_model, "nina", staff=False))
    response = client.get("/jobs/", follow=True)
    assert response.status_code == 403
    assert response.redirect_chain[0][0].startswith(reverse("login"))
    assert b"not a staff account" in response.content


@pytest.mark.django_db
def test_login_page_logs_a_staff_user_in_and_lands_on_the_overview(client, operator):
    page = client.get(reverse("login"))
    assert page.status_code == 200
    assert b'name="password"' in page.content
    response = client.post(
        reverse("login"), {"username": "olivia", "password": PASSWORD}, follow=True
    )
    assert response.redirect_chain[-1][0] == reverse("dashboard:overview")
    assert b"<h1>Overview</h1>" in response.content


@pytest.mark.django_db
@pytest.mark.parametrize("path", [*PAGES, "/jobs/{id}/"])
def test_staff_without_permission_sees_every_page(viewer_client, dead_letter, path):
    response = viewer_client.get(path.format(id=dead_letter.id))
    assert response.status_code == 200
    assert b"read-only" in response.content


@pytest.mark.django_db
@pytest.mark.parametrize("state", [JobState.DEAD_LETTER, JobState.PENDING, JobState.RUNNING])
def test_staff_without_permission_sees_no_buttons(viewer_client, state):
    job = make_job(state)
    for path in ("/dead-letters/", f"/jobs/{job.id}/"):
        html = viewer_client.get(path).content.decode()
        assert not set(buttons_in(html)) & set(ACTION_LABELS), path
        assert "ticked rows" not in html


@pytest.mark.django_db
@pytest.mark.parametrize("action", ACTIONS)
def test_staff_without_permission_gets_403_on_every_action_and_nothing_changes(
    viewer_client, dead_letter, action
):
    response = viewer_client.post(action_url(action, dead_letter))
    assert response.status_code == 403
    dead_letter.refresh_from_db()
    assert dead_letter.state == JobState.DEAD_LETTER
    assert Job.objects.count() == 1
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_staff_without_permission_gets_403_on_bulk_retry(viewer_client, dead_letter):
    data = {"scope": "selected", "ids": [str(dead_letter.id)], "confirm": "on"}
    response = viewer_client.post(reverse("dashboard:bulk_retry"), data)
    assert response.status_code == 403
    assert Job.objects.get().state == JobState.DEAD_LETTER


@pytest.mark.django_db
@pytest.mark.parametrize("action", ACTIONS)
def test_anonymous_post_is_sent_to_login_and_changes_nothing(client, dead_letter, action):
    response = client.post(action_url(action, dead_letter))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert Job.objects.get().state == JobState.DEAD_LETTER


@pytest.mark.django_db
@pytest.mark.parametrize("action", ACTIONS)
def test_actions_refuse_get(operator_client, dead_letter, action):
    assert operator_client.get(action_url(action, dead_letter)).status_code == 405
    assert Job.objects.get().state == JobState.DEAD_LETTER


@pytest.mark.django_db
def test_actions_need_a_csrf_token(operator, dead_letter):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    assert strict.post(action_url("retry", dead_letter)).status_code == 403
    assert Job.objects.get().state == JobState.DEAD_LETTER


# Actions.


@pytest.mark.django_db
def test_operator_retries_a_dead_letter_and_is_sent_back_with_the_message(
    operator_client, dead_letter
):
    response = operator_client.post(
        action_url("retry", dead_letter), {"next": "/dead-letters/"}, follow=True
    )
    assert response.redirect_chain == [("/dead-letters/", 302)]
    html = response.content.decode()
    # The message names the job and links it; its row has left the list.
    assert f'job put back in line: <a href="/jobs/{dead_letter.id}/">add ' in html
    dead_letter.refresh_from_db()
    assert dead_letter.state == JobState.PENDING
    assert f'data-job-id="{dead_letter.id}"' not in html


@pytest.mark.django_db
def test_double_retry_has_one_effect_and_says_the_job_is_already_pending(
    operator_client, dead_letter
):
    url = action_url("retry", dead_letter)
    first = operator_client.post(url, follow=True)
    second = operator_client.post(url, follow=True)
    assert b"job put back in line" in first.content
    assert b"job already pending" in second.content
    dead_letter.refresh_from_db()
    assert dead_letter.state == JobState.PENDING
    assert dead_letter.max_attempts == 4
    assert Job.objects.count() == 1
    outcomes = list(AuditEntry.objects.order_by("at", "id").values_list("outcome", flat=True))
    assert outcomes == ["job put back in line", "job already pending"]


@pytest.mark.django_db
def test_retry_of_a_dead_letter_whose_dedup_key_was_taken_says_which_job_holds_it(
    operator_client,
):
    dead = make_job(JobState.DEAD_LETTER, dedup_key="report-7")
    holder = make_job(JobState.PENDING, dedup_key="report-7")

    response = operator_client.post(action_url("retry", dead), follow=True)

    html = response.content.decode()
    assert response.status_code == 200
    assert f"is held by job {holder.id}" in html
    assert reverse("dashboard:job", args=[holder.id]) in html
    dead.refresh_from_db()
    assert dead.state == JobState.DEAD_LETTER


@pytest.mark.django_db
def test_htmx_retry_swaps_the_dead_letter_fragment_with_the_message(operator_client, dead_letter):
    other = make_job(JobState.DEAD_LETTER, task_path="tests.tasks.always_fails")
    response = operator_client.post(
        action_url("retry", dead_letter),
        {"next": "/dead-letters/"},
        headers={"HX-Request": "true"},
        follow=True,
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in html
    assert html.lstrip().startswith('<div id="dead-letters"')
    assert "job put back in line" in html
    assert f'data-job-id="{other.id}"' in html
    assert f'data-job-id="{dead_letter.id}"' not in html


@pytest.mark.django_db
def test_rerun_creates_one_new_run_linked_to_the_original_and_links_to_it(
    operator_client, dead_letter
):
    response = operator_client.post(action_url("rerun", dead_letter), follow=True)
    new = Job.objects.get(rerun_of=dead_letter)
    assert new.state == JobState.PENDING
    assert new.attempt == 0
    assert reverse("dashboard:job", args=[new.id]).encode() in response.content
    assert b"open the new run" in response.content
    page = operator_client.get(reverse("dashboard:job", args=[new.id])).content.decode()
    assert "rerun of" in page
    assert str(dead_letter.id)[:8] in page
    dead_letter.refresh_from_db()
    assert dead_letter.state == JobState.DEAD_LETTER


@pytest.mark.django_db
def test_submitting_the_same_rerun_form_twice_reruns_once(operator_client, dead_letter):
    data = {"token": uuid.uuid4().hex, "next": f"/jobs/{dead_letter.id}/"}
    operator_client.post(action_url("rerun", dead_letter), data)
    second = operator_client.post(action_url("rerun", dead_letter), data, follow=True)
    assert Job.objects.filter(rerun_of=dead_letter).count() == 1
    assert b"already rerun from this page" in second.content


@pytest.mark.django_db
def test_one_rerun_token_shared_by_a_list_s_rows_reruns_each_job_once(operator_client):
    first, second = make_job(JobState.DEAD_LETTER), make_job(JobState.DEAD_LETTER)
    data = {"token": uuid.uuid4().hex, "next": "/dead-letters/"}
    for job in (first, second, first):
        operator_client.post(action_url("rerun", job), data)
    assert Job.objects.filter(rerun_of=first).count() == 1
    assert Job.objects.filter(rerun_of=second).count() == 1


@pytest.mark.django_db
def test_dead_letter_rows_are_buttons_of_one_form_carrying_the_token_once(operator_client):
    jobs = [make_job(JobState.DEAD_LETTER) for _ in range(3)]
    html = operator_client.get("/dead-letters/").content.decode()
    (form,) = re.findall(r'<form class="row-actions".*?</form>', html, re.S)
    assert form.count('name="csrfmiddlewaretoken"') == 1
    assert form.count('name="next" value="/dead-letters/"') == 1
    assert form.count('name="token"') == 1
    for job in jobs:
        for action in ("retry", "rerun", "discard"):
            url = f"/jobs/{job.id}/{action}/"
            assert f'formaction="{url}" hx-post="{url}"' in form
    rerun = re.search(r"<button [^>]*/rerun/[^>]*>", form).group(0)
    assert 'name="confirm" value="ask"' in rerun and 'data-confirm="Rerun this job?' in rerun
    retry = re.search(r"<button [^>]*/retry/[^>]*>", form).group(0)
    assert "confirm" not in retry


@pytest.mark.django_db
def test_a_viewer_sees_the_dead_letter_rows_without_an_action_form(viewer_client, dead_letter):
    html = viewer_client.get("/dead-letters/").content.decode()
    assert f'data-job-id="{dead_letter.id}"' in html
    assert 'class="row-actions"' not in html and "formaction" not in html


@pytest.mark.django_db
def test_rerun_of_an_unfinished_job_is_refused_with_the_reason(operator_client):
    job = make_job(JobState.PENDING)
    response = operator_client.post(action_url("rerun", job), follow=True)
    assert b"only finished jobs can be rerun" in response.content
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_cancel_of_a_pending_job_cancels_it(operator_client):
    job = make_job(JobState.PENDING)
    response = operator_client.post(action_url("cancel", job), follow=True)
    assert b"job cancelled" in response.content
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


@pytest.mark.django_db
def test_cancel_of_a_running_job_asks_its_worker_to_stop_and_hides_the_button(operator_client):
    job = make_job(JobState.RUNNING)
    response = operator_client.post(action_url("cancel", job), follow=True)
    assert b"cancel requested" in response.content
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert job.cancel_requested_at is not None
    assert "Cancel" not in buttons_in(response.content.decode())


@pytest.mark.django_db
@pytest.mark.parametrize("action", ACTIONS)
def test_action_on_an_unknown_job_is_404(operator_client, action):
    url = reverse(f"dashboard:{action}", args=[uuid.uuid4()])
    assert operator_client.post(url).status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize(
    "target", ["https://evil.example/", "//evil.example/", "javascript:alert(1)", "/ok/\x00"]
)
def test_next_cannot_send_the_operator_off_site(operator_client, dead_letter, target):
    response = operator_client.post(action_url("retry", dead_letter), {"next": target})
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:job", args=[dead_letter.id])


@pytest.mark.django_db
def test_every_action_is_audited_and_shown_on_the_job_page(operator_client, dead_letter):
    operator_client.post(action_url("retry", dead_letter))
    operator_client.post(action_url("cancel", dead_letter))
    operator_client.post(action_url("rerun", dead_letter))
    entries = AuditEntry.objects.filter(job=dead_letter)
    assert sorted(entries.values_list("action", flat=True)) == ["cancel", "rerun", "retry"]
    assert set(entries.values_list("source", flat=True)) == {"dashboard"}
    assert set(entries.values_list("username", flat=True)) == {"olivia"}
    page = operator_client.get(reverse("dashboard:job", args=[dead_letter.id])).content.decode()
    for outcome in ("job put back in line", "job cancelled", "new run enqueued"):
        assert outcome in page
    assert page.count("<strong>olivia</strong>") == 3


# The job page.


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (JobState.PENDING, ["Cancel"]),
        (JobState.SCHEDULED, ["Cancel"]),
        (JobState.RUNNING, ["Cancel"]),
        (JobState.RETRYING, ["Cancel"]),
        (JobState.SUCCEEDED, ["Rerun", "Discard"]),
        (JobState.CANCELLED, ["Retry", "Rerun", "Discard"]),
        (JobState.DEAD_LETTER, ["Retry", "Rerun", "Discard"]),
    ],
)
def test_job_page_shows_only_the_buttons_its_state_allows(operator_client, state, expected):
    job = make_job(state)
    html = operator_client.get(reverse("dashboard:job", args=[job.id])).content.decode()
    assert [b for b in buttons_in(html) if b in ACTION_LABELS] == expected
    edit_form = 1 if state in TERMINAL else 0
    # + the logout form
    assert html.count('method="post"') == len(expected) + edit_form + 1


@pytest.mark.django_db
def test_job_page_shows_the_job_attempts_error_and_lineage(operator_client, dead_letter):
    started = timezone.now() - timedelta(seconds=5)
    for number in (1, 2, 3):
        Attempt.objects.create(
            job=dead_letter,
            number=number,
            worker_id="host:42:abc",
            started_at=started,
            finished_at=started + timedelta(milliseconds=250),
            outcome="failed",
            error_type="ValueError",
            error_message=f"boom {number}",
            error_traceback=f"Traceback ...\nValueError: boom {number}",
        )
    parent = make_job(JobState.SUCCEEDED, task_path="tests.tasks.record")
    rerun = make_job(JobState.PENDING, rerun_of=dead_letter)
    Job.objects.filter(id=dead_letter.id).update(parent=parent, kwargs={"key": "v"})
    html = operator_client.get(reverse("dashboard:job", args=[dead_letter.id])).content.decode()
    assert "Attempts exhausted" in html
    assert html.count("<details>") == 4  # the last error and one per attempt
    assert "boom 2" in html and "250 ms" in html and "host:42:abc" in html
    assert escape('{"key": "v"}') in html
    assert reverse("dashboard:job", args=[parent.id]) in html
    assert reverse("dashboard:job", args=[rerun.id]) in html
    assert "Continues" in html and "Reruns" in html


@pytest.mark.django_db
def test_pages_show_the_tasks_own_maximum_with_the_attempts_a_shutdown_gave_back(
    operator_client,
):
    # Interrupted once by a worker's shutdown: the attempt was given back by raising the stored
    # maximum from 3 to 4; operators see 3, and the attempt given back apart.
    job = make_job(JobState.RETRYING, attempt=1, max_attempts=4, attempts_given_back=1)

    detail = operator_client.get(reverse("dashboard:job", args=[job.id])).content.decode()
    listing = operator_client.get("/jobs/").content.decode()

    assert "1 of 3 (and 1 given back after a worker" in detail
    assert "1 of 4" not in detail
    assert "1/3<span" in listing and "1/4" not in listing


@pytest.mark.django_db
def test_job_page_polls_while_the_job_is_unfinished_and_stops_once_it_is(operator_client):
    job = make_job(JobState.RUNNING)
    url = reverse("dashboard:job", args=[job.id])
    running = operator_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "hx-trigger" in running.split(">", 1)[0]
    Job.objects.filter(id=job.id).update(
        state=JobState.SUCCEEDED, finished_at=timezone.now(), return_value={"sum": 3}
    )
    done = operator_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert done.lstrip().startswith('<article id="job"')
    assert "hx-trigger" not in done.split(">", 1)[0]
    assert "Succeeded" in done and escape('{"sum": 3}') in done


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path", ["/jobs/not-a-uuid/", "/jobs/00000000-0000-0000-0000-000000000000/", "/jobs/%00/"]
)
def test_bad_or_unknown_job_ids_are_404(operator_client, path):
    assert operator_client.get(path).status_code == 404


# Fragments.


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/", '<section id="overview"'),
        ("/jobs/", '<section id="job-list"'),
        ("/dead-letters/", '<div id="dead-letters"'),
        ("/workers/", '<section id="workers"'),
        ("/jobs/{id}/", '<article id="job"'),
    ],
)
def test_htmx_request_gets_just_the_fragment(viewer_client, dead_letter, path, fragment):
    path = path.format(id=dead_letter.id)
    full = viewer_client.get(path)
    part = viewer_client.get(path, headers={"HX-Request": "true"})
    assert full.content.decode().startswith("<!doctype html>")
    assert part.content.decode().lstrip().startswith(fragment)
    assert "<html" not in part.content.decode()
    assert "HX-Request" in part["Vary"]


# Lists and filters.


@pytest.mark.django_db
def test_keyset_pages_walk_every_job_once_newest_first(viewer_client):
    moment = timezone.now()
    # Ties on enqueued_at are broken by id, so none is skipped or repeated.
    jobs = [make_job(enqueued_at=moment - timedelta(minutes=i // 2)) for i in range(7)]
    seen, path = [], "/jobs/?limit=3"
    while path:
        html = viewer_client.get(path).content.decode()
        seen += re.findall(r'<tr data-job-row data-job-id="([0-9a-f-]{36})"', html)
        older = re.search(r'href="(/jobs/\?[^"]*cursor=[^"]+)"[^>]*>Older', html)
        path = older.group(1).replace("&amp;", "&") if older else None
    assert len(seen) == len(set(seen)) == 7
    expected = sorted(jobs, key=lambda j: (j.enqueued_at, j.id.hex), reverse=True)
    assert seen == [str(j.id) for j in expected]


@pytest.mark.django_db
def test_jobs_can_be_filtered_by_state_queue_task_and_text(viewer_client):
    a = make_job(JobState.PENDING, queue_name="emails", task_path="app.tasks.send_mail")
    b = make_job(JobState.DEAD_LETTER, queue_name="emails", task_path="app.tasks.build_report")
    c = make_job(JobState.SUCCEEDED, queue_name="reports", task_path="app.tasks.build_report")

    def listed(query):
        html = viewer_client.get(f"/jobs/?{query}").content.decode()
        return {j for j in (a, b, c) if f"/jobs/{j.id}/" in html}

    assert listed("state=dead_letter") == {b}
    assert listed("queue=emails") == {a, b}
    assert listed("task=app.tasks.build_report") == {b, c}
    assert listed("q=REPORT") == {b, c}
    assert listed(f"q={str(a.id)[:23]}") == {a}
    assert listed(f"q={a.id}") == {a}
    assert listed("q=nothing-like-this") == set()
    assert listed("state=succeeded&queue=reports&task=app.tasks.build_report") == {c}


@pytest.mark.django_db
def test_dead_letters_are_grouped_by_task_and_error_with_a_link_to_each_group(viewer_client):
    for _ in range(3):
        make_job(JobState.DEAD_LETTER, task_path="app.tasks.charge", error_type="CardDeclined")
    make_job(JobState.DEAD_LETTER, task_path="app.tasks.charge", error_type="Timeout")
    make_job(JobState.SUCCEEDED, task_path="app.tasks.charge")
    html = viewer_client.get("/dead-letters/").content.decode()
    groups = re.findall(r'<td class="num">(\d+)</td>', html)
    assert groups == ["3", "1"]
    assert "/dead-letters/?task=app.tasks.charge&amp;error=CardDeclined" in html
    narrowed = viewer_client.get("/dead-letters/?task=app.tasks.charge&error=Timeout")
    assert narrowed.content.decode().count('name="ids"') == 0  # read-only: no checkboxes
    assert b"1 dead letter matching" in narrowed.content


# Bulk retry.


@pytest.mark.django_db
def test_bulk_retry_asks_first_with_the_count_then_retries_the_ticked_rows(operator_client):
    ticked = [make_job(JobState.DEAD_LETTER) for _ in range(3)]
    untouched = make_job(JobState.DEAD_LETTER)
    url = reverse("dashboard:bulk_retry")
    ids = [str(j.id) for j in ticked]
    confirm = operator_client.post(url, {"scope": "selected", "ids": ids})
    assert confirm.status_code == 200
    assert b"Retry <strong>3</strong> dead letters?" in confirm.content
    assert Job.objects.filter(state=JobState.PENDING).count() == 0
    done = operator_client.post(
        url, {"scope": "selected", "ids": ids, "confirm": "on"}, follow=True
    )
    assert b"3 jobs put back in line" in done.content
    assert Job.objects.filter(state=JobState.PENDING).count() == 3
    untouched.refresh_from_db()
    assert untouched.state == JobState.DEAD_LETTER
    assert AuditEntry.objects.filter(action="retry", source="dashboard").count() == 3


@pytest.mark.django_db
def test_bulk_retry_of_every_match_is_capped_and_says_so(operator_client, monkeypatch):
    monkeypatch.setattr("dashboard.bulk_views.BULK_CAP", 2)
    for _ in range(3):
        make_job(JobState.DEAD_LETTER, queue_name="billing")
    make_job(JobState.DEAD_LETTER, queue_name="emails")
    url = reverse("dashboard:bulk_retry")
    confirm = operator_client.post(url, {"scope": "matching", "queue": "billing"})
    assert b"Retry <strong>2</strong> dead letters?" in confirm.content
    assert b"More jobs match these filters" in confirm.content
    id_list = re.search(r'name="id_list" value="([0-9a-f,-]+)"', confirm.content.decode())
    data = {"scope": "selected", "id_list": id_list.group(1), "confirm": "on", "queue": "billing"}
    done = operator_client.post(url, data, follow=True)
    assert done.redirect_chain[-1][0] == "/dead-letters/?queue=billing"
    assert Job.objects.filter(state=JobState.PENDING, queue_name="billing").count() == 2
    assert Job.objects.filter(state=JobState.DEAD_LETTER, queue_name="emails").count() == 1


@pytest.mark.django_db
def test_bulk_retry_reports_jobs_that_were_no_longer_dead_letters(operator_client):
    jobs = [make_job(JobState.DEAD_LETTER) for _ in range(2)]
    operator_client.post(action_url("retry", jobs[0]))
    done = operator_client.post(
        reverse("dashboard:bulk_retry"),
        {"scope": "selected", "ids": [str(j.id) for j in jobs], "confirm": "on"},
        follow=True,
    )
    assert b"1 job put back in line; 1 not changed (job already pending)" in done.content


@pytest.mark.django_db
def test_bulk_retry_with_nothing_ticked_changes_nothing(operator_client, dead_letter):
    done = operator_client.post(reverse("dashboard:bulk_retry"), {"scope": "selected"}, follow=True)
    assert b"tick the rows to retry first" in done.content
    assert Job.objects.get().state == JobState.DEAD_LETTER


@pytest.mark.django_db
def test_bulk_retry_refuses_more_ids_than_the_cap(operator_client):
    id_list = ",".join(str(uuid.uuid4()) for _ in range(1001))
    response = operator_client.post(
        reverse("dashboard:bulk_retry"), {"scope": "selected", "id_list": id_list, "confirm": "on"}
    )
    assert response.status_code == 400
    assert b"At most 1,000 jobs per action" in response.content


# Overview and workers.


@pytest.mark.django_db
def test_overview_counts_states_and_queues_and_draws_the_last_hour(viewer_client):
    make_job(JobState.PENDING, queue_name="emails", run_after=timezone.now() - timedelta(minutes=7))
    make_job(JobState.RETRYING, queue_name="emails", attempt=1)
    dead = make_job(JobState.DEAD_LETTER, queue_name="reports")
    now = timezone.now()
    for number, outcome in enumerate(["failed", "failed", "succeeded"], start=1):
        Attempt.objects.create(
            job=dead, number=number, outcome=outcome, started_at=now, finished_at=now
        )
    html = viewer_client.get("/").content.decode()
    cards = dict(re.findall(r'state-card-(\w+)".*?state-card-count">([^<]+)<', html, re.S))
    assert cards["pending"] == "1" and cards["retrying"] == "1" and cards["dead_letter"] == "1"
    assert cards["succeeded"] == "0"
    emails = re.search(r'\?queue=emails">emails</a></th>(.*?)</tr>', html, re.S).group(1)
    assert re.findall(r'class="num[^"]*"[^>]*>(?:<a[^>]*>)?([^<]+)', emails) == [
        "1",
        "0",
        "1",
        "0",
        "7 min",
    ]
    assert "<svg" in html and 'class="chart-succeeded"' in html and 'class="chart-failed"' in html
    assert "1 succeeded, 2 failed" in html


@pytest.mark.django_db
def test_state_counts_are_exact_where_kept_and_marked_above_the_cap_elsewhere(
    viewer_client, monkeypatch
):
    monkeypatch.setattr("dashboard.queue_rows.STATE_CAP", 2)
    for _ in range(4):
        make_job(JobState.SUCCEEDED)
    html = viewer_client.get("/").content.decode()
    count = re.search(r'state-card-succeeded".*?state-card-count">([^<]+)<', html, re.S).group(1)
    if connection.vendor == "postgresql":
        assert count == "4"  # the counting triggers' rows: exact at any size
    else:
        assert count == "2+"


@pytest.mark.django_db
def test_oldest_due_job_is_found_across_priorities_and_ignores_future_ones(viewer_client):
    now = timezone.now()
    make_job(queue_name="q1", priority=5, run_after=now - timedelta(minutes=1))
    make_job(queue_name="q1", priority=0, run_after=now - timedelta(minutes=12))
    make_job(queue_name="q1", priority=-3, run_after=now + timedelta(hours=2))
    make_job(JobState.RETRYING, queue_name="q1", priority=9, attempt=1, run_after=now)
    html = viewer_client.get("/").content.decode()
    row = re.search(r'\?queue=q1">q1</a></th>(.*?)</tr>', html, re.S).group(1)
    assert row.rstrip().endswith('<td class="num" data-label="Oldest due">12 min</td>')


@pytest.mark.django_db
def test_queue_split_beyond_the_sample_is_an_estimate_where_counts_are_not_kept(
    viewer_client, monkeypatch
):
    monkeypatch.setattr("dashboard.queue_rows.QUEUE_SAMPLE", 2)
    for _ in range(3):
        make_job(queue_name="emails")
    html = viewer_client.get("/").content.decode()
    row = re.search(r'\?queue=emails">emails</a></th>(.*?)</tr>', html, re.S).group(1)
    if connection.vendor == "postgresql":
        assert '<td class="num" data-label="Pending" title="3 exactly">3</td>' in row
    else:
        assert '<td class="num" data-label="Pending" title="about 3 (estimate)">≈ 3</td>' in row


@pytest.mark.django_db
def test_dead_letter_groups_cover_the_most_recent_window_and_say_so(viewer_client, monkeypatch):
    monkeypatch.setattr("dashboard.queries.DEAD_LETTER_WINDOW", 3)
    for _ in range(4):
        make_job(JobState.DEAD_LETTER)
    html = viewer_client.get("/dead-letters/").content.decode()
    assert "Over the 3 most recent dead letters" in html
    assert re.findall(r'<td class="num">(\d+)</td>', html) == ["3"]


@pytest.mark.django_db
def test_dead_letter_groups_under_a_search_cover_a_smaller_window(viewer_client, monkeypatch):
    monkeypatch.setattr("dashboard.queries.DEAD_LETTER_WINDOW", 5)
    monkeypatch.setattr("dashboard.queries.DEAD_LETTER_SEARCH_WINDOW", 2)
    for _ in range(4):
        make_job(JobState.DEAD_LETTER, error_type="ConnectionError", error_message="SMTP refused")
    searched = viewer_client.get("/dead-letters/?q=smtp").content.decode()
    assert "Over the 2 most recent dead letters" in searched
    assert re.findall(r'<td class="num">(\d+)</td>', searched) == ["2"]
    unsearched = viewer_client.get("/dead-letters/").content.decode()
    assert re.findall(r'<td class="num">(\d+)</td>', unsearched) == ["4"]


@pytest.mark.django_db
def test_dead_letters_page_under_a_search_reads_the_task_names_and_probes_the_text_once(
    viewer_client,
):
    for _ in range(3):
        make_job(JobState.DEAD_LETTER, error_type="ConnectionError", error_message="SMTP refused")
    with CaptureQueriesContext(connection) as captured:
        html = viewer_client.get("/dead-letters/?q=smtp").content.decode()
    assert re.findall(r'<td class="num">(\d+)</td>', html) == ["3"]
    sql = [query["sql"] for query in captured.captured_queries]
    assert sum("WITH RECURSIVE names" in statement for statement in sql) == 1
    # Where an index holds the text (PostgreSQL), its probe runs once too.
    probes = sum("WHERE _search_hit" in statement for statement in sql)
    assert probes == (1 if connection.vendor == "postgresql" else 0)


@pytest.mark.django_db
def test_workers_page_shows_heartbeat_age_lost_workers_and_what_they_run(viewer_client):
    now = timezone.now()
    WorkerNode.objects.create(
        id="alive:1:a", hostname="alive", pid=1, queues=["emails"], last_heartbeat_at=now
    )
    WorkerNode.objects.create(
        id="gone:2:b", hostname="gone", pid=2, last_heartbeat_at=now - timedelta(minutes=5)
    )
    job = make_job(JobState.RUNNING, worker_id="alive:1:a", task_path="tests.tasks.sleepy")
    html = viewer_client.get("/workers/").content.decode()
    assert "badge-worker-online" in html and "badge-worker-lost" in html
    assert "5 min ago" in html
    assert f"/jobs/{job.id}/" in html and "sleepy" in html
    overview = viewer_client.get("/").content.decode()
    assert re.search(r'big-number">1</span>', overview)
    assert "1 lost" in overview


@pytest.mark.django_db
def test_workers_page_shows_free_sync_and_async_slots_and_counts_many_running_jobs(
    viewer_client,
):
    WorkerNode.objects.create(
        id="io:1:a",
        hostname="io",
        pid=1,
        concurrency=2,
        async_concurrency=20,
        free_sync_slots=0,
        free_async_slots=25,
    )
    for _ in range(15):
        make_job(JobState.RUNNING, worker_id="io:1:a", task_path="tests.tasks.awaits")
    html = viewer_client.get("/workers/").content.decode()
    assert "0 of 2 sync" in html and "25 of 40 async" in html
    assert "15 running" in html and "and 5 more" in html
    assert html.count('class="job-link"') == 10


@pytest.mark.django_db
def test_a_lost_worker_offers_no_free_slots_on_the_workers_page(viewer_client):
    WorkerNode.objects.create(
        id="gone:2:b",
        hostname="gone",
        pid=2,
        concurrency=2,
        async_concurrency=10,
        free_sync_slots=1,
        free_async_slots=15,
        last_heartbeat_at=timezone.now() - timedelta(minutes=5),
    )
    html = viewer_client.get("/workers/").content.decode()
    assert "badge-worker-lost" in html
    assert " of 2 sync" not in html and " of 20 async" not in html


# Safety of the output.


@pytest.mark.django_db
@pytest.mark.parametrize("payload", XSS_CORPUS)
def test_job_data_holding_html_is_escaped_on_every_page(operator_client, payload):
    now = timezone.now()
    job = make_job(
        JobState.DEAD_LETTER,
        task_path=f"tests.tasks.{payload}",
        queue_name=payload[:100],
        args=[payload],
        kwargs={payload: payload},
        error_type=payload,
        error_message=payload,
        error_traceback=payload,
    )
    Attempt.objects.create(
        job=job,
        number=1,
        outcome="failed",
        worker_id=payload,
        started_at=now,
        finished_at=now,
        error_type=payload,
        error_message=payload,
        error_traceback=payload,
    )
    make_job(JobState.RUNNING, worker_id=payload, task_path=f"x.{payload}")
    WorkerNode.objects.create(id=payload, hostname=payload, pid=3, queues=[payload])
    operator_client.post(action_url("rerun", job))
    pages = [*PAGES, f"/jobs/{job.id}/", f"/dead-letters/?task=tests.tasks.{payload}"]
    for path in pages:
        for headers in ({}, {"HX-Request": "true"}):
            html = operator_client.get(path, headers=headers).content.decode()
            assert payload not in html, path
            for tag in ("<script>alert", "<img src=x", "<svg onload", "<iframe src"):
                assert tag not in html, path
    detail = operator_client.get(f"/jobs/{job.id}/").content.decode()
    assert escape(payload) in detail


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query",
    [
        "/jobs/?state=bogus",
        "/jobs/?state=%00",
        "/jobs/?state=pending&state=bogus",
        "/jobs/?cursor=garbage",
        "/jobs/?cursor=%00%01",
        "/jobs/?cursor=bm90fGEtY3Vyc29y",
        "/jobs/?cursor=MjAyNi0wMS0wMXxub3QtYS11dWlk",
        "/jobs/?limit=-1",
        "/jobs/?limit=0",
        "/jobs/?limit=abc",
        "/jobs/?limit=99999999999999999999999",
        "/jobs/?q=%00",
        "/jobs/?q=" + "x" * 5000,
        "/jobs/?q=%25%27%22%3B--",
        "/jobs/?queue=%00",
        "/jobs/?task=%ff%fe",
        "/jobs/?q=ffffffff-ffff",
        "/dead-letters/?error=%00",
        "/dead-letters/?cursor=%%%",
        "/dead-letters/?limit=1e9",
        "/dead-letters/?task=" + "t" * 1000,
        "/?state=bogus&cursor=x",
        "/workers/?limit=-5",
        "/jobs/%00/",
    ],
)
def test_garbage_query_strings_never_answer_500(operator_client, dead_letter, query):
    for headers in ({}, {"HX-Request": "true"}):
        response = operator_client.get(query, headers=headers)
        assert response.status_code < 500
        assert response.status_code in (200, 400, 404)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "data",
    [
        {"scope": "everything"},
        {"scope": "selected", "ids": ["not-a-uuid"], "confirm": "on"},
        {"scope": "selected", "ids": ["\x00"]},
        {"scope": "matching", "queue": "\x00"},
        {},
    ],
)
def test_garbage_bulk_posts_answer_400(operator_client, dead_letter, data):
    response = operator_client.post(reverse("dashboard:bulk_retry"), data)
    assert response.status_code == 400
    assert Job.objects.get().state == JobState.DEAD_LETTER


@pytest.mark.django_db
@pytest.mark.skipif(django.VERSION < (6, 0), reason="Django's own CSP header is new in 6.0")
@pytest.mark.parametrize("path", [*PAGES, "/jobs/{id}/", "/login/"])
def test_pages_hold_under_the_csp_with_no_inline_script_or_style(
    operator_client, dead_letter, path
):
    if path == "/login/":
        operator_client.logout()
    response = operator_client.get(path.format(id=dead_letter.id))
    html = response.content.decode()
    assert "'unsafe-inline'" not in response["Content-Security-Policy"]
    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert response["X-Frame-Options"] == "DENY"
    assert re.findall(r"<script(?![^>]*\ssrc=)[^>]*>", html) == []
    assert "<style" not in html
    assert re.findall(r"\sstyle=", html) == []
    assert re.findall(r"\s(?:on\w+|hx-on[\w:-]*)=", html) == []
    assert '"allowEval": false' in html


@pytest.mark.django_db
def test_htmx_is_vendored_and_served_from_static(client):
    response = client.get("/static/dashboard/htmx.min.js")
    assert response.status_code == 200
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert b"htmx" in body[:200]


# With the real worker.


@pytest.mark.django_db(transaction=True)
def test_dead_letter_retried_from_the_console_succeeds_when_a_worker_runs(
    client, django_user_model, run_worker
):
    from tests.factories import dead_letter_of_add

    client.force_login(make_user(django_user_model, "olivia", operate=True))
    result = dead_letter_of_add()
    client.post(reverse("dashboard:retry", args=[result.id]))
    worker = run_worker()
    assert worker.returncode == 0, worker.stdout + worker.stderr
    job = Job.objects.get(id=result.id)
    assert (job.state, job.return_value, job.attempt) == (JobState.SUCCEEDED, 5, 4)
    html = client.get(reverse("dashboard:job", args=[job.id])).content.decode()
    assert "Attempt 4" in html and "badge-outcome-succeeded" in html
    assert "Retry" not in buttons_in(html) and "Rerun" in buttons_in(html)


def test_a_running_job_whose_lease_lapsed_says_its_worker_is_gone(operator_client):
    lapsed = make_job(JobState.RUNNING)
    Job.objects.filter(id=lapsed.id).update(lease_expires_at=timezone.now() - timedelta(seconds=8))
    held = make_job(JobState.RUNNING)
    html = operator_client.get(f"/jobs/{lapsed.id}/").content.decode()
    assert "stopped renewing the lease" in html and "WorkerLost" in html
    html = operator_client.get(f"/jobs/{held.id}/").content.decode()
    assert "stopped renewing the lease" not in html
