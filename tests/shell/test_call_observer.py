"""lb.add_call_observer: one CallEnded per ended permit, with its outcome and duration."""

from __future__ import annotations

import logging

import anyio
import pytest

import poise_py as poise
from poise_py import Fault
from tests.support.clocks import FakeClock, static_lb

pytestmark = pytest.mark.anyio


async def test_each_ended_permit_reports_its_outcome_and_duration_on_the_balancer_clock(clock: FakeClock) -> None:
    seen: list[poise.CallEnded] = []
    async with static_lb("a", clock=clock) as lb:
        lb.add_call_observer(seen.append)
        async with lb.acquire():
            clock.advance(0.5)
        with pytest.raises(OSError):
            async with lb.acquire():
                clock.advance(1.0)
                raise OSError("reset")
        permit = lb.acquire()
        clock.advance(2.0)
        permit.fail(Fault.TRANSIENT)
        permit = lb.acquire()
        permit.cancel()
        with anyio.CancelScope() as scope:
            async with lb.acquire():
                scope.cancel()
                await anyio.sleep(1)
    assert [(e.endpoint.id, e.outcome, e.duration) for e in seen] == [
        ("a", "success", 0.5),
        ("a", "suspect", 1.0),
        ("a", "transient", 2.0),
        ("a", "cancelled", 0.0),
        ("a", "cancelled", 0.0),
    ]
    assert seen[1].fault is Fault.SUSPECT
    assert not seen[1].cancelled
    assert seen[3].cancelled
    assert seen[3].fault is None


async def test_an_observed_permit_records_the_same_counters_as_a_plain_one(clock: FakeClock) -> None:
    async def run(observed: bool) -> poise.EndpointCounters:
        async with static_lb("a", clock=clock) as lb:
            if observed:
                lb.add_call_observer(lambda e: None)
            async with lb.acquire():
                pass
            with pytest.raises(OSError):
                async with lb.acquire():
                    raise OSError("reset")
            lb.acquire().cancel()
            permit = lb.acquire()
            permit.succeed()
            with pytest.raises(poise.PermitError):
                permit.succeed()
            return lb.statistics().endpoints["a"]

    assert await run(observed=True) == await run(observed=False)


async def test_without_observers_permits_are_plain_and_a_removed_observer_hears_nothing_more(clock: FakeClock) -> None:
    seen: list[poise.CallEnded] = []
    async with static_lb("a", clock=clock) as lb:
        plain = lb.acquire()
        assert type(plain) is poise.Permit
        plain.cancel()  # reported, not dropped (a dropped permit warns)
        lb.add_call_observer(seen.append)
        async with lb.acquire():
            pass
        lb.remove_call_observer(seen.append)
        async with lb.acquire():
            pass
        plain = lb.acquire()
        assert type(plain) is poise.Permit
        plain.cancel()
        with pytest.raises(ValueError):
            lb.remove_call_observer(seen.append)
        with pytest.raises(poise.ConfigError):
            lb.add_call_observer(3)  # type: ignore[arg-type]
    assert len(seen) == 1


async def test_an_observer_that_raises_is_logged_and_the_call_goes_on(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(ended: poise.CallEnded) -> None:
        raise RuntimeError("observer bug")

    async with static_lb("a", clock=clock) as lb:
        lb.add_call_observer(broken)
        with caplog.at_level(logging.ERROR, logger="poise_py"):
            async with lb.acquire():
                pass
        assert lb.statistics().endpoints["a"].successes == 1
    assert any("call observer" in r.getMessage() for r in caplog.records)
