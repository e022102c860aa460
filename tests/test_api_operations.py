"""The API's operator features: search, discard, edited reruns, bulk by filter, queues."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import queues
from jobs.models import AuditEntry, Job
from jobs.states import JobState
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def ids(response):
    assert response.status_code == 200, response.content
    return [job["id"] for job in response.json()["results"]]


def post_json(client, path, body, headers):
    return client.post(path, body, content_type="application/json", headers=headers)


# Search.


def test_the_list_finds_jobs_by_argument_error_and_key(client, reader_headers):
    invoice = make_job(args=[1003])
    failed = make_job(JobState.DEAD_LETTER, error_message="SMTP said no")
    keyed = make_job(dedup_key="welcome-42")
    make_job(args=[10030])
    assert ids(client.get("/api/v1/jobs?q=1003", headers=reader_headers)) == [str(invoice.id)]
    assert ids(client.get("/api/v1/jobs?q=smtp", headers=reader_headers)) == [str(failed.id)]
    assert ids(client.get("/api/v1/jobs?q=WELCOME", headers=reader_headers)) == [str(keyed.id)]


def test_blanks_around_a_search_text_are_not_searched_for_as_in_the_console(client, reader_headers):
    spaced = make_job(kwargs={"note": "a  b"})
    failed = make_job(JobState.DEAD_LETTER, error_message="SMTP said no")
    every = sorted([str(spaced.id), str(failed.id)])
    for blanks in ("%20%20", "%09", "%20%0A%20"):
        assert sorted(ids(client.get(f"/api/v1/jobs?q={blanks}", headers=reader_headers))) == every
    found = client.get("/api/v1/jobs?q=%20smtp%09", headers=reader_headers)
    assert ids(found) == [str(failed.id)]


def test_search_pages_with_a_cursor_like_the_plain_list(client, reader_headers):
    made = [make_job(kwargs={"customer": "acme"}) for _ in range(5)]
    make_job(kwargs={"customer": "other"})
    first = client.get("/api/v1/jobs?q=acme&limit=3", headers=reader_headers).json()
    second = client.get(
        f"/api/v1/jobs?q=acme&limit=3&cursor={first['next_cursor']}", headers=reader_headers
    ).json()
    found = [job["id"] for job in first["results"] + second["results"]]
    assert sorted(found) == sorted(str(job.id) for job in made)
    assert second["next_cursor"] is None


def test_a_search_text_over_200_characters_is_a_400(client, reader_headers):
    response = client.get("/api/v1/jobs?q=" + "x" * 201, headers=reader_headers)
    assert response.status_code == 400


# reruns.


def test_a_job_lists_its_reruns_newest_first(client, operator_headers):
    job = make_job(JobState.SUCCEEDED)
    now = timezone.now()
    older = make_job(JobState.SUCCEEDED, rerun_of=job, enqueued_at=now - timedelta(minutes=5))
    newer = make_job(JobState.PENDING, rerun_of=job, enqueued_at=now)
    detail = client.get(f"/api/v1/jobs/{job.id}", headers=operator_headers).json()
    assert detail["reruns"] == [str(newer.id), str(older.id)]
    listed = client.get("/api/v1/jobs", headers=operator_headers).json()["results"]
    assert {j["id"]: j["reruns"] for j in listed}[str(job.id)] == [str(newer.id), str(older.id)]
    made = client.post(f"/api/v1/jobs/{older.id}/rerun", headers=operator_headers).json()
    assert made["reruns"] == [] and made["rerun_of"] == str(older.id)


# Discard.


def test_discard_deletes_a_finished_job(client, operator_headers):
    job = make_job(JobState.DEAD_LETTER)
    response = client.post(f"/api/v1/jobs/{job.id}/discard", headers=operator_headers)
    assert (response.status_code, response.json()) == (200, {"discarded": str(job.id)})
    assert not Job.objects.filter(id=job.id).exists()
    entry = AuditEntry.objects.get(action="discard")
    assert (entry.subject, entry.username, entry.source) == (str(job.id), "operator", "api")


def test_discard_of_a_pending_job_is_a_409(client, operator_headers):
    job = make_job(JobState.PENDING)
    response = client.post(f"/api/v1/jobs/{job.id}/discard", headers=operator_headers)
    assert response.status_code == 409
    assert response.json()["job"]["state"] == "pending"


def test_discard_of_an_unknown_job_is_a_404(client, operator_headers):
    response = client.post(
        "/api/v1/jobs/00000000-0000-0000-0000-000000000000/discard", headers=operator_headers
    )
    assert response.status_code == 404


# Edit and rerun.


def test_rerun_with_a_body_runs_the_new_arguments(client, operator_headers):
    job = make_job(JobState.DEAD_LETTER, args=[1, 0])
    response = post_json(
        client, f"/api/v1/jobs/{job.id}/rerun", {"args": [1, 2], "kwargs": {}}, operator_headers
    )
    assert response.status_code == 201
    assert response.json()["args"] == [1, 2]
    assert AuditEntry.objects.get(action="rerun").detail["old"]["args"] == [1, 0]


def test_rerun_with_an_integer_too_long_for_a_job_says_so(client, operator_headers):
    job = make_job(JobState.DEAD_LETTER)
    response = client.post(
        f"/api/v1/jobs/{job.id}/rerun",
        '{"args": [-' + "9" * 5001 + "]}",
        content_type="application/json",
        headers=operator_headers,
    )
    assert response.status_code == 400
    assert response.json()["error"] == (
        "the body is valid JSON, but an integer of 5,001 digits is longer than the 4,300 a "
        "job's arguments may hold: send it as a string"
    )
    assert Job.objects.count() == 1
    huge = client.post(
        f"/api/v1/jobs/{job.id}/rerun",
        '{"args": [1e400]}',
        content_type="application/json",
        headers=operator_headers,
    )
    assert huge.json()["error"] == (
        "the body is valid JSON, but the number 1e400 is beyond the largest a job's arguments "
        "may hold: send it as a string"
    )


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[1, 2]",
        '{"args": {"a": 1}}',
        '{"kwargs": [1]}',
        '{"args": ["a\\u0000b"]}',
        '{"args": [], "extra": 1}',
        '{"args": [NaN]}',
        # 2 MB of arguments: under the body limit, over the arguments' 1 MiB.
        '{"args": ["' + "x" * 2_000_000 + '"]}',
    ],
    ids=lambda body: body[:20],
)
def test_rerun_with_a_bad_body_is_a_400_and_creates_nothing(client, operator_headers, body):
    job = make_job(JobState.DEAD_LETTER)
    response = client.post(
        f"/api/v1/jobs/{job.id}/rerun",
        body,
        content_type="application/json",
        headers=operator_headers,
    )
    assert response.status_code == 400, response.content
    assert "error" in response.json()
    assert Job.objects.count() == 1


# Bulk by filter.


def test_bulk_dry_run_counts_without_changing_anything(client, operator_headers):
    for _ in range(3):
        make_job(JobState.DEAD_LETTER)
    make_job(JobState.PENDING)
    response = post_json(
        client,
        "/api/v1/jobs/bulk",
        {"action": "retry", "filter": {"state": "dead_letter"}, "dry_run": True},
        operator_headers,
    )
    assert response.json() == {"matched": 3, "applied": 0}
    assert Job.objects.filter(state=JobState.DEAD_LETTER).count() == 3


def test_bulk_retry_by_search_applies_to_matching_jobs_and_audits_once(client, operator_headers):
    smtp = [make_job(JobState.DEAD_LETTER, error_message="SMTP down") for _ in range(2)]
    other = make_job(JobState.DEAD_LETTER, error_message="disk full")
    still_running = make_job(JobState.PENDING, kwargs={"note": "smtp"})
    response = post_json(
        client, "/api/v1/jobs/bulk", {"action": "retry", "filter": {"q": "smtp"}}, operator_headers
    )
    assert response.json() == {"matched": 3, "applied": 2}
    assert {j.state for j in Job.objects.filter(id__in=[j.id for j in smtp])} == {"pending"}
    assert Job.objects.get(id=other.id).state == "dead_letter"
    assert Job.objects.get(id=still_running.id).state == "pending"
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.subject, entry.detail["applied"]) == ("bulk retry", "q=smtp", 2)


def test_bulk_discard_and_cancel(client, operator_headers):
    make_job(JobState.SUCCEEDED, queue_name="old")
    make_job(JobState.PENDING, queue_name="old")
    discarded = post_json(
        client,
        "/api/v1/jobs/bulk",
        {"action": "discard", "filter": {"queue": "old"}},
        operator_headers,
    )
    assert discarded.json() == {"matched": 2, "applied": 1}
    cancelled = post_json(
        client, "/api/v1/jobs/bulk", {"action": "cancel", "filter": {}}, operator_headers
    )
    assert cancelled.json() == {"matched": 1, "applied": 1}


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"action": "explode"},
        {"action": "discard"},
        {"action": "retry", "dry_run": False},
        {"action": "retry", "filter": []},
        {"action": "retry", "filter": {"colour": "red"}},
        {"action": "retry", "filter": {"state": "sleeping"}},
        {"action": "retry", "filter": {"queue": 5}},
        {"action": "retry", "filter": {"q": "a\x00b"}},
        {"action": "retry", "filter": {"q": "lone \udc80"}},
        {"action": "cancel", "filter": {"queue": "\ud800"}},
        {"action": "discard", "filter": {"task": "a\udfffb"}},
        {"action": "retry", "dry_run": "yes"},
        {"action": "retry", "more": 1},
    ],
)
def test_a_bad_bulk_request_is_a_400_and_changes_nothing(client, operator_headers, body):
    job = make_job(JobState.DEAD_LETTER)
    response = post_json(client, "/api/v1/jobs/bulk", body, operator_headers)
    assert response.status_code == 400, response.content
    assert Job.objects.get(id=job.id).state == JobState.DEAD_LETTER


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/jobs/bulk", '{"action": "retry", "filter": {}, "action": "discard"}'),
        ("/api/v1/jobs/bulk", '{"action": "retry", "filter": {"state": "x", "state": ""}}'),
        ("/api/v1/jobs/{id}/rerun", '{"kwargs": {"to": "a@x", "to": "b@x"}}'),
    ],
)
def test_a_body_naming_one_key_twice_is_a_400_and_changes_nothing(
    client, operator_headers, path, body
):
    job = make_job(JobState.DEAD_LETTER)
    response = post_json(client, path.format(id=job.id), body, operator_headers)
    assert response.status_code == 400, response.content
    assert "appears twice" in response.json()["error"]
    assert list(Job.objects.values_list("state", flat=True)) == [JobState.DEAD_LETTER]


def test_bulk_needs_the_operate_permission(client, reader_headers):
    job = make_job(JobState.DEAD_LETTER)
    response = post_json(client, "/api/v1/jobs/bulk", {"action": "retry"}, reader_headers)
    assert response.status_code == 403
    assert Job.objects.get(id=job.id).state == JobState.DEAD_LETTER


# Queues.


def test_the_queue_list_shows_counts_oldest_due_and_pauses(client, operator_headers):
    make_job(JobState.PENDING, queue_name="emails")
    make_job(JobState.DEAD_LETTER, queue_name="emails")
    make_job(JobState.PENDING, queue_name="default")
    queues.pause("reports")
    results = client.get("/api/v1/queues", headers=operator_headers).json()["results"]
    by_name = {queue["name"]: queue for queue in results}
    assert set(by_name) == {"default", "emails", "reports"}
    assert by_name["emails"]["counts"]["pending"] == 1
    assert by_name["emails"]["counts"]["dead_letter"] == 1
    assert by_name["emails"]["oldest_due_at"] is not None
    assert by_name["emails"]["paused"] is False
    assert by_name["reports"]["paused"] is True


def test_pause_and_resume_answer_the_queue(client, operator_headers):
    make_job(JobState.PENDING, queue_name="emails")
    paused = client.post("/api/v1/queues/emails/pause", headers=operator_headers).json()
    assert (paused["name"], paused["paused"], paused["counts"]["pending"]) == ("emails", True, 1)
    assert queues.is_paused("emails")
    resumed = client.post("/api/v1/queues/emails/resume", headers=operator_headers).json()
    assert resumed["paused"] is False
    assert AuditEntry.objects.filter(subject="emails").count() == 2


def test_a_read_only_token_cannot_pause(client, reader_headers):
    response = client.post("/api/v1/queues/emails/pause", headers=reader_headers)
    assert response.status_code == 403
    assert not queues.is_paused("emails")


def test_a_queue_name_over_100_characters_is_a_400(client, operator_headers):
    response = client.post(f"/api/v1/queues/{'q' * 101}/pause", headers=operator_headers)
    assert response.status_code == 400
