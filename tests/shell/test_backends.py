"""The backends the shell's tests run on (``tests/conftest.py``): each run gets its own clock."""

from __future__ import annotations

import anyio
import pytest
import sniffio
import trio
import trio.testing

pytestmark = pytest.mark.anyio


@pytest.mark.backends("trio")
@pytest.mark.parametrize("run", [1, 2])
async def test_every_trio_test_starts_on_a_fresh_mock_clock_at_zero(run: int) -> None:
    clock = trio.lowlevel.current_clock()
    assert isinstance(clock, trio.testing.MockClock)
    assert clock.autojump_threshold == 0
    assert anyio.current_time() == 0.0  # a clock shared with the other run would have moved on
    await anyio.sleep(1000.0 * run)  # virtual: no real time passes
    assert anyio.current_time() == 1000.0 * run


@pytest.mark.real_clock
async def test_a_real_clock_test_runs_on_both_backends_without_a_mock_clock() -> None:
    if sniffio.current_async_library() == "trio":
        assert not isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock)
    await anyio.sleep(0)


@pytest.mark.manual_clock
@pytest.mark.backends("trio")
async def test_a_manual_clock_moves_only_when_the_test_jumps_it() -> None:
    clock = trio.lowlevel.current_clock()
    assert isinstance(clock, trio.testing.MockClock)
    with anyio.move_on_after(5.0) as scope:
        clock.jump(5.0)
        await anyio.sleep(10.0)
    assert scope.cancelled_caught
    assert anyio.current_time() == 5.0
