"""The console in a real browser: Playwright driving Debian's Chromium against the live server.

Screenshots of the main pages (light and dark, laptop and phone) go to a temporary folder whose
path is printed; run with `-s` to see it.
"""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobs.models import Job, Schedule
from jobs.states import JobState
from tests.browser import screenshot_pages, settled, tick
from tests.factories import dead_letter_of_add
from tests.test_dashboard_views import make_job
from tests.test_schedules import with_schedules

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_operator_retries_a_dead_letter_and_watches_it_leave_the_list_and_succeed(
    open_console, start_worker, screenshots
):
    job = dead_letter_of_add()
    page = open_console()
    page.get_by_role("link", name="Dead letters").click()
    row_link = page.locator(f'#dead-letters tr[data-job-id="{job.id}"] a[href="/jobs/{job.id}/"]')
    expect(row_link).to_have_count(1)
    page.screenshot(path=screenshots / "dead-letters-before-retry.png", full_page=True)

    page.get_by_role("button", name="Retry", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("job put back in line")
    expect(row_link).to_have_count(0)
    assert page.url.endswith("/dead-letters/")  # htmx swapped the fragment, no navigation

    start_worker("--concurrency", "1")
    page.goto(f"{page.url.rsplit('/', 2)[0]}/jobs/{job.id}/")
    # The job page refreshes itself until the job is finished.
    expect(page.locator("#job .job-state .badge")).to_have_text("Succeeded", timeout=60_000)
    expect(page.locator("#job")).not_to_have_attribute("hx-trigger", "every 2s, wake")
    expect(page.get_by_text("Attempt 4")).to_be_visible()
    page.screenshot(path=screenshots / "job-succeeded-after-retry.png", full_page=True)


def test_operator_reruns_a_job_and_follows_the_link_to_the_new_run(open_console, screenshots):
    job = dead_letter_of_add()
    page = open_console()
    page.goto(f"{page.url}jobs/{job.id}/")
    page.get_by_role("button", name="Rerun", exact=True).click()
    page.get_by_role("dialog").get_by_role("button", name="Rerun job", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("new run enqueued")
    page.get_by_role("link", name="open the new run").click()
    new = Job.objects.get(rerun_of=job)
    expect(page).to_have_url(f"{page.url.split('/jobs/')[0]}/jobs/{new.id}/")
    expect(page.locator("#job .job-state")).to_contain_text(f"rerun of {str(job.id)[:8]}")
    expect(page.locator("#job .job-state .badge")).to_have_text("Pending")
    page.screenshot(path=screenshots / "job-rerun.png", full_page=True)


def test_double_clicking_retry_has_one_effect(open_console):
    job = dead_letter_of_add()
    page = open_console()
    page.goto(f"{page.url}jobs/{job.id}/")
    page.get_by_role("button", name="Retry", exact=True).dblclick()
    expect(page.get_by_role("status")).to_contain_text("job put back in line")
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert job.max_attempts == 4
    assert job.audit_entries.filter(outcome="job put back in line").count() == 1


def test_retry_works_without_javascript(open_console):
    job = dead_letter_of_add()
    page = open_console(javascript=False)
    page.goto(f"{page.url}dead-letters/")
    page.get_by_role("button", name="Retry", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("job put back in line")
    expect(page.locator(f'tr[data-job-id="{job.id}"]')).to_have_count(0)
    job.refresh_from_db()
    assert job.state == JobState.PENDING


def test_bulk_retry_of_ticked_rows_asks_first_then_retries_them(open_console):
    jobs = [dead_letter_of_add() for _ in range(3)]
    page = open_console()
    page.goto(f"{page.url}dead-letters/")
    tick(settled(page).get_by_label("Tick every row on this page"))
    page.get_by_role("button", name="Retry ticked rows…").click()
    expect(page.get_by_text("Retry 3 dead letters?")).to_be_visible()
    assert Job.objects.filter(state=JobState.PENDING).count() == 0
    page.get_by_role("button", name="Retry", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("3 jobs put back in line")
    assert Job.objects.filter(id__in=[j.id for j in jobs], state=JobState.PENDING).count() == 3


def test_job_list_refreshes_itself_and_filters_are_in_the_url(open_console):
    make_job(JobState.SUCCEEDED, queue_name="emails")
    page = open_console()
    page.get_by_role("link", name="Jobs", exact=True).click()
    page.get_by_label("State").select_option("pending")
    expect(page).to_have_url(re.compile(r"/jobs/\?state=pending"))
    later = make_job(JobState.PENDING, task_path="tests.tasks.record")
    expect(page.locator(f'#job-list a[href="/jobs/{later.id}/"]').first).to_be_visible(
        timeout=15_000
    )
    expect(page.locator("#job-list .badge-succeeded")).to_have_count(0)


def test_screenshots_of_the_main_pages_in_light_and_dark_on_laptop_and_phone(
    open_console, screenshots, operator
):
    for state in JobState:
        make_job(state, queue_name="emails", task_path="jobsite.tasks.send_welcome_email")
    job = dead_letter_of_add()
    pages = {
        "overview": "/",
        "jobs": "/jobs/",
        "dead-letters": "/dead-letters/",
        "job": f"/jobs/{job.id}/",
        "workers": "/workers/",
        "schedules": "/schedules/",
    }
    for state in (JobState.SUCCEEDED, JobState.DEAD_LETTER):
        make_job(state, task_path="tests.tasks.add", schedule="ping", scheduled_at=timezone.now())
    with with_schedules(
        {
            "ping": {"task": "tests.tasks.add", "args": [1, 2], "every": 30},
            "nightly-report": {
                "task": "tests.tasks.add",
                "cron": "0 3 * * *",
                "timezone": "Europe/Paris",
            },
        }
    ):
        screenshot_pages(open_console, screenshots, pages)
    assert len(list(screenshots.glob("*-laptop-light.png"))) == len(pages)


def test_operator_pauses_and_runs_a_schedule_now_in_the_browser(open_console):
    with with_schedules({"ping": {"task": "tests.tasks.add", "args": [1, 2], "every": 30}}):
        pause_and_run_now(open_console())


def pause_and_run_now(page):
    page.get_by_role("link", name="Schedules", exact=True).click()
    row = page.locator("#schedule-ping")
    expect(row).to_contain_text("Every 30 seconds")
    row.get_by_role("button", name="Pause").click()
    expect(page.get_by_role("status")).to_contain_text("ping: schedule paused")
    expect(page.locator("#schedule-ping").get_by_role("button", name="Resume")).to_be_visible()
    page.locator("#schedule-ping").get_by_role("button", name="Run now").click()
    expect(page.get_by_role("status")).to_contain_text("ping: run enqueued")
    job = Job.objects.get(schedule="ping")
    expect(page.locator(f'#schedule-ping a[href="/jobs/{job.id}/"]')).to_be_visible()
    assert Schedule.objects.get(name="ping").paused
