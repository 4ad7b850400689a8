"""The quickstart's Retry-After snippet, run as written, on both forms of the header."""

from __future__ import annotations

import re
import textwrap
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import attrs
import pytest

import poise_py as poise
from tests.support.clocks import FakeClock, static_lb

pytestmark = pytest.mark.anyio

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"


def _snippet() -> str:
    blocks: list[str] = re.findall(r"```python\n(.*?)```", QUICKSTART.read_text(), re.S)
    [block] = [b for b in blocks if "retry-after" in b]
    return block


@attrs.frozen
class _Response:
    status_code: int
    headers: dict[str, str]


@attrs.frozen
class _Client:
    response: _Response

    async def get(self, url: str) -> _Response:
        return self.response


async def _run_snippet(retry_after: str | None, clock: FakeClock) -> poise.EndpointSnapshot:
    headers = {} if retry_after is None else {"retry-after": retry_after}
    lb = static_lb("a", clock=clock)
    namespace: dict[str, Any] = {"poise": poise, "lb": lb, "client": _Client(_Response(429, headers)), "url": "/"}
    exec("async def snippet():\n" + textwrap.indent(_snippet(), "    "), namespace)  # noqa: S102 - the doc's code
    async with lb:
        await namespace["snippet"]()
        return lb.snapshot()["a"]


async def test_delta_seconds_open_the_circuit_for_that_long(clock: FakeClock) -> None:
    a = await _run_snippet("120", clock)
    assert a.state is poise.CircuitState.OPEN
    assert a.reopen_at == pytest.approx(clock.now + 120.0)


async def test_an_http_date_opens_the_circuit_until_that_date(clock: FakeClock) -> None:
    when = datetime.now(UTC) + timedelta(seconds=300)
    a = await _run_snippet(format_datetime(when, usegmt=True), clock)
    assert a.state is poise.CircuitState.OPEN
    assert a.reopen_at is not None
    assert 290.0 <= a.reopen_at - clock.now <= 300.0  # the date has one-second resolution


async def test_no_header_falls_back_to_a_transient_fault_without_a_window(clock: FakeClock) -> None:
    a = await _run_snippet(None, clock)
    assert a.state is poise.CircuitState.CLOSED
    assert a.counters.faults[poise.Fault.TRANSIENT] == 1
