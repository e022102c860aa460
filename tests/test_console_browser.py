"""Confirmations, keyboard triage, live-refresh control, error pages and the per-task pages in a
real browser (Playwright driving Debian's Chromium against the live server).

Screenshots go to a temporary folder whose path is printed; run with `-s` to see it.
"""

import re
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobs.models import Attempt, Job
from jobs.states import JobState
from tests.browser import PHONE, base_of, screenshot_pages, settled, tick
from tests.factories import dead_letter_of_add
from tests.test_dashboard_views import make_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Whether the page's live region sends a refresh within `wait` ms: its own poll, or a wake
# asked for here. The wake is asked again every 250 ms until one is seen: htmx queues a trigger
# behind a refresh in flight and drops it when that refresh swaps the region away, and a loaded
# machine can take longer than any fixed window to answer.
REFRESH_SENT = """(wait) => new Promise((resolve) => {
  let again = null;
  const finish = (sent) => {
    clearInterval(again);
    document.removeEventListener("htmx:beforeSend", seen);
    resolve(sent);
  };
  const seen = (event) => { if (event.target.matches("[data-poll]")) finish(true); };
  const wake = () => window.htmx.trigger(document.querySelector("[data-poll]"), "wake");
  document.addEventListener("htmx:beforeSend", seen);
  again = setInterval(wake, 250);
  wake();
  setTimeout(() => finish(false), wait);
})"""


def refresh_sent(page) -> bool:
    """True once the region sends a refresh (up to 5 s)."""
    return page.evaluate(REFRESH_SENT, 5000)


def refresh_held(page) -> bool:
    """True when the region sends none for 600 ms, wakes asked for included."""
    return not page.evaluate(REFRESH_SENT, 600)


SETTLED = """() => !document.querySelector(
  ".htmx-request, .htmx-swapping, .htmx-settling, .htmx-added")"""


# Confirmations.


def test_rerun_asks_in_a_dialog_escape_keeps_things_as_they_are_and_confirm_reruns(open_console):
    job = dead_letter_of_add()
    page = open_console()
    page.goto(f"{base_of(page)}/jobs/{job.id}/")

    page.get_by_role("button", name="Rerun", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Rerun this job? A new run with the same arguments")
    expect(dialog.get_by_role("button", name="Rerun job", exact=True)).to_be_focused()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()

    page.get_by_role("button", name="Rerun", exact=True).click()
    dialog.get_by_role("button", name="Go back").click()
    expect(dialog).to_be_hidden()
    assert not Job.objects.filter(rerun_of=job).exists()

    page.get_by_role("button", name="Rerun", exact=True).click()
    dialog.get_by_role("button", name="Rerun job", exact=True).click()
    expect(page.locator("#job .messages")).to_contain_text("new run enqueued")
    assert Job.objects.filter(rerun_of=job).count() == 1


def test_rerun_from_the_dead_letter_list_asks_in_a_dialog_and_reruns_that_row_only(open_console):
    first, second = dead_letter_of_add(), dead_letter_of_add()
    page = open_console()
    dialog = page.get_by_role("dialog")

    for job in (first, second):
        # Afresh each time, so that the message awaited below is this rerun's.
        page.goto(f"{base_of(page)}/dead-letters/")
        row = page.locator(f'tr[data-job-id="{job.id}"]')
        row.get_by_role("button", name="Rerun", exact=True).click()
        expect(dialog).to_contain_text("Rerun this job? A new run with the same arguments")
        dialog.get_by_role("button", name="Rerun job", exact=True).click()
        expect(page.get_by_role("status")).to_contain_text("new run enqueued")

    assert Job.objects.filter(rerun_of=first).count() == 1
    assert Job.objects.filter(rerun_of=second).count() == 1


def test_rerun_from_the_dead_letter_list_without_javascript_asks_on_a_page(open_console):
    job = dead_letter_of_add()
    page = open_console(javascript=False)
    page.goto(f"{base_of(page)}/dead-letters/")
    page.get_by_role("button", name="Rerun", exact=True).click()
    expect(page.get_by_role("heading", name="Rerun add")).to_be_visible()
    assert not Job.objects.filter(rerun_of=job).exists()
    page.get_by_role("button", name="Rerun job", exact=True).click()
    expect(page).to_have_url(re.compile(r"/dead-letters/$"))
    expect(page.get_by_role("status")).to_contain_text("new run enqueued")
    assert Job.objects.filter(rerun_of=job).count() == 1


def test_cancel_without_javascript_goes_through_the_confirmation_page(open_console):
    job = make_job(JobState.PENDING, run_after=timezone.now() + timedelta(hours=1))
    page = open_console(javascript=False)
    page.goto(f"{base_of(page)}/jobs/{job.id}/")
    page.get_by_role("button", name="Cancel", exact=True).click()
    expect(page.get_by_role("heading", name="Cancel add")).to_be_visible()
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    page.get_by_role("button", name="Cancel job", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("job cancelled")
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


def test_run_now_brings_a_scheduled_job_forward(open_console):
    job = make_job(JobState.PENDING, run_after=timezone.now() + timedelta(hours=1))
    page = open_console()
    page.goto(f"{base_of(page)}/jobs/")
    expect(page.get_by_role("columnheader", name="Runs at")).to_be_visible()
    page.goto(f"{base_of(page)}/jobs/{job.id}/")
    expect(page.locator(".runs-at")).to_contain_text("in 59 min")
    page.get_by_role("button", name="Run now").click()
    expect(page.locator("#job .messages")).to_contain_text("job due now")
    expect(page.get_by_role("button", name="Run now")).to_have_count(0)
    job.refresh_from_db()
    assert job.run_after <= timezone.now()


# Keyboard triage.


def test_keyboard_moves_through_rows_retries_searches_and_lists_the_shortcuts(open_console):
    for _ in range(3):
        dead_letter_of_add()
    page = open_console()
    page.goto(f"{base_of(page)}/dead-letters/")
    rows = page.locator("tr[data-job-row]")
    expect(rows).to_have_count(3)

    page.keyboard.press("j")
    expect(rows.nth(0)).to_have_class("is-selected")
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("k")
    expect(rows.nth(1)).to_have_class("is-selected")
    expect(page.locator("tr.is-selected")).to_have_count(1)
    selected = rows.nth(1).get_attribute("data-job-id")

    page.keyboard.press("r")
    expect(page.get_by_role("status")).to_contain_text("job put back in line")
    assert Job.objects.get(id=selected).state == JobState.PENDING
    assert Job.objects.filter(state=JobState.DEAD_LETTER).count() == 2

    page.keyboard.press("/")
    search = page.get_by_role("searchbox", name="Search")
    expect(search).to_be_focused()
    search.type("jk")  # typing in a field is not a shortcut
    expect(page.locator("tr.is-selected")).to_have_count(0)
    page.keyboard.press("Escape")
    search.blur()

    page.keyboard.press("?")
    help_dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(help_dialog).to_be_visible()
    expect(help_dialog).to_contain_text("Retry the selected job")
    page.keyboard.press("Escape")
    expect(help_dialog).to_be_hidden()


def test_enter_opens_the_selected_job(open_console):
    job = make_job(JobState.SUCCEEDED)
    page = open_console()
    page.goto(f"{base_of(page)}/jobs/")
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="add")).to_be_visible()
    assert page.url.endswith(f"/jobs/{job.id}/")


def test_r_on_a_job_page_retries_that_job(open_console):
    job = dead_letter_of_add()
    page = open_console()
    page.goto(f"{base_of(page)}/jobs/{job.id}/")
    page.keyboard.press("r")
    expect(page.locator("#job .messages")).to_contain_text("job put back in line")
    job.refresh_from_db()
    assert job.state == JobState.PENDING


# Live refresh.


def test_live_refresh_says_when_it_pauses_and_can_be_turned_off_and_on(open_console):
    job = make_job(JobState.RETRYING, attempt=1, run_after=timezone.now() + timedelta(hours=1))
    now = timezone.now()
    Attempt.objects.create(
        job=job, number=1, outcome="failed", started_at=now, finished_at=now,
        error_type="ValueError", error_message="boom", error_traceback="Traceback ...",
    )  # fmt: skip
    page = open_console()
    page.goto(f"{base_of(page)}/jobs/{job.id}/")
    status = page.locator("[data-live-status]")
    toggle = page.get_by_role("button", name="Turn live refresh off")
    expect(status).to_have_text("Live")
    assert refresh_sent(page)

    page.get_by_text("Traceback", exact=True).click()
    expect(status).to_have_text("Paused: a traceback is open")
    assert refresh_held(page)
    page.get_by_text("Traceback", exact=True).click()
    expect(status).to_have_text("Live")

    # A confirmation open over the page: the form it answers for is not swapped away.
    page.get_by_role("button", name="Cancel", exact=True).click()
    expect(status).to_have_text("Paused while a dialog is open")
    assert refresh_held(page)
    page.keyboard.press("Escape")
    expect(status).to_have_text("Live")

    toggle.click()
    expect(status).to_have_text("Live refresh off")
    assert refresh_held(page)
    page.reload()  # remembered
    expect(page.locator("[data-live-status]")).to_have_text("Live refresh off")
    assert refresh_held(page)
    # Turned back on, the region refreshes at once.
    with page.expect_response(lambda r: r.url.endswith(f"/jobs/{job.id}/")):
        page.get_by_role("button", name="Turn live refresh on").click()
    expect(page.locator("[data-live-status]")).to_have_text("Live")
    # The refreshed region is live once htmx has settled it (a fresh element polls too).
    page.wait_for_function(SETTLED)
    assert refresh_sent(page)


def held_refresh(page, region, path):
    """Wakes the live `region` and holds its refresh of `path` (the page's own loads pass);
    returns the held requests, for let_land."""
    held = []

    def hold_refreshes(route):
        if route.request.headers.get("hx-request"):
            held.append(route)
        else:
            route.continue_()

    page.route(lambda url: url.endswith(path), hold_refreshes)
    page.evaluate(f"htmx.trigger('{region}', 'wake')")
    for _ in range(50):
        if held:
            break
        page.wait_for_timeout(100)
    assert held, "the refresh never left"
    return held


def let_land(page, held):
    """Lets the first held refresh through and waits until it has landed."""
    page.evaluate(
        "document.body.addEventListener('htmx:afterRequest', () => { window.landed = true; })"
    )
    held.pop(0).continue_()
    for _ in range(50):
        if page.evaluate("window.landed === true"):
            break
        page.wait_for_timeout(100)
    assert page.evaluate("window.landed === true"), "the held refresh never landed"


def press_and_release(page, locator, *, between):
    """A click as a hand makes it: pressed, held while `between()` runs, then released."""
    box = locator.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.wait_for_timeout(150)
    between()
    page.mouse.up()


def test_a_click_held_for_a_moment_turns_live_refresh_off_and_on(open_console):
    job = make_job(JobState.RETRYING, attempt=1, run_after=timezone.now() + timedelta(hours=1))
    page = open_console()
    page.goto(f"{base_of(page)}/jobs/{job.id}/")
    status = page.locator("[data-live-status]")
    expect(status).to_have_text("Live")
    toggle = page.locator("[data-live-toggle]")
    # The press moves focus to the toggle, and the status is shown again on every refresh.
    press_and_release(page, toggle, between=lambda: refresh_sent(page))
    expect(status).to_have_text("Live refresh off")
    press_and_release(page, toggle, between=lambda: refresh_held(page))
    expect(status).to_have_text("Live")


def test_a_refresh_landing_while_a_button_is_pressed_keeps_its_click(open_console):
    job = make_job(JobState.RETRYING, attempt=1, run_after=timezone.now() + timedelta(hours=1))
    page = open_console()
    page.goto(f"{base_of(page)}/jobs/{job.id}/")
    settled(page)
    held = held_refresh(page, "#job", f"/jobs/{job.id}/")
    cancel = page.get_by_role("button", name="Cancel", exact=True)
    press_and_release(page, cancel, between=lambda: let_land(page, held))
    expect(page.get_by_role("dialog")).to_be_visible()
    for route in held:
        route.continue_()


def test_ticking_a_row_pauses_the_dead_letter_list_and_says_so(open_console):
    dead_letter_of_add()
    page = open_console()
    page.goto(f"{base_of(page)}/dead-letters/")
    tick(settled(page).locator('input[name="ids"]').first)
    expect(page.locator("[data-live-status]")).to_have_text("Paused: rows are ticked")


def test_a_refresh_landing_after_a_row_was_ticked_keeps_the_tick(open_console):
    dead_letter_of_add()
    page = open_console()
    page.goto(f"{base_of(page)}/dead-letters/")
    held = held_refresh(page, "#dead-letters", "/dead-letters/")
    box = page.locator('input[name="ids"]').first
    tick(box)
    let_land(page, held)
    expect(box).to_be_checked()
    expect(page.locator("[data-live-status]")).to_have_text("Paused: rows are ticked")
    for route in held:
        route.continue_()


# Errors.


def test_an_unknown_job_shows_a_404_inside_the_console(open_console):
    missing = f"/jobs/{uuid.uuid4()}/"
    open_console.missing_pages.add(missing)
    page = open_console()
    response = page.goto(f"{base_of(page)}{missing}")
    assert response.status == 404
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    expect(page.get_by_role("navigation", name="Console")).to_be_visible()
    page.get_by_role("link", name="Back to the overview").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


# Screenshots.


def test_screenshots_of_overview_jobs_job_and_task_pages(open_console, screenshots):
    for state in JobState:
        make_job(state, queue_name="emails", task_path="jobsite.tasks.send_welcome_email")
    waiting = make_job(JobState.PENDING, run_after=timezone.now() + timedelta(hours=1))
    job = make_job(JobState.SUCCEEDED, attempt=2, task_path="jobsite.tasks.send_welcome_email")
    now = timezone.now()
    Attempt.objects.create(
        job=job, number=1, outcome="failed", started_at=now - timedelta(seconds=3),
        finished_at=now - timedelta(seconds=2), error_type="ConnectionError",
        error_message="SMTP server refused the connection",
    )  # fmt: skip
    Attempt.objects.create(
        job=job, number=2, outcome="succeeded", started_at=now - timedelta(seconds=1),
        finished_at=now,
    )  # fmt: skip
    pages = {
        "overview": "/",
        "jobs": "/jobs/",
        "job-after-retry": f"/jobs/{job.id}/",
        "job-waiting": f"/jobs/{waiting.id}/",
        "tasks": "/tasks/",
        "task": "/tasks/jobsite.tasks.send_welcome_email/",
        "not-found": f"/jobs/{uuid.uuid4()}/",
    }
    open_console.missing_pages.add(pages["not-found"])
    for device, _, page in screenshot_pages(open_console, screenshots, pages):
        if device == "phone":
            page.goto(base_of(page) + "/")
            # The queue figures stay on screen: none is cut off or scrolled out sideways.
            queue = page.locator("#overview table tbody tr").first
            for label in ("Dead letters", "Oldest due"):
                cell = queue.locator(f'td[data-label="{label}"]')
                expect(cell).to_be_visible()
                box = cell.bounding_box()
                assert box["width"] > 0 and box["x"] + box["width"] <= PHONE["width"], label
    page.goto(base_of(page) + f"/jobs/{job.id}/")
    page.get_by_role("button", name="Rerun", exact=True).click()
    page.screenshot(path=screenshots / "confirm-dialog-phone-dark.png")
    page.keyboard.press("Escape")
    page.keyboard.press("?")
    page.screenshot(path=screenshots / "shortcuts-phone-dark.png")
