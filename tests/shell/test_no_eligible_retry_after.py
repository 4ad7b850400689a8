"""``NoEligibleEndpoints.retry_after``: when any endpoint may take a permit again."""

from __future__ import annotations

import pytest

import poise_py as poise
from poise_py import AdminStatus, Fault
from tests.support.clocks import FakeClock, static_lb

pytestmark = pytest.mark.anyio

TRIP_AT_ONCE = poise.CircuitPolicy(
    consecutive_failures=1,
    minimum_volume=1,
    max_ejection_percent=1.0,
    escalation=poise.Escalation(base=10.0, maximum=100.0, jitter=0.0),
)


async def test_retry_after_is_the_earliest_end_of_an_open_window_on_the_balancer_clock(clock: FakeClock) -> None:
    async with static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=clock) as lb:
        start = clock()
        lb.acquire(exclude=["b"]).fail(Fault.SUSPECT)  # a: open for 10 s
        clock.advance(3.0)
        lb.acquire(exclude=["a"]).fail(Fault.SUSPECT)  # b: open until start + 13
        with pytest.raises(poise.NoEligibleEndpoints) as info:
            lb.acquire()
        assert info.value.retry_after == start + 10.0
        clock.advance(7.0)
        probe = lb.acquire()
        assert probe.endpoint.id == "a"  # the probe, at retry_after
        probe.cancel()  # reported, not dropped (a dropped permit warns)


async def test_retry_after_is_none_when_no_endpoint_has_a_known_return(clock: FakeClock) -> None:
    async with static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=clock) as lb:
        lb.acquire(exclude=["b"]).fail(Fault.PERMANENT)
        lb.set_status("b", AdminStatus.DRAINING)
        with pytest.raises(poise.NoEligibleEndpoints) as info:
            lb.acquire()
        assert info.value.retry_after is None


async def test_an_open_endpoint_an_operator_keeps_out_gives_no_retry_after(clock: FakeClock) -> None:
    async with static_lb("a", circuit=TRIP_AT_ONCE, clock=clock) as lb:
        lb.acquire().fail(Fault.SUSPECT)
        lb.set_status("a", AdminStatus.FORCED_UNHEALTHY)
        with pytest.raises(poise.NoEligibleEndpoints) as info:
            lb.acquire()
        assert info.value.retry_after is None


def test_retry_after_defaults_to_none() -> None:
    assert poise.NoEligibleEndpoints({}, 0).retry_after is None
