"""The workflow pages in a real browser: the graph, the per-layer counts, Cancel workflow.

Screenshots (light and dark, laptop and phone) go to the folder the fixture prints (`-s`).
"""

import re

import pytest
from playwright.sync_api import expect

from jobs.models import Job
from jobs.states import JobState
from jobs.workflows import Workflow
from tests import tasks
from tests.browser import base_of, screenshot_pages

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def pipeline(chunks):
    """fetch -> `chunks` parse nodes -> merge -> report: chunks + 3 nodes."""
    wf = Workflow(f"import of {chunks} chunks")
    fetch = wf.add(tasks.node, "fetch", name="fetch")
    parsed = [wf.add(tasks.node, i, after=[fetch], name=f"parse-{i}") for i in range(chunks)]
    merge = wf.add(tasks.join, "merge", after=parsed, name="merge")
    wf.add(tasks.node, "report", after=[merge], name="report")
    return wf.enqueue()


def test_operator_opens_a_workflow_sees_its_graph_and_cancels_it(open_console, screenshots):
    workflow_id = pipeline(3)
    page = open_console()
    page.get_by_role("link", name="Workflows").click()
    page.get_by_role("link", name="import of 3 chunks").click()
    graph = page.locator(".workflow-graph svg")
    expect(graph.locator("a.wf-node")).to_have_count(6)
    expect(graph.locator(".wf-node-pending")).to_have_count(1)
    page.screenshot(path=screenshots / "workflow-graph.png", full_page=True)
    # It asks first; going back changes nothing.
    page.get_by_role("button", name="Cancel workflow").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Cancel this workflow? Every unfinished node is cancelled")
    dialog.get_by_role("button", name="Go back").click()
    expect(dialog).to_be_hidden()
    assert not Job.objects.filter(workflow_id=workflow_id, state=JobState.CANCELLED).exists()
    page.get_by_role("button", name="Cancel workflow").click()
    dialog.get_by_role("button", name="Cancel workflow").click()
    expect(page.get_by_role("status")).to_contain_text("6 nodes cancelled")
    expect(graph.locator(".wf-node-cancelled")).to_have_count(6)
    assert set(Job.objects.filter(workflow_id=workflow_id).values_list("state", flat=True)) == {
        JobState.CANCELLED
    }
    # A node links to its job, whose page links back.
    graph.locator("a.wf-node", has_text="merge").click()
    expect(page).to_have_url(re.compile(r"/jobs/[0-9a-f-]+/$"))
    page.locator("a.workflow-link").click()
    expect(page.locator("main h1")).to_have_text("import of 3 chunks")


def test_the_workflow_pages_fit_every_screen_at_50_nodes_and_past_them(open_console, screenshots):
    drawn, counted = pipeline(47), pipeline(60)
    pages = {
        "workflows": "/workflows/",
        "workflow-50-nodes": f"/workflows/{drawn}/",
        "workflow-63-nodes": f"/workflows/{counted}/",
    }
    used = screenshot_pages(open_console, screenshots, pages)
    page = used[0][2]
    page.goto(base_of(page) + pages["workflow-63-nodes"])
    expect(page.locator("tr.layer-row")).to_have_count(4)
    page.locator("tr.layer-row").nth(1).get_by_role("link").first.click()
    expect(page).to_have_url(re.compile(rf"workflow={counted}.*state=scheduled"))
    expect(page.locator("#job-list tbody tr")).to_have_count(50)
