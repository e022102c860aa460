"""An operator watches a running job's progress bar move and its lines come in, in Chromium,
with the real worker running the job; the page stops refreshing once the job has ended."""

import pytest
from playwright.sync_api import expect

from tests import tasks
from tests.browser import base_of

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_job_page_shows_the_bar_moving_and_the_lines_while_the_job_runs(
    open_console, start_worker, screenshots, tmp_path
):
    job = tasks.reports_steps.enqueue(str(tmp_path), 4)
    page = open_console()
    start_worker("--concurrency", "1")
    page.goto(f"{base_of(page)}/jobs/{job.id}/")
    bar = page.locator("#job .progress-card progress")
    text = page.locator("#job .progress-text")
    lines = page.locator("#job .timeline-running .log-line .log-message")

    for step in range(4):
        expect(bar).to_have_attribute("value", str(step), timeout=30_000)
        expect(bar).to_have_attribute("max", "4")
        expect(text).to_contain_text(f"{step} of 4 · step {step}")
        expect(lines.last).to_have_text(f"at step {step}")
        if step == 1:
            page.screenshot(path=screenshots / "job-progress-running.png", full_page=True)
        (tmp_path / f"go-{step}").touch()

    expect(page.locator("#job .job-state .badge")).to_have_text("Succeeded", timeout=30_000)
    expect(bar).to_have_attribute("value", "4")
    expect(text).to_contain_text("4 of 4 · done")
    expect(page.locator("#job")).not_to_have_attribute("hx-trigger", "every 2s, wake")
    # The finished attempt keeps its lines, folded beside its outcome.
    page.locator("#job .timeline-item summary", has_text="Log · 4 lines").click()
    expect(page.locator("#job .timeline-item .log-message")).to_have_count(4)
    page.screenshot(path=screenshots / "job-progress-done.png", full_page=True)
