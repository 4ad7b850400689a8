"""A superseded permit (a hedge's loser, a permit handed to a waiter that had gone) is remembered by no counter."""

from __future__ import annotations

import pytest

import poise_py as poise
from tests.support.clocks import FakeClock, static_lb

pytestmark = pytest.mark.anyio


async def test_a_superseded_probe_is_not_counted_as_a_probe(clock: FakeClock) -> None:
    async with static_lb("a", clock=clock) as lb:
        async with lb.acquire() as permit:
            permit.fail(poise.Fault.TRANSIENT, retry_after=1.0)
        clock.advance(1.0)
        before = lb.statistics().pool
        probe = lb.acquire()
        assert probe.probe
        probe.cancel(superseded=True)
        after = lb.statistics().pool
        assert (after.probes, after.issued, after.cancellations) == (before.probes, before.issued, before.cancellations)
        assert lb.snapshot()["a"].counters.probes == 0
        again = lb.acquire()
        assert again.probe  # its slot is free again
        again.succeed()


async def test_a_superseded_spillover_is_not_counted_as_a_selection(clock: FakeClock) -> None:
    eps = [poise.Endpoint("a", tier=0), poise.Endpoint("b", tier=1)]
    async with poise.LoadBalancer(poise.StaticDiscovery(eps), clock=clock) as lb:
        async with lb.acquire() as permit:
            permit.fail(poise.Fault.FATAL)  # a is ejected: tier 0 has nothing, b takes the spillover
        before = lb.statistics().pool.selections
        spilled = lb.acquire()
        assert spilled.decision.mode is poise.DecisionMode.SPILLOVER
        spilled.cancel(superseded=True)
        assert lb.statistics().pool.selections == before
