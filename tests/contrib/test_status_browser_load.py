"""The status page's load-control columns in a real headless Chromium (weight, slow start, limit, cap).

Same set-up as ``test_status_browser``: hypercorn on loopback, Debian's chromium driven by
Playwright, the page under its own Content-Security-Policy.
"""

from __future__ import annotations

import anyio
import pytest

import poise_py as poise
from poise_py.contrib.status import StatusApp, serve
from tests.contrib.test_status_browser import _require_browser, watched_page
from tests.support.clocks import FakeClock

pytestmark = pytest.mark.anyio

COLUMNS = ("id", "weight", "ramp", "limit", "cap")


def _read(url: str) -> tuple[list[str], dict[str, list[str]], list[str]]:
    """In a worker thread: load the page; the header and each endpoint's load cells, and any CSP refusal."""
    from playwright.sync_api import expect

    with watched_page(url, width=1600, height=480) as (page, refused):
        expect(page.locator("tr[data-endpoint]")).to_have_count(2)
        header = page.locator("thead th").all_text_contents()
        rows = {}
        for row in page.locator("tr[data-endpoint]").all():
            cells = [row.locator(f"td.{name}").inner_text() for name in COLUMNS]
            rows[cells[0]] = cells[1:]
    return header, rows, refused


@pytest.mark.real_clock  # a real browser polls
@pytest.mark.backends("trio")
async def test_chromium_shows_effective_weight_ramp_progress_limit_and_cap_per_endpoint(clock: FakeClock) -> None:
    _require_browser()
    publisher = poise.DiscoveryPublisher()
    lb = poise.LoadBalancer(
        publisher.subscribe(),
        concurrency=poise.AdaptiveConcurrency(poise.AIMD(initial_limit=7)),
        slow_start=poise.SlowStart(window=10.0),
        clock=clock,  # stands still: the ramp stays where the test put it
    )
    publisher.publish(poise.Snapshot(1, [poise.Endpoint("a", weight=2)]))
    app = StatusApp({"checkout": lb}, poll_interval=0.5)
    async with lb, anyio.create_task_group() as tg:
        await lb.wait_ready()
        # "<i>c</i>" is an id, not markup: the page must show it as text.
        publisher.publish(poise.Delta(2, added=[poise.Endpoint("<i>c</i>", weight=4, metadata={"max_in_flight": 3})]))
        while "<i>c</i>" not in lb.snapshot():
            await anyio.sleep(0)
        clock.advance(4.0)
        port = await tg.start(serve, app)
        header, rows, refused = await anyio.to_thread.run_sync(_read, f"http://127.0.0.1:{port}/")
        tg.cancel_scope.cancel()
        publisher.close()
    assert refused == [], "the page's Content-Security-Policy must allow its own script and style"
    assert {"weight", "slow start", "limit", "cap"} <= set(header)
    assert rows["a"] == ["2", "-", "7", "-"]
    assert rows["<i>c</i>"] == ["1.6 of 4", "40%", "7", "3"]
