"""The balancer's clock: the backend's own reading, whichever way it is read."""

from __future__ import annotations

import asyncio
import time

import anyio
import pytest
import sniffio
import trio

import poise_py as poise
from poise_py._clock import Clock, backend_clock
from poise_py._clock import _trio_clock as trio_clock

pytestmark = pytest.mark.anyio


def static_lb() -> poise.LoadBalancer:
    return poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a", address=("127.0.0.1", 1))]))


@pytest.mark.real_clock
async def test_on_the_backends_default_clock_the_balancer_reads_the_time_anyio_reads() -> None:
    async with static_lb() as lb:
        for _ in range(100):
            before = anyio.current_time()
            taken_at = lb.snapshot().taken_at
            after = anyio.current_time()
            assert before <= taken_at <= after


@pytest.mark.real_clock
async def test_the_default_clocks_are_read_directly_not_through_a_method() -> None:
    clock = backend_clock()
    if sniffio.current_async_library() == "trio":
        # Trio's SystemClock is offset + perf_counter(): computed natively, same offset.
        assert clock.native
        assert clock.offset == trio.lowlevel.current_clock().offset  # type: ignore[attr-defined]
    else:
        assert type(asyncio.get_running_loop()).time is asyncio.BaseEventLoop.time
        assert not clock.native
        assert clock.function is time.monotonic
    for _ in range(100):
        before = anyio.current_time()
        reading = clock()
        assert before <= reading <= anyio.current_time()


@pytest.mark.virtual_asyncio
async def test_a_mock_or_virtual_clock_is_called_as_it_is_and_moves_the_balancer_with_it() -> None:
    clock = backend_clock()
    assert not clock.native  # MockClock on Trio, the virtual-time loop's time() on asyncio
    async with static_lb() as lb:
        await anyio.sleep(12.5)
        assert lb.snapshot().taken_at == anyio.current_time() == clock()


class SystemClock:
    """Named like Trio's default clock, with an offset, but it does not read perf_counter()."""

    offset = 1000.0

    def current_time(self) -> float:
        return self.offset + time.perf_counter() + 3600.0


class OffsetClock:
    """offset + perf_counter() under another name: not Trio's clock, so it is called."""

    offset = 50.0

    def current_time(self) -> float:
        return self.offset + time.perf_counter()


def test_a_clock_named_like_trios_but_reading_otherwise_is_called_not_computed() -> None:
    clock = trio_clock(SystemClock())
    assert not clock.native
    assert clock() - time.perf_counter() == pytest.approx(4600.0, abs=1.0)


def test_only_trios_default_clock_is_computed_natively() -> None:
    assert not trio_clock(OffsetClock()).native
    assert not trio_clock(trio.testing.MockClock()).native


def test_an_injected_clock_is_the_function_given() -> None:
    readings = iter([1.0, 2.5, 4.0])
    clock = Clock(lambda: next(readings))
    assert (clock(), clock.now(), clock()) == (1.0, 2.5, 4.0)
    native = Clock(time.perf_counter, 100.0)
    before = time.perf_counter() + 100.0
    assert before <= native.now() <= native() <= time.perf_counter() + 100.0
    assert repr(clock).startswith("Clock(<function")
    assert repr(Clock(time.perf_counter, 7.0)) == "Clock(<built-in function perf_counter>, offset=7.0)"
