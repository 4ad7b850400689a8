"""Seed 002's question 1: does design B (the client computes the backoff) race? It does.

Design B keeps the protocol's signature: ``begin_half_open_if_elapsed(name, wait_duration,
permitted)``, where the storage compares its clock with ``opened_at`` and each instance
passes the wait it computed from the ``failed_rounds`` it read. :class:`DesignB` transcribes
that script (no version fence: the call has none). Two instances interleave between one
instance's ``read`` and its call; the round then starts as early as the stale count says.

Our design stores the deadline at the trip, computed by the storage from the count it
holds in the same atomic step, and fences every call by version: the same interleaving
is refused, against the embedded storage and against Redis.
"""

from __future__ import annotations

import attrs
import pytest

import poise_py as poise
from poise_py import CircuitState
from tests.support.clocks import FakeClock
from tests.support.coordination import Fleet, open_wait

pytestmark = [pytest.mark.anyio, pytest.mark.real_clock]

POLICY = poise.Escalation(base=30.0, maximum=300.0, jitter=0.0)


@attrs.define
class DesignB:
    """The seed's storage under design B: one record, the storage clock, no fence on half-open."""

    clock: FakeClock
    state: CircuitState = CircuitState.CLOSED
    opened_at: float = 0.0
    version: int = 0
    failed_rounds: int = 0

    def read(self) -> tuple[CircuitState, int, int]:
        return self.state, self.failed_rounds, self.version

    def trip_open(self) -> None:
        if self.state is CircuitState.HALF_OPEN:
            self.failed_rounds += 1
        self.state, self.opened_at, self.version = CircuitState.OPEN, self.clock(), self.version + 1

    def begin_half_open_if_elapsed(self, wait_duration: float, expected_version: int | None = None) -> bool:
        if expected_version is not None and expected_version != self.version:
            return False  # only with a fence, which the seed's signature does not have
        if self.state is CircuitState.OPEN and self.clock() - self.opened_at >= wait_duration:
            self.state, self.version = CircuitState.HALF_OPEN, self.version + 1
            return True
        return False


def design_b_interleaving(*, fenced: bool) -> tuple[DesignB, float]:
    """A reads, B runs a whole failed round, A calls; returns the store and when B's round should end."""
    clock = FakeClock(0.0)
    store = DesignB(clock)
    store.trip_open()  # round 0: 30 s
    clock.advance(POLICY.window(0))
    store.begin_half_open_if_elapsed(POLICY.window(store.failed_rounds))
    store.trip_open()  # the probe failed: round 1, 60 s
    clock.advance(POLICY.window(1))
    # A polls: OPEN, one failed round, so A will ask for a 60 s wait...
    _, a_rounds, a_version = store.read()
    a_wait = POLICY.window(a_rounds)
    # ...but before A's call lands, B reads the same, begins the round, and its probe fails
    _, b_rounds, _ = store.read()
    assert store.begin_half_open_if_elapsed(POLICY.window(b_rounds))
    store.trip_open()  # round 2: should last window(2) = 120 s
    assert store.failed_rounds == 2
    correct_end = clock() + POLICY.window(2)
    # A's call arrives after a stall (a GC pause, a reconnect, a retried request)
    clock.advance(a_wait)
    store.begin_half_open_if_elapsed(a_wait, expected_version=a_version if fenced else None)
    return store, correct_end


def test_design_b_races_a_stale_read_starts_the_next_round_early() -> None:
    store, correct_end = design_b_interleaving(fenced=False)
    assert store.state is CircuitState.HALF_OPEN, "the race did not happen"
    assert store.clock() == correct_end - 60.0  # probing 60 s before the 120 s wait ended


def test_design_b_needs_a_version_fence_which_changes_its_signature() -> None:
    store, _ = design_b_interleaving(fenced=True)
    assert store.state is CircuitState.OPEN


async def test_the_stored_deadline_refuses_the_same_interleaving(fleet: Fleet) -> None:
    wait = poise.OpenWait(escalation=POLICY)
    async with fleet:
        a, b = await fleet.storage(), await fleet.storage()
        tripped = (await b.trip_open("x", expected_version=0, wait=wait)).state
        await fleet.advance(open_wait(tripped))
        begun = (await b.begin_half_open_if_elapsed("x", expected_version=tripped.version, permitted=1, lease=60)).state
        tripped = (await b.trip_open("x", expected_version=begun.version, wait=wait)).state
        assert open_wait(tripped) == pytest.approx(60.0, abs=1e-3)
        await fleet.advance(60.0)
        (a_view,) = await a.read(["x"])  # A polls
        begun = (await b.begin_half_open_if_elapsed("x", expected_version=tripped.version, permitted=1, lease=60)).state
        tripped = (await b.trip_open("x", expected_version=begun.version, wait=wait)).state
        assert tripped.failed_rounds == 2
        assert open_wait(tripped) == pytest.approx(120.0, abs=1e-3), "fixed by the storage at the trip"
        await fleet.advance(60.0)  # A's stalled call lands
        stale = await a.begin_half_open_if_elapsed("x", expected_version=a_view.version, permitted=1, lease=60)
        assert not stale.applied
        fresh = await a.begin_half_open_if_elapsed("x", expected_version=stale.state.version, permitted=1, lease=60)
        assert not fresh.applied, "no caller passes a wait: the stored deadline alone decides"
        assert fresh.state.state is CircuitState.OPEN
        assert 0.0 < fresh.state.remaining() <= 60.0
        await fleet.advance(60.0)
        assert (
            await a.begin_half_open_if_elapsed("x", expected_version=stale.state.version, permitted=1, lease=60)
        ).applied
