"""The console's workflow pages (dashboard.workflow_views): list, graph, layers, actions."""

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.models import AuditEntry, Job
from jobs.states import JobState
from jobs.workflows import Workflow
from tests import tasks
from tests.test_workflows import run

pytestmark = pytest.mark.django_db


def diamond(name="import-42"):
    wf = Workflow(name)
    top = wf.add(tasks.node, "top", name="fetch")
    left = wf.add(tasks.node, "left", after=[top], name="parse")
    right = wf.add(tasks.node, "right", after=[top], name="load")
    wf.add(tasks.join, "last", after=[left, right], name="report")
    return wf.enqueue()


def fan_in(leaves):
    wf = Workflow("wide")
    nodes = [wf.add(tasks.node, i) for i in range(leaves)]
    wf.add(tasks.join, "last", after=nodes)
    return wf.enqueue()


def page(client, workflow_id):
    return client.get(reverse("dashboard:workflow", args=[workflow_id]))


def test_the_list_shows_each_workflow_with_its_state_and_progress(client, viewer):
    workflow_id = diamond()
    client.force_login(viewer)
    html = client.get(reverse("dashboard:workflows")).content.decode()
    assert "import-42" in html and reverse("dashboard:workflow", args=[workflow_id]) in html
    assert "0 of 4 done" in html and "pending" in html
    nav = re.search(r'<nav class="nav".*?</nav>', html, re.S).group(0)
    assert "Workflows" in nav


def test_a_workflow_page_draws_every_node_linked_to_its_job_with_its_state(client, viewer):
    workflow_id = diamond()
    client.force_login(viewer)
    html = page(client, workflow_id).content.decode()
    svg = re.search(r"<svg.*?</svg>", html, re.S).group(0)
    for job in Job.objects.filter(workflow_id=workflow_id):
        assert reverse("dashboard:job", args=[job.id]) in svg
        assert f">{job.node_name}<" in svg
    assert svg.count('class="wf-edge"') == 4
    assert svg.count(">Scheduled<") == 3 and svg.count(">Pending<") == 1
    # Read-only: no buttons.
    assert "Cancel workflow" not in html


def test_past_50_nodes_the_page_counts_each_layer_linked_to_the_filtered_job_list(client, viewer):
    workflow_id = fan_in(60)
    client.force_login(viewer)
    html = page(client, workflow_id).content.decode()
    assert "<svg" not in html
    rows = re.findall(r'<tr class="layer-row">.*?</tr>', html, re.S)
    assert len(rows) == 2
    link = f"{reverse('dashboard:jobs')}?workflow={workflow_id}&amp;state=pending"
    assert link in rows[0] and ">60<" in rows[0]
    listed = client.get(reverse("dashboard:jobs"), {"workflow": workflow_id, "state": "pending"})
    listed = listed.content.decode()
    last = Job.objects.get(workflow_id=workflow_id, node_name="join")
    leaf = Job.objects.filter(workflow_id=workflow_id, state=JobState.PENDING).first()
    assert str(last.id) not in listed and str(leaf.id) in listed


def test_the_job_list_filters_by_workflow(client, viewer):
    workflow_id = diamond()
    lone = tasks.add.enqueue(1, 2)
    client.force_login(viewer)
    html = client.get(reverse("dashboard:jobs"), {"workflow": workflow_id}).content.decode()
    assert str(lone.id) not in html
    for job in Job.objects.filter(workflow_id=workflow_id):
        assert str(job.id) in html


def test_the_job_page_links_its_workflow(client, viewer):
    workflow_id = diamond()
    job = Job.objects.get(workflow_id=workflow_id, node_name="report")
    client.force_login(viewer)
    html = client.get(reverse("dashboard:job", args=[job.id])).content.decode()
    assert reverse("dashboard:workflow", args=[workflow_id]) in html
    assert "waiting for 2 upstream jobs" in html


def dead_letter(job):
    """Claim the node's job and dead-letter it, as a worker would."""
    run(job.id, JobState.DEAD_LETTER)


def test_a_node_cancelled_by_a_failure_names_the_node_that_failed_on_its_page(client, viewer):
    workflow_id = diamond()
    fetch = Job.objects.get(workflow_id=workflow_id, node_name="fetch")
    dead_letter(fetch)
    parse = Job.objects.get(workflow_id=workflow_id, node_name="parse")
    assert parse.state == JobState.CANCELLED
    assert parse.error_message == "a job it runs after did not succeed"
    client.force_login(viewer)
    html = client.get(reverse("dashboard:job", args=[parse.id])).content.decode()
    after = re.search(r"<dt>Runs after</dt><dd>(.*?)</dd>", html, re.S).group(1)
    assert reverse("dashboard:job", args=[fetch.id]) in after and "fetch · " in after
    assert "Dead letter" in after
    before = re.search(r"<dt>Runs before</dt><dd>(.*?)</dd>", html, re.S).group(1)
    report = Job.objects.get(workflow_id=workflow_id, node_name="report")
    assert reverse("dashboard:job", args=[report.id]) in before
    assert reverse("dashboard:job", args=[fetch.id]) not in before


def test_among_many_upstream_nodes_the_one_that_failed_comes_first(client, viewer):
    workflow_id = fan_in(30)
    leaves = Job.objects.filter(workflow_id=workflow_id).exclude(node_name="join")
    failed = leaves.order_by("-node_name").first()  # the last by name
    dead_letter(failed)
    join = Job.objects.get(workflow_id=workflow_id, node_name="join")
    assert join.state == JobState.CANCELLED
    client.force_login(viewer)
    html = client.get(reverse("dashboard:job", args=[join.id])).content.decode()
    after = re.search(r"<dt>Runs after</dt><dd>(.*?)</dd>", html, re.S).group(1)
    links = re.findall(r'href="([^"]+)"', after)
    assert len(links) == 20
    assert links[0] == reverse("dashboard:job", args=[failed.id])


def test_cancel_workflow_and_retry_failed_nodes_from_the_page(client, operator):
    workflow_id = diamond()
    client.force_login(operator)
    html = page(client, workflow_id).content.decode()
    assert "Cancel workflow" in html and "Retry failed nodes" in html
    answer = client.post(reverse("dashboard:workflow_cancel", args=[workflow_id]), follow=True)
    assert "4 nodes cancelled" in answer.content.decode()
    assert set(Job.objects.filter(workflow_id=workflow_id).values_list("state", flat=True)) == {
        JobState.CANCELLED
    }
    assert AuditEntry.objects.filter(action="cancel workflow", source="dashboard").exists()
    answer = client.post(
        reverse("dashboard:workflow_retry_failed", args=[workflow_id]), follow=True
    )
    assert "4 failed nodes put back in line" in answer.content.decode()


def test_cancel_workflow_without_a_script_asks_on_a_page_first(client, operator):
    workflow_id = diamond()
    client.force_login(operator)
    html = page(client, workflow_id).content.decode()
    assert 'name="confirm" value="ask"' in html and "data-confirm=" in html
    url = reverse("dashboard:workflow_cancel", args=[workflow_id])
    asked = client.post(url, {"confirm": "ask"})
    assert asked.status_code == 200
    html = asked.content.decode()
    assert "Cancel workflow" in html and "Every unfinished node is cancelled" in html
    assert 'name="confirm" value="yes"' in html
    assert not Job.objects.filter(state=JobState.CANCELLED).exists()
    done = client.post(url, {"confirm": "yes"}, follow=True)
    assert "4 nodes cancelled" in done.content.decode()
    missing = reverse("dashboard:workflow_cancel", args=["00000000-0000-0000-0000-000000000000"])
    assert client.post(missing, {"confirm": "ask"}).status_code == 404


def test_a_viewer_cannot_cancel_and_an_unknown_workflow_is_a_404(client, viewer):
    workflow_id = diamond()
    client.force_login(viewer)
    assert client.post(reverse("dashboard:workflow_cancel", args=[workflow_id])).status_code == 403
    assert not Job.objects.filter(state=JobState.CANCELLED).exists()
    missing = page(client, "00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404


def test_under_htmx_the_page_answers_its_fragment(client, viewer):
    workflow_id = diamond()
    client.force_login(viewer)
    answer = client.get(reverse("dashboard:workflow", args=[workflow_id]), HTTP_HX_REQUEST="true")
    html = answer.content.decode()
    assert html.lstrip().startswith('<section id="workflow"') and "<html" not in html


def test_the_page_refreshes_itself_until_the_workflow_has_finished(client, operator):
    workflow_id = diamond()
    client.force_login(operator)
    assert "data-poll" in page(client, workflow_id).content.decode()
    Job.objects.filter(workflow_id=workflow_id).update(
        state=JobState.CANCELLED, finished_at=timezone.now()
    )
    assert "data-poll" not in page(client, workflow_id).content.decode()
