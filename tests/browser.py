"""What the browser tests share: Chromium, the viewports, a logged-in console page that fails
the test on any console error, screenshots of pages on laptop and phone in light and dark.

The fixtures are made available to every test module by tests/conftest.py.
"""

import tempfile
from pathlib import Path

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect, sync_playwright

from tests.test_dashboard_views import PASSWORD

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# When the page scrolls sideways, the elements sticking out of the viewport.
OVERFLOWING = """() => {
  const root = document.documentElement;
  if (root.scrollWidth <= root.clientWidth) return [];
  return [...document.querySelectorAll("body *")]
    .filter((e) => e.getBoundingClientRect().right > root.clientWidth + 1)
    .map((e) => `${e.tagName}.${e.className}`);
}"""
# The console's links that lie (even partly) outside the viewport, or hidden in a scrolling nav.
NAV_OFF_SCREEN = """() => {
  const nav = document.querySelector("nav.nav");
  const width = document.documentElement.clientWidth;
  return [...nav.querySelectorAll("a")]
    .filter((a) => { const box = a.getBoundingClientRect();
                     return box.left < 0 || box.right > width + 1
                            || box.right > nav.getBoundingClientRect().right + 1; })
    .map((a) => a.textContent);
}"""
LAPTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def screenshots():
    folder = Path(tempfile.mkdtemp(prefix="jobsite-console-"))
    print(f"\nconsole screenshots: {folder}")
    return folder


@pytest.fixture
def browser(monkeypatch):
    # Playwright's sync API keeps an event loop on this thread; the ORM calls the tests make
    # between browser steps are still plain synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def open_console(browser, live_server, operator):
    """A logged-in page; it fails the test on any console error (CSP violations show there).

    A test visiting a page it expects to be missing adds its path to `open_.missing_pages`.
    """
    contexts, errors = [], []

    def on_console(message):
        url = message.location.get("url", "")
        expected = any(url.endswith(path) for path in open_.missing_pages)
        if message.type == "error" and not (expected and "status of 404" in message.text):
            errors.append(message.text)

    def open_(*, viewport=LAPTOP, color_scheme="light", javascript=True):
        context = browser.new_context(
            viewport=viewport, color_scheme=color_scheme, java_script_enabled=javascript
        )
        contexts.append(context)
        context.set_default_timeout(15_000)
        page = context.new_page()
        page.on("console", on_console)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{live_server.url}/login/")
        page.get_by_label("Username").fill(operator.username)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Overview")).to_be_visible()
        return page

    open_.missing_pages = set()
    yield open_
    for context in contexts:
        context.close()
    assert errors == []


def settled(page):
    """`page` once its requests are done, the live region's first refresh included: a row
    ticked while a refresh is swapping the list in would be ticked on the row swapped out."""
    page.wait_for_load_state("networkidle")
    return page


def tick(box):
    """Tick a checkbox in a live list. A refresh that swaps the list in mid-click replaces the
    box being clicked, and the click is lost with the old row; tick again, as a person would
    (the locator finds the new row's box)."""
    for attempt in range(3):
        try:
            box.check()
            return
        except PlaywrightError as error:
            if "did not change its state" not in str(error) or attempt == 2:
                raise


def base_of(page):
    """The live server's address, from the page's URL."""
    return "/".join(page.url.split("/")[:3])


def screenshot_pages(open_console, screenshots, pages, *, prepare=None):
    """Each of `pages` ({name: path}) in light and dark, on a laptop and a phone: visible, not
    overflowing sideways (except inside scrolling tables), shot. `prepare(name, page)` runs before
    each check. Returns the (device, scheme, page) of each browser used, last the dark phone."""
    used = []
    for scheme in ("light", "dark"):
        for device, viewport in (("laptop", LAPTOP), ("phone", PHONE)):
            page = open_console(viewport=viewport, color_scheme=scheme)
            for name, path in pages.items():
                page.goto(base_of(page) + path)
                expect(page.locator("main h1").first).to_be_visible()
                if prepare is not None:
                    prepare(name, page)
                assert page.evaluate(OVERFLOWING) == [], f"{name} overflows on {device}"
                # Every link of the navigation is on screen: it wraps, nothing scrolls sideways.
                assert page.evaluate(NAV_OFF_SCREEN) == [], f"{name}'s nav scrolls on {device}"
                page.screenshot(path=screenshots / f"{name}-{device}-{scheme}.png", full_page=True)
            used.append((device, scheme, page))
    return used
