"""Shared fixtures: every async test runs on Trio (with a MockClock) and on asyncio."""

from __future__ import annotations

from typing import Any

import pytest
import trio.testing

from tests.support.clocks import FakeClock

pytest_plugins = ["tests.support.coordination"]


@pytest.fixture(
    params=[
        pytest.param(("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}), id="trio"),
        pytest.param(("asyncio", {}), id="asyncio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """Trio with an autojumping MockClock (sleeps cost no real time), and asyncio."""
    return request.param


@pytest.fixture
def clock() -> FakeClock:
    """A manual clock to inject into a balancer: time moves only when a test says so."""
    return FakeClock()
