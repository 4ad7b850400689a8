"""The status page in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

The page is served by hypercorn on loopback next to a running balancer; the browser loads
it, finds every endpoint, and sees a circuit open within a few seconds of the failures
that open it. A screenshot is saved under the test's tmp_path. Never skipped: a missing
chromium is installed when the test can (root with apt-get), and otherwise the test fails
with the command that installs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.from_thread
import pytest

import poise_py as poise
from poise_py.contrib.status import StatusApp, serve
from tests.support.clocks import FakeClock, static_lb

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.anyio

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
OPEN_WITHIN_MS = 5_000
"""How soon after the failures the page must show the circuit open (it polls every 0.5 s)."""


INSTALL_HINT = (
    "the status page's browser test needs Debian's chromium at /usr/bin/chromium: run "
    "`sudo apt-get update && sudo apt-get install -y chromium` (.ci/run does)"
)


def _require_browser() -> None:
    """Chromium and Playwright, installing Debian's chromium first if it is missing and we can."""
    if not Path(CHROMIUM).exists():
        apt = shutil.which("apt-get")
        if apt and hasattr(os, "geteuid") and os.geteuid() == 0:
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            for args in ([apt, "update", "-qq"], [apt, "install", "-y", "-qq", "chromium"]):
                done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)  # noqa: S603
                if done.returncode != 0:
                    pytest.fail(f"{' '.join(args)} failed ({done.stderr.strip()[-500:]}); {INSTALL_HINT}")
        if not Path(CHROMIUM).exists():
            pytest.fail(INSTALL_HINT)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.fail("the playwright package is missing: pip install playwright (the dev extra has it)")


@contextmanager
def watched_page(url: str, *, width: int, height: int) -> Iterator[tuple[Page, list[str]]]:
    """In a worker thread: Chromium on ``url``, and the console's Content-Security-Policy refusals and page errors.

    The waits use locators, never a JavaScript string: the page's policy refuses ``eval``.
    """
    from playwright.sync_api import ConsoleMessage, sync_playwright

    refused: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            refused.append(message.text)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.on("console", on_console)
            page.on("pageerror", lambda error: refused.append(str(error)))
            page.goto(url)
            yield page, refused
        finally:
            browser.close()


def _state_of(endpoint: str) -> str:
    return f'tr[data-endpoint="{endpoint}"] td.state'


def _drive(url: str, trip: Callable[[], None], screenshot: Path) -> tuple[list[str], str, str, str, list[str]]:
    """In a worker thread: load the page, check it, trip ``b`` through ``trip``, wait for it to show."""
    from playwright.sync_api import expect

    with watched_page(url, width=1400, height=640) as (page, refused):
        expect(page.locator("tr[data-endpoint]")).to_have_count(3)
        listed = page.locator("tr[data-endpoint] td.id").all_text_contents()
        before = page.locator(_state_of("b")).inner_text()
        trip()
        expect(page.locator(_state_of("b"))).to_have_text("open", timeout=OPEN_WITHIN_MS)
        expect(page.locator("ul.events li", has_text="CircuitOpened").first).to_be_visible(timeout=OPEN_WITHIN_MS)
        # the page's own style applies under its policy: an open circuit is drawn red
        colour = page.locator(f"{_state_of('b')} span").evaluate("node => getComputedStyle(node).backgroundColor")
        page.screenshot(path=screenshot, full_page=True)
        events = page.locator("section[data-balancer='checkout'] ul.events").inner_text()
    return listed, before, events, colour, refused


@pytest.mark.real_clock  # a real browser polls
async def test_chromium_lists_every_endpoint_and_shows_a_circuit_open_soon_after_its_failures(
    tmp_path: Path, clock: FakeClock
) -> None:
    _require_browser()
    policy = poise.CircuitPolicy(consecutive_failures=3, minimum_volume=3)
    # The balancer's clock stands still, so the circuit stays open however long the browser takes.
    # "<i>c</i>" is an id, not markup: the page must show it as text.
    lb = static_lb("a", "b", "<i>c</i>", circuit=policy, clock=clock)
    app = StatusApp({"checkout": lb}, poll_interval=0.5)
    screenshot = tmp_path / "status.png"

    async def fail_b_three_times() -> None:
        for _ in range(3):
            permit = lb.acquire(exclude=["a", "<i>c</i>"])
            async with permit:
                permit.fail(poise.Fault.SUSPECT)

    def trip() -> None:
        anyio.from_thread.run(fail_b_three_times)

    async with lb, anyio.create_task_group() as tg:
        port = await tg.start(serve, app)
        listed, before, events, colour, refused = await anyio.to_thread.run_sync(
            _drive, f"http://127.0.0.1:{port}/", trip, screenshot
        )
        tg.cancel_scope.cancel()
    assert listed == ["a", "b", "<i>c</i>"]
    assert before == "closed"
    assert colour == "rgb(251, 213, 213)"
    assert refused == [], "the page's Content-Security-Policy must allow its own script and style"
    assert lb.snapshot()["b"].state is poise.CircuitState.OPEN
    assert "CircuitOpened b" in events
    assert screenshot.stat().st_size > 10_000
    print(f"screenshot: {screenshot}")


def _width_at(url: str, width: int) -> tuple[int, int, list[str]]:
    """In a worker thread: the page's scroll width and the table's own width at a ``width``-pixel viewport."""
    from playwright.sync_api import expect

    with watched_page(url, width=width, height=640) as (page, refused):
        expect(page.locator("tr[data-endpoint]")).to_have_count(3)
        page_width = page.locator("body").evaluate("body => document.documentElement.scrollWidth")
        table_width = page.locator("table").first.evaluate("table => table.scrollWidth")
    return int(page_width), int(table_width), refused


@pytest.mark.real_clock  # a real browser polls
async def test_on_a_phone_width_screen_the_table_scrolls_inside_the_page(clock: FakeClock) -> None:
    _require_browser()
    lb = static_lb("a", "b", "c", clock=clock)
    app = StatusApp({"checkout": lb}, poll_interval=0.5)
    async with lb, anyio.create_task_group() as tg:
        port = await tg.start(serve, app)
        page_width, table_width, refused = await anyio.to_thread.run_sync(_width_at, f"http://127.0.0.1:{port}/", 480)
        tg.cancel_scope.cancel()
    assert table_width > 480  # the table is wider than the screen...
    assert page_width <= 480  # ...and scrolls in its own box: the page does not
    assert refused == []
