"""Memory stays flat under endless churn: departed endpoint states are released, not hoarded."""

from __future__ import annotations

import gc

import anyio
import pytest

import poise_py as poise
from poise_py._core._record import Member
from tests.support.clocks import FakeClock

pytestmark = pytest.mark.anyio

POOL = 10
REVISIONS = 1_000
ACQUIRES = 1_000_000
HELD = 3
"""Permits held across revisions, so some departed endpoints still have calls in flight."""


PREFIX = "churn-"
"""This test's endpoint ids: what other tests leave alive is not counted against it."""


def retained_states() -> int:
    """This test's Member objects still alive, wherever referenced (not a memory figure)."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is Member and o.endpoint.id.startswith(PREFIX))


async def test_a_million_acquires_over_a_thousand_revisions_of_churn_retain_a_bounded_number_of_states(
    clock: FakeClock,
) -> None:
    publisher = poise.DiscoveryPublisher()
    lb = poise.LoadBalancer(publisher.subscribe(), clock=clock, policy=poise.RoundRobin())
    held: list[poise.Permit] = []
    peak = 0
    async with lb:
        for revision in range(1, REVISIONS + 1):
            # Every revision replaces the whole pool: POOL departures each time.
            publisher.publish(
                poise.Snapshot(revision, [poise.Endpoint(f"{PREFIX}{revision}-{i}") for i in range(POOL)])
            )
            while lb.discovery_revision != revision:
                await anyio.sleep(0)
            for _ in range(ACQUIRES // REVISIONS):
                lb.acquire().succeed()
            held.append(lb.acquire())
            if len(held) > HELD:
                held.pop(0).succeed()
            if revision % 100 == 0:
                peak = max(peak, retained_states())
        for permit in held:
            permit.succeed()
        statistics = lb.statistics()
    # Live pool + departed states with a permit in flight (at most HELD) + the bounded
    # backlog folded at the next prune (at most 16 + 2 x those in flight).
    bound = POOL + HELD + 16 + 2 * HELD
    assert peak <= bound, f"{peak} endpoint states retained after {REVISIONS * POOL} departures"
    assert statistics.pool.successes == ACQUIRES + REVISIONS  # nothing lost when states were folded
