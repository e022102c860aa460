"""The operator features in a real browser: search, queue pause, discard, edit and rerun, bulk.

Screenshots of the new pages (light and dark, laptop and phone) go to the folder printed by
tests/test_dashboard_browser.py's fixture; run with `-s` to see it.
"""

import re

import pytest
from playwright.sync_api import expect

from jobs import queues
from jobs.models import AuditEntry, Job
from jobs.states import JobState
from tests import tasks
from tests.browser import base_of, screenshot_pages
from tests.factories import dead_letter_of_add
from tests.test_dashboard_views import make_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_operator_finds_a_job_by_an_argument(open_console, screenshots):
    wanted = tasks.add.enqueue(1003, 7)
    other = tasks.add.enqueue(10030, 7)
    page = open_console()
    page.get_by_role("link", name="Jobs", exact=True).click()
    page.get_by_label("Search").fill("1003")
    page.get_by_label("Search").press("Enter")
    expect(page).to_have_url(re.compile(r"q=1003"))
    expect(page.locator(f'#job-list a[href="/jobs/{wanted.id}/"]').first).to_be_visible()
    expect(page.locator(f'#job-list a[href="/jobs/{other.id}/"]')).to_have_count(0)
    page.screenshot(path=screenshots / "jobs-search-by-argument.png", full_page=True)


def test_operator_pauses_a_queue_and_a_worker_skips_it(open_console, start_worker, screenshots):
    make_job(JobState.SUCCEEDED, queue_name="emails")
    page = open_console()
    page.get_by_role("link", name="Queues").click()
    row = page.locator("#queues tr", has_text="emails")
    row.get_by_role("button", name="Pause").click()
    expect(page.get_by_role("status")).to_contain_text("queue emails paused")
    expect(row.get_by_role("button", name="Resume")).to_be_visible()
    page.screenshot(path=screenshots / "queues-paused.png", full_page=True)

    held = tasks.add.using(queue_name="emails").enqueue(1, 1)
    free = tasks.add.enqueue(2, 2)
    start_worker("--concurrency", "1")
    page.goto(f"{page.url.split('/queues/')[0]}/jobs/{free.id}/")
    expect(page.locator("#job .job-state .badge")).to_have_text("Succeeded", timeout=60_000)
    # The worker has claimed and run the other queue's job since; this one still waits.
    assert Job.objects.get(id=held.id).state == JobState.PENDING

    page.goto(f"{page.url.split('/jobs/')[0]}/queues/")
    page.locator("#queues tr", has_text="emails").get_by_role("button", name="Resume").click()
    expect(page.get_by_role("status")).to_contain_text("queue emails resumed")
    page.goto(f"{page.url.split('/queues/')[0]}/jobs/{held.id}/")
    expect(page.locator("#job .job-state .badge")).to_have_text("Succeeded", timeout=60_000)


def test_operator_discards_a_dead_letter_after_confirming(open_console):
    job = dead_letter_of_add()
    page = open_console()
    page.goto(f"{page.url}jobs/{job.id}/")
    form = page.locator(f'form[action="/jobs/{job.id}/discard/"]')
    expect(form).to_have_attribute(
        "data-confirm", "Discard this job and its attempts? This cannot be undone."
    )
    # The question is asked by the console's confirmation (a dialog element, or the browser's
    # own confirm); either way the operator says yes.
    page.on("dialog", lambda dialog: dialog.accept())
    form.get_by_role("button", name="Discard").click()
    dialog = page.locator("dialog[open]")
    page.wait_for_function(
        "() => document.querySelector('dialog[open]') || location.pathname === '/jobs/'"
    )
    if dialog.count():
        expect(dialog).to_contain_text("Discard this job and its attempts?")
        dialog.get_by_role("button", name="Discard job").click()
    expect(page).to_have_url(re.compile(r"/jobs/$"))
    expect(page.get_by_role("status")).to_contain_text("discarded")
    assert not Job.objects.filter(id=job.id).exists()
    assert AuditEntry.objects.filter(action="discard", subject=str(job.id)).exists()


def test_operator_edits_the_arguments_and_reruns(open_console, screenshots):
    job = dead_letter_of_add()
    page = open_console()
    page.goto(f"{page.url}jobs/{job.id}/")
    page.get_by_text("Edit and rerun").click()
    page.locator("#id_args").fill("[2, ")
    page.get_by_role("button", name="Rerun with these arguments").click()
    expect(page.locator("#args-error")).to_contain_text("Not valid JSON")
    assert Job.objects.count() == 1
    page.screenshot(path=screenshots / "job-edit-and-rerun-error.png", full_page=True)

    page.locator("#id_args").fill("[2, 40]")
    page.get_by_role("button", name="Rerun with these arguments").click()
    expect(page.get_by_role("status")).to_contain_text("new run enqueued")
    new = Job.objects.get(rerun_of=job)
    assert new.args == [2, 40]
    expect(page.locator(".audit")).to_contain_text("arguments were")
    page.get_by_role("link", name="open the new run").click()
    expect(page.locator("#job .job-state")).to_contain_text(f"rerun of {str(job.id)[:8]}")


def test_bulk_retry_of_a_filter_shows_the_count_first(open_console, screenshots):
    for _ in range(3):
        make_job(JobState.DEAD_LETTER, queue_name="billing")
    other = make_job(JobState.DEAD_LETTER, queue_name="emails")
    page = open_console()
    page.goto(f"{page.url}dead-letters/?queue=billing")
    page.get_by_role("button", name="Retry all 3 matching…").click()
    expect(page.locator(".confirm-question")).to_have_text("Retry 3 matching jobs?")
    assert Job.objects.filter(state=JobState.PENDING).count() == 0
    page.screenshot(path=screenshots / "bulk-confirm.png", full_page=True)
    page.get_by_role("button", name="Retry", exact=True).click()
    expect(page.locator(".bulk-done")).to_contain_text("Done: 3 of 3 matching jobs changed")
    expect(page.locator(".bulk-progress li")).to_have_count(1)
    page.screenshot(path=screenshots / "bulk-done.png", full_page=True)
    assert Job.objects.filter(queue_name="billing", state=JobState.PENDING).count() == 3
    assert Job.objects.get(id=other.id).state == JobState.DEAD_LETTER


def test_screenshots_of_the_new_pages_in_light_and_dark_on_laptop_and_phone(
    open_console, screenshots
):
    for state in JobState:
        make_job(state, queue_name="emails", task_path="jobsite.tasks.send_welcome_email")
    queues.pause("reports")
    job = dead_letter_of_add()
    pages = {"queues": "/queues/", "search": "/jobs/?q=upstream", "job-edit": f"/jobs/{job.id}/"}

    def open_the_edit_form(name, page):
        if name == "job-edit":
            page.get_by_text("Edit and rerun").click()

    shown = screenshot_pages(open_console, screenshots, pages, prepare=open_the_edit_form)
    for device, scheme, page in shown:
        page.goto(base_of(page) + "/jobs/")
        page.get_by_role("button", name="Discard all…").click()
        expect(page.locator(".confirm-question")).to_be_visible()
        page.screenshot(path=screenshots / f"bulk-confirm-{device}-{scheme}.png")
