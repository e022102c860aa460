"""Limits in the console (/limits/, a held job's page) and the JSON API (/api/v1/limits)."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import AuditEntry, Job, LimitOverride, PausedQueue
from jobs.states import JobState
from tests.factories import make_job
from tests.test_api_support import bearer, token_for
from tests.test_api_support import make_user as make_api_user
from tests.test_limits import with_limits

pytestmark = pytest.mark.django_db

LIMITS = {
    "queue:emails": {"concurrency": 2, "rate": [100, 60]},
    "key:tenant-*": {"concurrency": 2},
    "queue:webhooks": {"pause_after_failures": [50, 60]},
}


@pytest.fixture(autouse=True)
def configured():
    with with_limits(LIMITS):
        yield


@pytest.fixture
def operator_token():
    return bearer(token_for(make_api_user("limits-operator", operate=True)))


@pytest.fixture
def reader_token():
    return bearer(token_for(make_api_user("limits-reader")))


def due_ago(minutes=5):
    return timezone.now() - timedelta(minutes=minutes)


def tenant_at_its_limit(key="tenant-42"):
    for _ in range(2):
        make_job(JobState.RUNNING, limit_key=key)
    return make_job(limit_key=key, run_after=due_ago())


# --- the API ---------------------------------------------------------------------------------


def test_the_api_lists_every_limit_with_what_it_uses(client, reader_token):
    tenant_at_its_limit()
    make_job(limit_key="tenant-7", run_after=due_ago())
    make_job(JobState.RUNNING, queue_name="emails")
    response = client.get("/api/v1/limits", headers=reader_token)
    assert response.status_code == 200
    rows = {row["name"]: row for row in response.json()["results"]}
    assert set(rows) == set(LIMITS)
    key = rows["key:tenant-*"]
    assert {k: key[k] for k in ("concurrency", "rate", "running", "waiting", "source")} == {
        "concurrency": 2,
        "rate": None,
        "running": 2,
        "waiting": 1,
        "source": "settings",
    }
    assert (key["keys"], key["keys_full"]) == (2, 1)
    emails = rows["queue:emails"]
    assert (emails["running"], emails["rate"], emails["waiting"]) == (1, [100, 60], 0)
    assert rows["queue:webhooks"]["pause_after_failures"] == [50, 60]


def test_the_api_overrides_a_limit_and_clears_the_override(client, operator_token):
    body = json.dumps({"concurrency": 5, "rate": [10, 1]})
    response = client.post(
        "/api/v1/limits/queue:emails", body, content_type="application/json", headers=operator_token
    )
    assert response.status_code == 200
    assert {k: response.json()[k] for k in ("name", "concurrency", "rate", "source")} == {
        "name": "queue:emails",
        "concurrency": 5,
        "rate": [10, 1],
        "source": "override",
    }
    response = client.delete("/api/v1/limits/queue:emails", headers=operator_token)
    assert response.status_code == 200
    assert (response.json()["concurrency"], response.json()["source"]) == (2, "settings")
    assert [a.source for a in AuditEntry.objects.filter(subject="queue:emails")] == ["api", "api"]


def test_the_api_refuses_an_invalid_limit_with_400_and_changes_nothing(client, operator_token):
    for name, body in [
        ("queue:emails", {"concurrency": 0}),
        ("queue:emails", {"rate": [10]}),
        ("queue:emails", {"rate": "fast"}),
        ("bucket:emails", {"concurrency": 1}),
        ("queue:emails", {"burst": 3}),
        ("queue:emails", {"concurrency": 10_000_000_000}),
        ("queue:emails", {"rate": [3_000_000_000, 1]}),
        ("queue:emails", {"concurrency": 10**22}),
        ("queue:emails", {"rate": [1, 1e11]}),
    ]:
        response = client.post(
            f"/api/v1/limits/{name}",
            json.dumps(body),
            content_type="application/json",
            headers=operator_token,
        )
        assert response.status_code == 400, (name, body)
        assert "error" in response.json()
    assert not LimitOverride.objects.exists()


def test_reading_staff_cannot_change_limits(client, reader_token):
    response = client.post(
        "/api/v1/limits/queue:emails",
        json.dumps({"concurrency": 9}),
        content_type="application/json",
        headers=reader_token,
    )
    assert response.status_code == 403
    assert not LimitOverride.objects.exists()


def test_a_new_limit_can_be_set_at_runtime_and_clearing_it_removes_it(client, operator_token):
    body = json.dumps({"concurrency": 1})
    response = client.post(
        "/api/v1/limits/task:tests.tasks.record",
        body,
        content_type="application/json",
        headers=operator_token,
    )
    assert response.status_code == 200 and response.json()["source"] == "override"
    response = client.delete("/api/v1/limits/task:tests.tasks.record", headers=operator_token)
    assert response.status_code == 204
    assert not LimitOverride.objects.exists()
    response = client.delete("/api/v1/limits/task:tests.tasks.record", headers=operator_token)
    assert response.status_code == 404


def test_a_key_limit_an_earlier_glob_takes_the_keys_of_is_set_with_a_warning(
    client, operator_token
):
    def set_limit(name):
        return client.post(
            f"/api/v1/limits/{name}",
            json.dumps({"concurrency": 1}),
            content_type="application/json",
            headers=operator_token,
        )

    # key:tenant-* (LIMITS) comes first and matches every key key:tenant-vip* does.
    shadowed = set_limit("key:tenant-vip*")
    assert shadowed.status_code == 200
    assert shadowed.json()["warning"].startswith(
        "key:tenant-vip* may never apply: key:tenant-* comes first"
    )
    assert "warning" not in set_limit("key:partner-*").json()
    assert "warning" not in set_limit("key:tenant-*").json()  # the first itself


def test_the_form_warns_of_a_key_limit_an_earlier_glob_takes_the_keys_of(client, operator):
    client.force_login(operator)
    form = {"name": "key:tenant-vip*", "concurrency": "1", "rate_count": "", "rate_seconds": ""}
    page = client.post("/limits/set/", form, follow=True).content.decode()
    assert "key:tenant-vip*: limit set for every worker" in page
    assert "key:tenant-vip* may never apply: key:tenant-* comes first" in page


def test_the_api_refuses_a_post_that_names_neither_concurrency_nor_rate(client, operator_token):
    for body in ["", "{}"]:
        response = client.post(
            "/api/v1/limits/key:tenant-*",
            body,
            content_type="application/json",
            headers=operator_token,
        )
        assert response.status_code == 400
        assert "concurrency" in response.json()["error"]
    assert not LimitOverride.objects.exists()


# --- the console -----------------------------------------------------------------------------


def test_the_page_shows_each_limit_and_the_operators_form(client, operator):
    tenant_at_its_limit()
    client.force_login(operator)
    html = client.get("/limits/").content.decode()
    assert 'data-limit="key:tenant-*"' in html and 'data-limit="queue:webhooks"' in html
    assert "2 / 2 per key" in html
    assert "pauses after 50 failures in 60 s" in html
    assert "Save limit" in html


def test_read_only_staff_see_the_page_without_the_form(client, viewer):
    client.force_login(viewer)
    html = client.get("/limits/").content.decode()
    assert 'data-limit="queue:emails"' in html and "Save limit" not in html


def test_the_form_sets_a_limit_and_refuses_a_half_rate(client, operator):
    client.force_login(operator)
    response = client.post(
        "/limits/set/",
        {"name": "queue:emails", "concurrency": "7", "rate_count": "", "rate_seconds": ""},
    )
    assert response.status_code == 302
    assert LimitOverride.objects.get(name="queue:emails").concurrency == 7
    response = client.post("/limits/set/", {"name": "queue:emails", "rate_count": "5"})
    assert response.status_code == 400
    assert "needs both" in response.content.decode()
    response = client.post("/limits/clear/", {"name": "queue:emails"})
    assert response.status_code == 302 and not LimitOverride.objects.exists()


def test_the_form_names_only_the_field_it_refuses(client, operator):
    client.force_login(operator)
    for seconds in ["nan", "inf"]:
        response = client.post(
            "/limits/set/", {"name": "queue:emails", "rate_count": "5", "rate_seconds": seconds}
        )
        assert response.status_code == 400
        assert "needs both" not in response.content.decode()
    assert not LimitOverride.objects.exists()


def test_clearing_an_override_that_was_the_whole_limit_says_no_limit_is_left(client, operator):
    from jobs.limits import set_limit

    set_limit("key:partner-*", concurrency=1)
    client.force_login(operator)
    response = client.post("/limits/clear/", {"name": "key:partner-*"}, follow=True)
    html = response.content.decode()
    assert "no such limit is set any more" in html and "the setting applies again" not in html


def test_a_held_jobs_page_says_what_holds_it(client, operator):
    held = tenant_at_its_limit()
    free = make_job(limit_key="other", run_after=due_ago())
    client.force_login(operator)
    html = client.get(f"/jobs/{held.id}/").content.decode()
    assert "waiting for key:tenant-* — tenant-42: 2 of 2 running" in html
    assert 'href="/limits/">See the limits' in html
    assert "waiting for" not in client.get(f"/jobs/{free.id}/").content.decode()
    assert Job.objects.get(id=held.id).state == JobState.PENDING


# --- metrics ---------------------------------------------------------------------------------


def test_a_jobs_page_shows_its_limit_key(client, operator):
    job = make_job(limit_key="tenant-7")
    client.force_login(operator)
    html = client.get(f"/jobs/{job.id}/").content.decode()
    assert '<dt>Limit key</dt><dd class="mono">tenant-7</dd>' in html


def test_a_waiting_jobs_page_says_its_queue_is_paused_and_by_whom(client, operator):
    from jobs import queues

    held = make_job(queue_name="webhooks", run_after=due_ago())
    done = make_job(JobState.SUCCEEDED, queue_name="webhooks")
    PausedQueue.objects.create(name="webhooks", paused_by="circuit breaker")
    client.force_login(operator)
    html = client.get(f"/jobs/{held.id}/").content.decode()
    assert "waiting for queue" in html and "to be resumed: paused by the circuit breaker" in html
    assert "waiting for queue" not in client.get(f"/jobs/{done.id}/").content.decode()
    queues.resume("webhooks")
    assert "waiting for queue" not in client.get(f"/jobs/{held.id}/").content.decode()


def test_metrics_show_each_limits_running_and_waiting_jobs_and_the_snoozes(client, reader_token):
    from jobs import db

    tenant_at_its_limit()
    db.add_counters({"jobs_snoozed": 4})
    text = client.get("/metrics", headers=reader_token).content.decode()
    assert 'jobsite_limit_running{limit="key:tenant-*"} 2.0' in text
    assert 'jobsite_limit_waiting{limit="key:tenant-*"} 1.0' in text
    assert 'jobsite_limit_waiting{limit="queue:emails"} 0.0' in text
    assert "jobsite_jobs_snoozed_total 4.0" in text


def test_the_queues_page_says_the_circuit_breaker_paused_a_queue(client, operator):
    from jobs import breaker
    from jobs.limits import in_force
    from jobs.models import Attempt

    for _ in range(50):
        job = make_job(JobState.DEAD_LETTER, queue_name="webhooks")
        Attempt.objects.create(job=job, number=1, outcome="failed", finished_at=timezone.now())
    assert breaker.trip({"webhooks"}, in_force()) == ["webhooks"]
    client.force_login(operator)
    html = client.get("/queues/").content.decode()
    assert "by the circuit breaker" in html


def test_the_limits_page_is_linked_from_the_queues_page(operator_client):
    assert 'href="/limits/"' in operator_client.get("/queues/").content.decode()
