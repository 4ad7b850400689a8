"""The status page's layout in a real headless Chromium, at a phone's width and a desktop's.

Same set-up as ``test_status_browser``: hypercorn on loopback, Debian's chromium driven by
Playwright, the page under its own Content-Security-Policy. The balancer has had traffic
(so the figures and the sparklines have something to draw), one open circuit, a flapping
endpoint and long addresses. At 480 and 1,400 px wide the page must log no console error,
make no request that fails, and keep every visible element's box within the viewport's
width (the endpoint table may be wider: it scrolls inside its own box). Screenshots go to
``artifacts/status-480.png`` and ``artifacts/status-1400.png`` at the repository's root,
which CI keeps.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

import poise_py as poise
from poise_py.contrib.status import StatusApp, serve
from tests.contrib.test_status_browser import CHROMIUM, CHROMIUM_ARGS, _require_browser
from tests.support.clocks import TRIP_AT_ONCE, FakeClock

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.anyio

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
"""Where the screenshots go (CI uploads the directory)."""

WIDTHS = (480, 1400)

_OUTSIDE = """
() => {
  const width = document.documentElement.clientWidth;
  const out = [];
  for (const node of document.body.querySelectorAll("*")) {
    const scroller = node.parentElement && node.parentElement.closest(".scroll");
    if (scroller) continue;  // inside a box that scrolls on its own: that box is checked instead
    const box = node.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) continue;  // not shown (a closed legend's content, say)
    if (box.left < -0.5 || box.right > width + 0.5) {
      out.push(node.tagName.toLowerCase() + "." + (node.getAttribute("class") || "") + " " +
        Math.round(box.left) + ".." + Math.round(box.right) + " > " + width);
    }
  }
  return out;
}
"""
"""The page's visible elements whose box reaches past the viewport's width (none is right)."""


@contextmanager
def _browser() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def _page(browser: Browser, url: str, width: int) -> Iterator[tuple[Page, list[str]]]:
    """A page on ``url`` at ``width`` px, and every console error, page error and failed request it sees."""
    problems: list[str] = []
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url} {r.failure}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    try:
        page.goto(url)
        yield page, problems
    finally:
        page.close()


def _look(url: str) -> dict[int, dict[str, Any]]:
    """In a worker thread: the page at each width: what it shows, what lies outside, what went wrong."""
    from playwright.sync_api import expect

    ARTIFACTS.mkdir(exist_ok=True)
    seen: dict[int, dict[str, Any]] = {}
    with _browser() as browser:
        for width in WIDTHS:
            with _page(browser, url, width) as (page, problems):
                expect(page.locator("tr[data-endpoint]")).to_have_count(4)
                expect(page.locator("svg.spark path.rate").first).to_be_attached()
                page.screenshot(path=ARTIFACTS / f"status-{width}.png", full_page=True)
                outside = page.evaluate(_OUTSIDE)
                page.locator(".legend summary").click()  # the legend open: its text must fit too
                expect(page.locator(".legend dl").first).to_be_visible()
                outside += page.evaluate(_OUTSIDE)
                scroll_width = page.evaluate("() => document.documentElement.scrollWidth")
                table_width = page.locator(".scroll table").first.evaluate("t => t.scrollWidth")
                seen[width] = {
                    "outside": outside,
                    "scroll_width": scroll_width,
                    "table_width": table_width,
                    "headline": page.locator("#headline").inner_text(),
                    "figures": page.locator(".figs").first.inner_text(),
                    "address": page.locator('tr[data-endpoint="eu"] td.address').inner_text(),
                    "v6": page.locator('tr[data-endpoint="v6"] td.address').inner_text(),
                    "success": page.locator('tr[data-endpoint="a"] td.success').inner_text(),
                    "inflight": page.locator('tr[data-endpoint="eu"] td.inflight').inner_text(),
                    "header_titles": page.locator("thead th").evaluate_all("ths => ths.map(t => t.title)"),
                    "strip": page.locator('tr[data-endpoint="b"] svg.spark rect.s-open').count(),
                    "flap": page.locator("ul.events li", has_text="EndpointDegradationEnded").inner_text(),
                    "problems": problems,
                }
                if width == WIDTHS[0]:
                    seen[width]["filtered"] = _filter(page)
                    seen[width]["scrolled"] = _scroll_after_a_redraw(page)
    return seen


def _filter(page: Page) -> tuple[int, int, int, int]:
    """Event lines: all, with the text filter on "eu", with the kind CircuitOpened, and with both cleared."""
    from playwright.sync_api import expect

    lines = page.locator("ul.events li")
    every = lines.count()
    page.locator("#filter").fill("eu")
    expect(lines.first).to_contain_text("eu")
    by_text = lines.count()
    page.locator("#filter").fill("")
    page.locator("#kind").select_option("CircuitOpened")
    expect(lines.first).to_contain_text("CircuitOpened")
    by_kind = lines.count()
    page.locator("#kind").select_option("")
    expect(lines).to_have_count(every)
    return every, by_text, by_kind, lines.count()


def _scroll_after_a_redraw(page: Page) -> int:
    """Scroll the table 150 px sideways, wait for the page to redraw it, and read where it is."""
    page.locator(".scroll").first.evaluate("box => { box.scrollLeft = 150; }")
    drawn = page.locator("section[data-balancer]").first.element_handle()
    for _ in range(100):  # the page redraws every poll (0.5 s): the old section leaves the document
        if not drawn.evaluate("node => node.isConnected"):
            break
        time.sleep(0.05)
    else:
        pytest.fail("the page did not redraw within 5 s")
    return int(page.locator(".scroll").first.evaluate("box => box.scrollLeft"))


async def _traffic(lb: poise.LoadBalancer, clock: FakeClock) -> None:
    """A few minutes of calls on the balancer's clock: some slow, some failing, then b's circuit opens."""
    for second in range(120):
        for endpoint, seconds in (("a", 0.004), ("eu", 0.030), ("v6", 0.150)):
            permit = lb.acquire(exclude=[e for e in ("a", "eu", "v6", "b") if e != endpoint])
            async with permit:
                clock.advance(seconds)
                if endpoint == "eu" and second % 7 == 0:
                    permit.fail(poise.Fault.TRANSIENT)
        clock.advance(1.0)
    permit = lb.acquire(exclude=["a", "eu", "v6"])
    async with permit:
        permit.fail(poise.Fault.FATAL)
    clock.advance(3.0)  # the step b opened in has ended: its history shows it (the window is 30 s)


@pytest.mark.real_clock  # a real browser polls
@pytest.mark.backends("trio")
async def test_at_480_and_1400_px_nothing_leaves_the_viewport_and_the_browser_reports_no_error(
    clock: FakeClock,
) -> None:
    _require_browser()
    discovery = poise.StaticDiscovery(
        [
            poise.Endpoint("a", address=("10.0.0.1", 8080), zone="eu-west-1a"),
            poise.Endpoint(
                "eu",
                address="https://svc:hunter2@payments-eu-west-1.internal.example.com:8443/v1/charge?token=abc&x=1",
                zone="eu-west-1b",
                metadata={"max_in_flight": 8},
            ),
            poise.Endpoint("v6", address=("fd00::12", 9000), tier=1),
            poise.Endpoint("b", address=("10.0.0.2", 8080)),
        ]
    )
    lb = poise.LoadBalancer(discovery, circuit=TRIP_AT_ONCE, clock=clock)  # the clock stands still meanwhile
    app = StatusApp(
        {"checkout": lb},
        poll_interval=0.5,
        headline=lambda: [("poise_py", "99.2% ok, p99 41 ms"), ("naive round robin", "91.0% ok, p99 2.1 s")],
    )
    observe = app._observers["checkout"]
    async with lb, anyio.create_task_group() as tg:
        await _traffic(lb, clock)
        for i in range(6):  # eu flaps in and out of degradation: one line, not twelve
            observe(poise.EndpointDegraded(at=clock.now - 30 + i, endpoint_id="eu", cause=None))
            observe(poise.EndpointDegradationEnded(at=clock.now - 29.5 + i, endpoint_id="eu", ejected=False))
        port = await tg.start(serve, app)
        seen = await anyio.to_thread.run_sync(_look, f"http://127.0.0.1:{port}/")
        tg.cancel_scope.cancel()
    for width in WIDTHS:
        shown = seen[width]
        assert shown["problems"] == [], f"at {width} px"
        assert shown["outside"] == [], f"at {width} px"
        assert shown["scroll_width"] <= width
        assert (ARTIFACTS / f"status-{width}.png").stat().st_size > 10_000
        assert "naive round robin" in shown["headline"]
        assert "success, last min" in shown["figures"]
        assert shown["address"] == "https://***@payments-eu-west-1.internal.example.com:8443/v1/charge?token=***&x=1"
        assert shown["v6"] == "[fd00::12]:9000"
        assert shown["success"] == "100.0%"
        assert shown["inflight"] == "0 / 8"
        assert all(len(title) > 20 for title in shown["header_titles"]), "every column has a tooltip"
        assert shown["strip"] >= 1, "b's sparkline shows its circuit open"
        assert "\u00d712" in shown["flap"]
    assert seen[480]["table_width"] > 480  # the table is wider than a phone: it scrolls in its own box
    every, by_text, by_kind, cleared = seen[480]["filtered"]
    assert every > by_text >= 1
    assert by_kind == 1
    assert cleared == every
    assert seen[480]["scrolled"] == 150, "a redraw keeps the table where the reader scrolled it"
