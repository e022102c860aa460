"""The console's audit log page: who did what to which job, filtered and paged by id."""

import re
import uuid

import pytest

from jobs import actions, queues
from jobs.models import AuditEntry
from jobs.states import JobState
from tests.test_dashboard_views import make_job, make_user

pytestmark = pytest.mark.django_db


def entry_ids(html: str) -> list[str]:
    return re.findall(r'<a class="mono" href="/jobs/([0-9a-f-]{36})/">', html)


def test_the_audit_log_lists_every_action_newest_first_with_who_what_and_from_where(
    viewer_client, django_user_model
):
    olivia = make_user(django_user_model, "olivia-audit", operate=True)
    dead = make_job(JobState.DEAD_LETTER)
    actions.retry(dead.id, user=olivia, source="api")
    queues.pause("emails", user=olivia, source="dashboard")
    html = viewer_client.get("/audit/").content.decode()
    assert html.index("pause") < html.index("job put back in line")
    assert f'href="/jobs/{dead.id}/"' in html
    assert "olivia-audit" in html and ">api<" in html and ">dashboard<" in html
    assert "emails" in html  # a queue's entry names the queue


def test_the_audit_log_filters_by_user_action_and_job(viewer_client, django_user_model):
    olivia = make_user(django_user_model, "olivia-f", operate=True)
    oscar = make_user(django_user_model, "oscar-f", operate=True)
    first, second = make_job(JobState.DEAD_LETTER), make_job(JobState.CANCELLED)
    actions.retry(first.id, user=olivia, source="dashboard")
    actions.rerun(second.id, user=oscar, source="dashboard")
    actions.cancel(first.id, user=oscar, source="api")

    def listed(query):
        html = viewer_client.get(f"/audit/?{query}").content.decode()
        return set(re.findall(r"<td><a [^>]*>(retry|rerun|cancel)</a></td>", html))

    assert listed("user=oscar-f") == {"rerun", "cancel"}
    assert listed("action=retry") == {"retry"}
    assert listed(f"job={first.id}") == {"retry", "cancel"}
    assert listed(f"user=oscar-f&job={first.id}") == {"cancel"}


def test_a_discarded_jobs_entries_are_still_found_by_its_id(viewer_client):
    job = make_job(JobState.SUCCEEDED)
    actions.discard(job.id, user=None, source="python")
    html = viewer_client.get(f"/audit/?job={job.id}").content.decode()
    assert "job and its attempts deleted" in html and str(job.id) in html


def test_a_bad_job_id_or_cursor_is_a_clear_400_and_not_a_crash(viewer_client):
    for query in ("job=abc", "cursor=forged", "user=a%00b"):
        response = viewer_client.get(f"/audit/?{query}")
        assert response.status_code == 400
        assert "These filters cannot be used." in response.content.decode()


def test_pages_walk_every_entry_once_by_id_without_counting(
    viewer_client, django_assert_max_num_queries
):
    jobs = [make_job(JobState.DEAD_LETTER) for _ in range(7)]
    for job in jobs:
        actions.retry(job.id, source="python", user=None)
    seen, path = [], "/audit/?action=retry&limit=3"
    while path:
        with django_assert_max_num_queries(12):
            html = viewer_client.get(path).content.decode()
        seen += entry_ids(html)
        older = re.search(r'href="(/audit/\?[^"]*cursor=[^"]+)"[^>]*>Older', html)
        path = older.group(1).replace("&amp;", "&") if older else None
    assert sorted(seen) == sorted(str(j.id) for j in jobs)
    assert seen == [str(j.id) for j in reversed(jobs)]


def test_each_audit_line_of_a_job_links_to_the_log_of_that_job(operator_client):
    job = make_job(JobState.DEAD_LETTER)
    operator_client.post(f"/jobs/{job.id}/retry/")
    html = operator_client.get(f"/jobs/{job.id}/").content.decode()
    assert f'href="/audit/?job={job.id}"' in html
    assert 'href="/audit/?user=olivia"' in html


def test_the_audit_log_under_htmx_is_its_fragment(viewer_client):
    response = viewer_client.get("/audit/", headers={"HX-Request": "true"})
    assert response.content.decode().lstrip().startswith('<section id="audit-log"')


def test_an_unknown_uuid_finds_nothing_and_says_so(viewer_client):
    html = viewer_client.get(f"/audit/?job={uuid.uuid4()}").content.decode()
    assert "No entry matches these filters." in html
    assert not AuditEntry.objects.exists()
