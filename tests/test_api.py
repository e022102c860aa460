"""The JSON API: who may call what, the job JSON, the actions and every refusal."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from dashboard.models import ApiToken
from jobs.models import AuditEntry, Job
from jobs.states import JobState
from tests.factories import make_job
from tests.test_api_support import bearer, make_user, token_for

pytestmark = pytest.mark.django_db

# Section 3 of the contract: the job's fields the outside world reads.
CONTRACT_FIELD_NAMES = """
    id task_path args kwargs queue_name priority state attempt max_attempts run_after not_after
    dedup_key rerun_of parent enqueued_at started_at finished_at error_type error_message
    error_traceback dead_letter_reason return_value
"""
CONTRACT_FIELDS = set(CONTRACT_FIELD_NAMES.split())


# Each endpoint: (method, path with {id}, state of the job {id} names, status for an operator).
ENDPOINTS = {
    "list": ("get", "/api/v1/jobs", JobState.PENDING, 200),
    "detail": ("get", "/api/v1/jobs/{id}", JobState.PENDING, 200),
    "summary": ("get", "/api/v1/metrics/summary", JobState.PENDING, 200),
    "openapi": ("get", "/api/v1/openapi.json", JobState.PENDING, 200),
    "prometheus": ("get", "/metrics", JobState.PENDING, 200),
    "retry": ("post", "/api/v1/jobs/{id}/retry", JobState.DEAD_LETTER, 200),
    "rerun": ("post", "/api/v1/jobs/{id}/rerun", JobState.SUCCEEDED, 201),
    "cancel": ("post", "/api/v1/jobs/{id}/cancel", JobState.PENDING, 200),
    "discard": ("post", "/api/v1/jobs/{id}/discard", JobState.SUCCEEDED, 200),
    "queues": ("get", "/api/v1/queues", JobState.PENDING, 200),
    "pause": ("post", "/api/v1/queues/emails/pause", JobState.PENDING, 200),
    "resume": ("post", "/api/v1/queues/emails/resume", JobState.PENDING, 200),
}
READS = [name for name, (method, *_) in ENDPOINTS.items() if method == "get"]
ACTIONS = [name for name, (method, *_) in ENDPOINTS.items() if method == "post"]


def call(client, endpoint, headers=None):
    method, path, state, _ = ENDPOINTS[endpoint]
    job = make_job(state)
    response = getattr(client, method)(path.format(id=job.id), headers=headers or {})
    return response, job


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_anonymous_callers_get_a_401_json_challenge_not_a_redirect(client, endpoint):
    response, job = call(client, endpoint)

    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert "error" in response.json()
    assert Job.objects.get(id=job.id).state == ENDPOINTS[endpoint][2]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize(
    "authorization",
    ["Bearer jst_not-a-token", "Bearer ", "Basic b3BlcmF0b3I6cHc=", "Bearer jst_\x00"],
)
def test_bad_credentials_get_a_401_even_with_a_session(client, endpoint, authorization):
    client.force_login(make_user("staff", operate=True))

    response, _ = call(client, endpoint, {"Authorization": authorization})

    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_revoked_token_gets_a_401(client, endpoint):
    user = make_user("operator", operate=True)
    key = token_for(user)
    ApiToken.objects.update(revoked_at=timezone.now())

    response, _ = call(client, endpoint, bearer(key))

    assert response.status_code == 401


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_the_token_of_an_inactive_user_gets_a_401(client, endpoint):
    user = make_user("gone", operate=True)
    key = token_for(user)
    User = type(user)
    User.objects.filter(pk=user.pk).update(is_active=False)

    response, _ = call(client, endpoint, bearer(key))

    assert response.status_code == 401


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_the_token_of_a_non_staff_user_gets_a_403(client, endpoint):
    key = token_for(make_user("customer", staff=False, operate=True))

    response, job = call(client, endpoint, bearer(key))

    assert response.status_code == 403
    assert response.json()["error"] == "staff access required"
    assert Job.objects.get(id=job.id).state == ENDPOINTS[endpoint][2]


@pytest.mark.parametrize("endpoint", READS)
def test_a_read_only_token_reads_everything(client, endpoint, reader_headers):
    response, _ = call(client, endpoint, reader_headers)

    assert response.status_code == 200


@pytest.mark.parametrize("endpoint", ACTIONS)
def test_a_read_only_token_cannot_act(client, endpoint, reader_headers):
    response, job = call(client, endpoint, reader_headers)

    assert response.status_code == 403
    assert "jobs.operate_job" in response.json()["error"]
    assert Job.objects.get(id=job.id).state == ENDPOINTS[endpoint][2]
    assert Job.objects.count() == 1


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_an_operator_token_may_call_every_endpoint(client, endpoint, operator_headers):
    response, _ = call(client, endpoint, operator_headers)

    assert response.status_code == ENDPOINTS[endpoint][3]


@pytest.mark.parametrize("endpoint", READS)
def test_a_staff_session_reads_everything(client, endpoint):
    client.force_login(make_user("reader"))

    response, _ = call(client, endpoint)

    assert response.status_code == 200


@pytest.mark.parametrize("endpoint", ACTIONS)
def test_a_session_post_without_a_csrf_token_is_refused_with_json(endpoint):
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("operator", operate=True))

    response, job = call(client, endpoint)

    assert response.status_code == 403
    assert response.json()["error"].startswith("CSRF check failed")
    assert Job.objects.get(id=job.id).state == ENDPOINTS[endpoint][2]


@pytest.mark.parametrize("endpoint", ACTIONS)
def test_a_session_post_with_the_csrf_token_acts(endpoint):
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("operator", operate=True))
    client.get("/api/v1/jobs")  # any page; the test client needs a cookie to echo
    from django.middleware.csrf import _get_new_csrf_string

    secret = _get_new_csrf_string()
    client.cookies["csrftoken"] = secret

    response, _ = call(client, endpoint, {"X-CSRFToken": secret})

    assert response.status_code == ENDPOINTS[endpoint][3]


@pytest.mark.parametrize("endpoint", ACTIONS)
def test_a_token_post_needs_no_csrf_token(endpoint, operator_headers):
    client = Client(enforce_csrf_checks=True)

    response, _ = call(client, endpoint, operator_headers)

    assert response.status_code == ENDPOINTS[endpoint][3]


# --- the job JSON -------------------------------------------------------------------------------


def test_a_job_shows_every_contract_field_with_string_ids_and_iso_times(client, reader_headers):
    parent = make_job(JobState.SUCCEEDED)
    original = make_job(JobState.SUCCEEDED)
    job = make_job(
        JobState.DEAD_LETTER,
        kwargs={"x": [1, None]},
        queue_name="emails",
        priority=7,
        not_after=timezone.now() + timedelta(hours=1),
        dedup_key="welcome-42",
        rerun_of=original,
        parent=parent,
        error_traceback="Traceback ...",
        started_at=timezone.now() - timedelta(seconds=3),
    )

    data = client.get(f"/api/v1/jobs/{job.id}", headers=reader_headers).json()

    assert set(data) >= CONTRACT_FIELDS
    assert data["id"] == str(job.id)
    assert data["rerun_of"] == str(original.id)
    assert data["parent"] == str(parent.id)
    assert data["kwargs"] == {"x": [1, None]}
    assert data["state"] == "dead_letter"
    assert data["dead_letter_reason"] == "exhausted"
    for field in ("run_after", "not_after", "enqueued_at", "started_at", "finished_at"):
        assert timezone.datetime.fromisoformat(data[field]) == getattr(job, field)


def test_a_job_detail_lists_its_attempts_in_order(client, reader_headers):
    job = make_job(JobState.DEAD_LETTER)
    for number in (2, 1, 3):
        job.attempts.create(number=number, outcome="failed", worker_id="w", error_type="E")

    data = client.get(f"/api/v1/jobs/{job.id}", headers=reader_headers).json()

    assert [a["number"] for a in data["attempts"]] == [1, 2, 3]
    assert data["attempts"][0] == {
        "number": 1,
        "worker_id": "w",
        "started_at": None,
        "finished_at": None,
        "outcome": "failed",
        "error_type": "E",
        "error_message": "",
        "error_traceback": "",
    }


def test_the_list_filters_by_state_queue_and_task(client, reader_headers):
    wanted = make_job(JobState.DEAD_LETTER, queue_name="emails", task_path="app.send")
    make_job(JobState.DEAD_LETTER, queue_name="emails", task_path="app.other")
    make_job(JobState.DEAD_LETTER, queue_name="default", task_path="app.send")
    make_job(JobState.SUCCEEDED, queue_name="emails", task_path="app.send")

    response = client.get(
        "/api/v1/jobs?state=dead_letter&queue=emails&task=app.send", headers=reader_headers
    )

    assert response.json() == {"results": [response.json()["results"][0]], "next_cursor": None}
    assert response.json()["results"][0]["id"] == str(wanted.id)


def test_the_list_is_newest_first(client, reader_headers):
    now = timezone.now()
    old = make_job(enqueued_at=now - timedelta(minutes=5))
    new = make_job(enqueued_at=now)

    ids = [j["id"] for j in client.get("/api/v1/jobs", headers=reader_headers).json()["results"]]

    assert ids == [str(new.id), str(old.id)]


@pytest.mark.parametrize(("limit", "page_size"), [("0", 1), ("-5", 1), ("2", 2), ("%2B2", 2)])
def test_the_limit_is_clamped_to_at_least_one(client, reader_headers, limit, page_size):
    for _ in range(3):
        make_job()

    data = client.get(f"/api/v1/jobs?limit={limit}", headers=reader_headers).json()

    assert len(data["results"]) == page_size
    assert data["next_cursor"] is not None


def test_the_limit_is_clamped_to_500_and_defaults_to_50(client, reader_headers):
    Job.objects.bulk_create(Job(task_path="tests.tasks.add") for _ in range(501))

    default = client.get("/api/v1/jobs", headers=reader_headers).json()
    largest = client.get("/api/v1/jobs?limit=100000", headers=reader_headers).json()

    assert len(default["results"]) == 50
    assert len(largest["results"]) == 500
    assert largest["next_cursor"] is not None


# --- actions ------------------------------------------------------------------------------------


def test_retry_puts_a_dead_letter_back_in_line_on_the_same_row(client, operator_headers):
    job = make_job(JobState.DEAD_LETTER)

    response = client.post(f"/api/v1/jobs/{job.id}/retry", headers=operator_headers)

    assert response.status_code == 200
    assert response.json()["id"] == str(job.id)
    assert response.json()["state"] == "pending"
    assert response.json()["max_attempts"] == 4
    assert Job.objects.count() == 1


def test_retry_of_a_succeeded_job_is_a_409_saying_why_with_the_job(client, operator_headers):
    job = make_job(JobState.SUCCEEDED)

    response = client.post(f"/api/v1/jobs/{job.id}/retry", headers=operator_headers)

    assert response.status_code == 409
    assert response.json()["error"] == "job already succeeded"
    assert response.json()["job"]["state"] == "succeeded"


def test_retry_of_a_dead_letter_whose_dedup_key_was_taken_is_a_409_naming_the_holder(
    client, operator_headers
):
    dead = make_job(JobState.DEAD_LETTER, dedup_key="report-7")
    holder = make_job(JobState.PENDING, dedup_key="report-7")

    response = client.post(f"/api/v1/jobs/{dead.id}/retry", headers=operator_headers)

    assert response.status_code == 409
    assert response["Content-Type"] == "application/json"
    assert str(holder.id) in response.json()["error"]
    assert response.json()["held_by"] == str(holder.id)
    assert response.json()["job"]["state"] == "dead_letter"


def test_rerun_creates_a_new_job_pointing_at_the_original(client, operator_headers):
    job = make_job(JobState.DEAD_LETTER, args=[5, 6], queue_name="emails")

    response = client.post(f"/api/v1/jobs/{job.id}/rerun", headers=operator_headers)

    data = response.json()
    assert response.status_code == 201
    assert data["rerun_of"] == str(job.id)
    assert data["id"] != str(job.id)
    assert (data["state"], data["attempt"], data["args"], data["queue_name"]) == (
        "pending",
        0,
        [5, 6],
        "emails",
    )
    assert response.headers["Location"] == f"/api/v1/jobs/{data['id']}"
    assert Job.objects.get(id=job.id).state == JobState.DEAD_LETTER


def test_rerun_of_a_pending_job_is_a_409(client, operator_headers):
    job = make_job(JobState.PENDING)

    response = client.post(f"/api/v1/jobs/{job.id}/rerun", headers=operator_headers)

    assert response.status_code == 409
    assert "only finished jobs can be rerun" in response.json()["error"]
    assert Job.objects.count() == 1


def test_cancel_of_a_pending_job_cancels_it(client, operator_headers):
    job = make_job(JobState.PENDING)

    response = client.post(f"/api/v1/jobs/{job.id}/cancel", headers=operator_headers)

    assert response.status_code == 200
    assert response.json()["state"] == "cancelled"
    assert response.json()["finished_at"] is not None


def test_cancel_of_a_running_job_asks_its_worker_once(client, operator_headers):
    job = make_job(JobState.RUNNING)

    first = client.post(f"/api/v1/jobs/{job.id}/cancel", headers=operator_headers)
    second = client.post(f"/api/v1/jobs/{job.id}/cancel", headers=operator_headers)

    assert first.status_code == 200
    assert first.json()["state"] == "running"
    assert first.json()["cancel_requested_at"] is not None
    assert second.status_code == 409
    assert second.json()["error"] == "cancel already requested"


def test_cancel_of_a_finished_job_is_a_409(client, operator_headers):
    job = make_job(JobState.SUCCEEDED)

    response = client.post(f"/api/v1/jobs/{job.id}/cancel", headers=operator_headers)

    assert response.status_code == 409
    assert response.json()["job"]["id"] == str(job.id)


def test_actions_are_audited_as_the_tokens_user_from_the_api(client, operator_headers):
    job = make_job(JobState.DEAD_LETTER)

    client.post(f"/api/v1/jobs/{job.id}/retry", headers=operator_headers)

    entry = AuditEntry.objects.get(job=job)
    assert (entry.action, entry.source, entry.username) == ("retry", "api", "operator")


@pytest.mark.parametrize("action", ["retry", "rerun", "cancel"])
def test_get_on_an_action_is_a_405_naming_post(client, operator_headers, action):
    job = make_job(JobState.DEAD_LETTER)

    response = client.get(f"/api/v1/jobs/{job.id}/{action}", headers=operator_headers)

    assert response.status_code == 405
    assert response.headers["Allow"] == "POST"
    assert response.json()["error"] == "method GET not allowed"


@pytest.mark.parametrize("method", ["post", "put", "delete", "patch"])
def test_writes_to_a_read_endpoint_are_a_405(client, operator_headers, method):
    response = getattr(client, method)("/api/v1/jobs", headers=operator_headers)

    assert response.status_code == 405
    assert response.headers["Allow"] == "GET, HEAD"


# --- not found and malformed input --------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/retry", "/rerun", "/cancel"])
@pytest.mark.parametrize("job_id", [str(uuid.uuid4()), "not-a-uuid", "1", "%00", "é" * 300])
def test_an_unknown_or_malformed_job_id_is_a_json_404(client, operator_headers, suffix, job_id):
    method = client.post if suffix else client.get

    response = method(f"/api/v1/jobs/{job_id}{suffix}", headers=operator_headers)

    assert response.status_code == 404
    assert response.json() == {"error": "no such job"}


@pytest.mark.parametrize(
    "path", ["/api/v1/", "/api/v1/nope", "/api/v1/jobs/", "/api/v1/jobs/a/b/c"]
)
def test_an_unknown_api_path_is_a_json_404(client, reader_headers, path):
    response = client.get(path, headers=reader_headers)

    assert response.status_code == 404
    assert "error" in response.json()


@pytest.mark.parametrize(
    "query",
    [
        "state=bogus",
        "state=DEAD_LETTER",
        "state=pending&state=running",
        "state=pending%00",
        "queue=a%00b",
        "task=%00",
        "cursor=abc",
        "cursor=%00",
        "limit=ten",
        "limit=1.5",
        "limit=1e3",
        "limit=" + "9" * 11,
        "limit=" + "9" * 5000,
        "limit=%EF%BC%95",  # a full-width digit five
        "limit=-",
        "colour=blue",
        "%00=1",
    ],
)
def test_malformed_list_queries_are_a_400_with_a_json_error(client, reader_headers, query):
    response = client.get(f"/api/v1/jobs?{query}", headers=reader_headers)

    assert response.status_code == 400
    assert response.json()["error"]


def test_an_unknown_state_lists_the_allowed_ones(client, reader_headers):
    data = client.get("/api/v1/jobs?state=bogus", headers=reader_headers).json()

    assert data["error"] == "unknown state"
    assert "dead_letter" in data["allowed"]


@pytest.mark.parametrize("path", ["/api/v1/jobs/{id}", "/api/v1/metrics/summary"])
def test_unknown_query_parameters_on_other_endpoints_are_a_400(client, reader_headers, path):
    job = make_job()

    response = client.get(path.format(id=job.id) + "?verbose=1", headers=reader_headers)

    assert response.status_code == 400
    assert response.json()["unknown"] == ["verbose"]


def test_empty_filters_are_ignored(client, reader_headers):
    make_job()

    response = client.get("/api/v1/jobs?state=&queue=&task=&cursor=&limit=", headers=reader_headers)

    assert len(response.json()["results"]) == 1


# --- last_used_at -------------------------------------------------------------------------------


def test_a_token_records_when_it_was_last_used(client):
    key = token_for(make_user("reader"))

    client.get("/api/v1/jobs", headers=bearer(key))

    assert ApiToken.objects.get().last_used_at is not None


def test_last_used_at_is_written_at_most_once_a_minute(client):
    key = token_for(make_user("reader"))
    recent = timezone.now() - timedelta(seconds=30)
    ApiToken.objects.update(last_used_at=recent)

    client.get("/api/v1/jobs", headers=bearer(key))
    unchanged = ApiToken.objects.get().last_used_at
    ApiToken.objects.update(last_used_at=recent - timedelta(minutes=1))
    client.get("/api/v1/jobs", headers=bearer(key))

    assert unchanged == recent
    assert ApiToken.objects.get().last_used_at > recent


def test_a_token_still_reads_when_its_last_use_cannot_be_written(client):
    key = token_for(make_user("reader"))
    make_job()
    refuse_token_writes()

    listed = client.get("/api/v1/jobs", headers=bearer(key))
    scraped = client.get("/metrics", headers=bearer(key))

    assert listed.status_code == 200 and len(listed.json()["results"]) == 1
    assert scraped.status_code == 200 and "jobs_enqueued" in scraped.content.decode()
    assert ApiToken.objects.get().last_used_at is None


def refuse_token_writes():
    """The database refuses every update of a token row, as a full disk refuses any write."""
    table = ApiToken._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                f"CREATE TRIGGER refuse_token_writes BEFORE UPDATE ON {table} "
                "BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END"
            )
        else:
            cursor.execute(
                "CREATE FUNCTION refuse_token_writes() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'could not extend file: No space left on device'; END $$"
            )
            cursor.execute(
                f"CREATE TRIGGER refuse_token_writes BEFORE UPDATE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION refuse_token_writes()"
            )


def test_run_now_makes_a_job_waiting_for_later_due(client, operator_headers):
    job = make_job(JobState.PENDING, run_after=timezone.now() + timedelta(hours=1))

    response = client.post(f"/api/v1/jobs/{job.id}/run-now", headers=operator_headers)

    assert response.status_code == 200
    job.refresh_from_db()
    assert job.run_after <= timezone.now()
    assert response.json()["id"] == str(job.id)
    assert response.json()["state"] == "pending"
    assert AuditEntry.objects.get(job=job).source == "api"


def test_run_now_of_a_due_or_finished_job_is_a_409(client, operator_headers):
    for job in (make_job(JobState.PENDING), make_job(JobState.SUCCEEDED)):
        response = client.post(f"/api/v1/jobs/{job.id}/run-now", headers=operator_headers)
        assert response.status_code == 409
        assert response.json()["job"]["id"] == str(job.id)


def test_run_now_needs_the_operate_permission(client, reader_headers):
    job = make_job(JobState.PENDING, run_after=timezone.now() + timedelta(hours=1))
    response = client.post(f"/api/v1/jobs/{job.id}/run-now", headers=reader_headers)
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.run_after > timezone.now()


def test_run_now_of_an_unknown_job_is_a_404(client, operator_headers):
    response = client.post(f"/api/v1/jobs/{uuid.uuid4()}/run-now", headers=operator_headers)
    assert response.status_code == 404


def test_a_running_job_whose_lease_lapsed_says_so_in_the_list_and_alone(client, reader_headers):
    lapsed = make_job(JobState.RUNNING)
    Job.objects.filter(id=lapsed.id).update(lease_expires_at=timezone.now() - timedelta(seconds=8))
    held = make_job(JobState.RUNNING)
    Job.objects.filter(id=held.id).update(lease_expires_at=timezone.now() + timedelta(seconds=30))
    done = make_job(JobState.SUCCEEDED)
    listed = client.get("/api/v1/jobs", headers=reader_headers).json()["results"]
    assert {j["id"]: j["lease_lapsed"] for j in listed} == {
        str(lapsed.id): True,
        str(held.id): False,
        str(done.id): False,
    }
    alone = client.get(f"/api/v1/jobs/{lapsed.id}", headers=reader_headers).json()
    assert (alone["state"], alone["lease_lapsed"]) == (JobState.RUNNING, True)
