"""Shared fixtures: every async test runs on Trio (with a fresh MockClock) and on asyncio.

The backend setting lives here and only here. A test (or a module, through ``pytestmark``)
changes it with the markers registered in ``pyproject.toml``:

- ``@pytest.mark.backends("trio")``: run on these backends only (default: Trio and asyncio);
- ``@pytest.mark.real_clock``: Trio on its real clock (tests that wait on real sockets or
  processes: an autojumping MockClock would fire every timeout while a socket waits);
- ``@pytest.mark.virtual_asyncio``: asyncio on the virtual-time loop of
  ``tests.support.virtual_asyncio`` (Trio keeps its autojumping MockClock);
- ``@pytest.mark.manual_clock``: Trio on a MockClock that never autojumps (the test moves it).

Each run of a test gets its own clock, so virtual time starts at zero in every Trio test. The
test ids stay ``[trio]`` and ``[asyncio]``, first among a test's parameters.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio.testing

from tests.support.clocks import FakeClock
from tests.support.virtual_asyncio import VirtualTimeLoop

pytest_plugins = ["tests.support.coordination", "tests.support.grpc_loops"]

BACKENDS = ("trio", "asyncio")


def backend_names(item: pytest.Item | pytest.Metafunc) -> tuple[str, ...]:
    """The backends a test runs on: those its closest ``backends`` marker names, else both."""
    node = item.definition if isinstance(item, pytest.Metafunc) else item
    marker = node.get_closest_marker("backends")
    if marker is None:
        return BACKENDS
    unknown = [name for name in marker.args if name not in BACKENDS]
    if unknown or not marker.args:
        raise pytest.UsageError(f"{node.nodeid}: backends() takes names from {BACKENDS}, got {marker.args!r}")
    return tuple(marker.args)


def backend_for(item: pytest.Item, name: str) -> tuple[str, dict[str, Any]]:
    """The ``anyio_backend`` value for ``name`` under ``item``'s markers, with a new clock."""
    if name == "trio":
        if item.get_closest_marker("manual_clock") is not None:  # over a module's real_clock
            return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=math.inf)})
        if item.get_closest_marker("real_clock") is not None:
            return ("trio", {})
        return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})
    if item.get_closest_marker("virtual_asyncio") is not None:
        return ("asyncio", {"loop_factory": VirtualTimeLoop})
    return ("asyncio", {})


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``anyio_backend`` by name (the fixture builds the value), ids first."""
    if "anyio_backend" in metafunc.fixturenames:
        names = backend_names(metafunc)
        metafunc.parametrize("anyio_backend", names, ids=names, indirect=True)


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """The backend named by this run's parameter, configured by the test's markers."""
    name: str = request.param
    return backend_for(request.node, name)


@pytest.fixture
def clock() -> FakeClock:
    """A manual clock to inject into a balancer: time moves only when a test says so."""
    return FakeClock()
