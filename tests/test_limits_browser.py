"""Limits in a real browser: an operator edits a limit on /limits/ and sees it applied; a held
job's page says what holds it."""

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobs.models import LimitOverride
from jobs.states import JobState
from tests.browser import base_of
from tests.factories import make_job
from tests.test_limits import with_limits

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def configured():
    with with_limits({"key:tenant-*": {"concurrency": 2}, "queue:emails": {"rate": [100, 60]}}):
        yield


def test_operator_sees_what_holds_a_job_and_raises_the_limit(open_console, screenshots):
    for _ in range(2):
        make_job(JobState.RUNNING, limit_key="tenant-42")
    held = make_job(limit_key="tenant-42", run_after=timezone.now())
    page = open_console()
    page.goto(f"{base_of(page)}/jobs/{held.id}/")
    expect(page.locator(".held-by")).to_have_text(
        "waiting for key:tenant-* — tenant-42: 2 of 2 running"
    )
    page.screenshot(path=screenshots / "job-held-by-limit.png", full_page=True)

    page.get_by_role("navigation", name="Console").get_by_role("link", name="Limits").click()
    expect(page.get_by_role("link", name="Limits")).to_have_attribute("aria-current", "page")
    row = page.locator('tr[data-limit="key:tenant-*"]')
    # The number fields look like the name field above them, not like bare browser inputs.
    name_style = page.get_by_role("combobox", name="Limit").evaluate(
        "e => [getComputedStyle(e).borderRadius, getComputedStyle(e).paddingLeft]"
    )
    for label in ("Concurrency", "Rate: starts", "per seconds"):
        style = page.get_by_label(label).evaluate(
            "e => [getComputedStyle(e).borderRadius, getComputedStyle(e).paddingLeft]"
        )
        assert style == name_style, (label, style, name_style)
    expect(row.locator(".limit-concurrency")).to_have_text("2 / 2 per key")
    expect(row.locator(".limit-waiting")).to_have_text("1")
    page.get_by_role("combobox", name="Limit").fill("key:tenant-*")
    page.get_by_label("Concurrency").fill("3")
    page.get_by_role("button", name="Save limit").click()
    expect(page.get_by_role("status")).to_contain_text("key:tenant-*: limit set")
    expect(row.locator(".limit-concurrency")).to_have_text("2 / 3 per key")
    expect(row.locator(".limit-waiting")).to_have_text("0")
    expect(row.get_by_text("override", exact=True)).to_be_visible()
    page.screenshot(path=screenshots / "limits-override.png", full_page=True)
    assert LimitOverride.objects.get(name="key:tenant-*").concurrency == 3

    page.goto(f"{base_of(page)}/jobs/{held.id}/")
    expect(page.locator("#job .job-state .badge")).to_have_text("Pending")
    expect(page.locator(".held-by")).to_have_count(0)

    page.goto(f"{base_of(page)}/limits/")
    page.locator('tr[data-limit="key:tenant-*"]').get_by_role(
        "button", name="Clear override"
    ).click()
    expect(page.get_by_role("status")).to_contain_text("override cleared")
    expect(page.locator('tr[data-limit="key:tenant-*"] .limit-concurrency')).to_have_text(
        "2 / 2 per key"
    )
