"""What a new operator tripped on, held in a real browser: a steady top bar, nothing sticking
out of its card at phone, laptop and wide widths, the no-worker banner, the confirmation
dialog's wording, keyboard search from any page, an invalid edit answered in place, and the
audit log and API pages. Every test fails on any browser console error (the CSP included)."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobs import queues
from jobs.models import Attempt, Job, WorkerNode
from jobs.states import JobState
from tests.browser import LAPTOP, PHONE, base_of, settled, tick
from tests.factories import dead_letter_of_add
from tests.test_dashboard_views import make_job
from tests.test_schedules import clear_of_pings, with_schedules

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDE = {"width": 1920, "height": 1000}
HEADER_HEIGHT = "() => document.querySelector('header.topbar').getBoundingClientRect().height"
# Every element that sticks out of its card (or filter bar) sideways, a table scrolling
# sideways inside its card included: on screen, that is content cut off at the card's edge.
OUT_OF_CARD = """() => {
  const out = [];
  for (const card of document.querySelectorAll(".card, .filters, .state-card, .stat-card")) {
    const edge = card.getBoundingClientRect();
    for (const e of card.querySelectorAll("*")) {
      const box = e.getBoundingClientRect();
      if (box.width === 0 && box.height === 0) continue;
      if (box.right > edge.right + 1 || box.left < edge.left - 1)
        out.push(`${e.tagName}.${e.className} in ${card.className}`);
    }
    for (const wrap of card.querySelectorAll(".table-wrap"))
      if (wrap.scrollWidth > wrap.clientWidth + 1) out.push(`a table scrolls in ${card.className}`);
  }
  return out;
}"""


def a_console_of_every_kind():
    """Rows of every state and the pages that show them: returns {name: path}."""
    for state in JobState:
        make_job(state, queue_name="emails", task_path="jobsite.tasks.send_welcome_email")
    dead = dead_letter_of_add()
    succeeded = make_job(
        JobState.SUCCEEDED, attempt=2, task_path="jobsite.tasks.send_welcome_email"
    )
    now = timezone.now()
    Attempt.objects.create(
        job=succeeded, number=1, outcome="failed", started_at=now - timedelta(seconds=3),
        finished_at=now - timedelta(seconds=2), error_type="ConnectionError",
        error_message="SMTP server refused the connection",
    )  # fmt: skip
    Attempt.objects.create(
        job=succeeded, number=2, outcome="succeeded", started_at=now - timedelta(seconds=1),
        finished_at=now - timedelta(microseconds=300),
    )  # fmt: skip
    queues.pause("emails", user=None, source="test")
    return {
        "overview": "/",
        "jobs": "/jobs/",
        "dead-letters": "/dead-letters/",
        "queues": "/queues/",
        "workers": "/workers/",
        "tasks": "/tasks/",
        "task": "/tasks/jobsite.tasks.send_welcome_email/",
        "schedules": "/schedules/",
        "job": f"/jobs/{dead.id}/",
        "job-succeeded": f"/jobs/{succeeded.id}/",
        "audit": "/audit/",
        "api": "/api/docs/",
    }


def test_no_element_sticks_out_of_its_card_on_a_phone_a_laptop_or_a_wide_screen(
    open_console, screenshots
):
    pages = a_console_of_every_kind()
    # Light and dark lay out alike; the dark phone is shot for the eye.
    for width, viewport, scheme in (
        ("phone", PHONE, "dark"),
        ("laptop", LAPTOP, "light"),
        ("wide", WIDE, "light"),
    ):
        page = open_console(viewport=viewport, color_scheme=scheme)
        for name, path in pages.items():
            page.goto(base_of(page) + path)
            expect(page.locator("main h1").first).to_be_visible()
            assert page.evaluate(OUT_OF_CARD) == [], f"{name} at {width}"
            page.screenshot(
                path=screenshots / f"polish-{name}-{width}-{scheme}.png", full_page=True
            )


def test_the_top_bar_keeps_its_height_through_every_live_state(open_console):
    dead_letter_of_add()
    dead_letter_of_add()
    for viewport in (LAPTOP, WIDE):
        page = settled(open_console(viewport=viewport))
        page.goto(base_of(page) + "/dead-letters/")
        status = page.locator("[data-live-status]")
        expect(status).to_have_text("Live")
        height = page.evaluate(HEADER_HEIGHT)
        heights = {}

        tick(page.locator('input[name="ids"]').first)
        expect(status).to_have_text("Paused: rows are ticked")
        heights["ticked"] = page.evaluate(HEADER_HEIGHT)
        page.locator('input[name="ids"]').first.uncheck()
        page.locator("main h1").click()

        page.locator("#dead-letters").get_by_role("button", name="Rerun").first.click()
        expect(status).to_have_text("Paused while a dialog is open")
        heights["dialog"] = page.evaluate(HEADER_HEIGHT)
        page.keyboard.press("Escape")
        expect(status).to_have_text("Live")

        page.get_by_role("button", name="Turn live refresh off").click()
        expect(status).to_have_text("Live refresh off")
        heights["off"] = page.evaluate(HEADER_HEIGHT)
        page.get_by_role("button", name="Turn live refresh on").click()
        expect(status).to_have_text("Live")
        assert heights == dict.fromkeys(heights, height), viewport
    # One line on a wide screen: the bar is as tall as its links.
    assert height < 60


def test_the_no_worker_banner_shows_while_due_jobs_wait_and_goes_once_a_worker_is_alive(
    open_console,
):
    page = open_console()
    banner = page.locator(".worker-banner")
    expect(banner).to_be_hidden()  # nothing is due
    make_job(JobState.PENDING)
    make_job(JobState.RETRYING, attempt=1)
    page.goto(base_of(page) + "/queues/")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("No worker is running. 2 jobs are due and waiting.")
    # A worker comes up (its heartbeat row is what tells the console it is alive).
    WorkerNode.objects.create(id="w-banner", hostname="here", pid=1, concurrency=1)
    expect(banner).to_be_hidden(timeout=15_000)
    WorkerNode.objects.filter(id="w-banner").update(stopped_at=timezone.now())
    expect(banner).to_be_visible(timeout=15_000)


def test_confirmations_say_what_they_do_and_slash_searches_jobs_from_a_job_page(open_console):
    job = make_job(JobState.PENDING, run_after=timezone.now() + timedelta(hours=1))
    page = open_console()
    page.goto(f"{base_of(page)}/jobs/{job.id}/")
    page.get_by_role("button", name="Cancel", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_role("button")).to_have_text(["Go back", "Cancel job"])
    page.keyboard.press("Escape")

    page.keyboard.press("/")
    expect(page).to_have_url(re.compile(r"/jobs/#search$"))
    expect(page.get_by_role("searchbox")).to_be_focused()


def test_the_selected_row_keeps_its_queue_chip_and_the_jobs_list_links_tasks(open_console):
    make_job(JobState.SUCCEEDED, task_path="jobsite.tasks.send_welcome_email")
    page = settled(open_console())
    page.goto(base_of(page) + "/jobs/")
    chip = page.locator("tr[data-job-row] .queue").first
    cell = page.locator("tr[data-job-row] td").nth(2)
    page.keyboard.press("j")
    expect(page.locator("tr[data-job-row].is-selected")).to_have_count(1)
    cell_colour = cell.evaluate("e => getComputedStyle(e).backgroundColor")
    chip_colour = chip.evaluate("e => getComputedStyle(e).backgroundColor")
    assert chip_colour != cell_colour
    page.get_by_role("link", name="send_welcome_email jobsite.tasks").click()
    expect(page).to_have_url(re.compile(r"/tasks/jobsite.tasks.send_welcome_email/$"))


def test_rows_are_compact_on_a_wide_screen_until_the_operator_asks_for_comfortable_ones(
    open_console,
):
    for _ in range(3):
        make_job(JobState.SUCCEEDED)
    page = settled(open_console(viewport=WIDE))
    page.goto(base_of(page) + "/jobs/")
    row = page.locator("tr[data-job-row]").first
    compact = row.bounding_box()["height"]
    page.get_by_role("button", name="Comfortable rows").click()
    expect(page.get_by_role("button", name="Compact rows")).to_be_visible()
    assert row.bounding_box()["height"] > compact
    page.reload()  # the choice is remembered
    expect(page.get_by_role("button", name="Compact rows")).to_be_visible()


def test_an_invalid_edit_and_rerun_is_answered_in_place(open_console):
    job = dead_letter_of_add()
    page = open_console()
    page.goto(f"{base_of(page)}/jobs/{job.id}/")
    page.get_by_text("Edit and rerun").click()
    page.get_by_role("textbox", name="args (a JSON list)").fill("[1, 2")
    page.get_by_role("button", name="Rerun with these arguments").click()
    expect(page.locator(".field-error")).to_contain_text("Not valid JSON")
    expect(page).to_have_url(re.compile(rf"/jobs/{job.id}/$"))
    assert not Job.objects.filter(rerun_of=job).exists()


def test_retry_names_its_job_and_the_audit_log_shows_who_did_it(open_console):
    job = dead_letter_of_add()
    page = open_console()
    page.goto(f"{base_of(page)}/dead-letters/")
    page.locator("#dead-letters").get_by_role("button", name="Retry", exact=True).click()
    status = page.get_by_role("status")
    expect(status).to_contain_text(f"job put back in line: add {str(job.id)[:8]}")
    status.get_by_role("link").click()
    expect(page).to_have_url(re.compile(rf"/jobs/{job.id}/$"))
    page.get_by_role("link", name="This job in the audit log").click()
    rows = page.locator("#audit-log tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("olivia")
    expect(rows.first).to_contain_text("job put back in line")
    page.get_by_role("link", name="API", exact=True).click()
    expect(page.get_by_role("heading", name="JSON API")).to_be_visible()
    page.get_by_role("link", name="/jobs/{job_id}/retry").click()
    expect(page.locator("#post-jobs-job_id-retry")).to_be_in_viewport()


def test_the_schedules_count_down_between_refreshes(open_console):
    with with_schedules({"ping": {"task": "tests.tasks.add", "args": [1, 2], "every": 30}}):
        page = settled(open_console())
        # Within a second of a fire time the countdown reads "due now" and, with live refresh
        # off, stays so: load the page clear of one.
        clear_of_pings(margin=4)
        page.goto(base_of(page) + "/schedules/")
        # With live refresh off, only the page's own clock can change the countdown.
        page.get_by_role("button", name="Turn live refresh off").click()
        countdown = page.locator("#schedule-ping [data-countdown] time")
        first = countdown.inner_text()
        assert re.match(r"^(in \d+ s|due now)", first)
        expect(countdown).not_to_have_text(first, timeout=3_000)
        page.get_by_role("button", name="Turn live refresh on").click()
