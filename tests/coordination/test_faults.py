"""The coordinator's storage fails: fall back, resynchronise, recover from lost keys.

Against the embedded storage (a wrapper that fails or hangs on demand) and against a
redis-server of the test's own, killed, restarted, flushed and paused for real.
"""

from __future__ import annotations

import logging

import pytest

import poise_py as poise
from poise_py import CircuitState, Fault
from tests.support.coordination import COREDIS_LEAK, Fleet, fail, grab_probes, state_of, stats
from tests.support.events import drain

pytestmark = [pytest.mark.anyio, pytest.mark.real_clock, pytest.mark.filterwarnings(COREDIS_LEAK)]


async def test_a_dead_storage_falls_back_to_local_circuits_and_no_call_fails(
    faulty_fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    fleet = faulty_fleet
    changes: list[poise.CoordinationChange] = []
    async with fleet:
        lb = await fleet.balancer("a", "b", timeout=2.0, on_change=changes.append)
        await fleet.sync(lb)
        assert stats(lb).connected
        events = lb.events()
        await fleet.kill()
        with caplog.at_level(logging.WARNING, logger="poise_py"):
            dead = await fail(lb)  # a local trip: publishing it fails
            await fleet.sync(lb)
            await fleet.sync(lb)
            for _ in range(20):  # every call still gets an answer from the local circuits
                async with lb.acquire() as permit:
                    assert permit.endpoint.id != dead
        s = stats(lb)
        assert not s.connected
        assert s.fallbacks == 1
        assert s.failures >= 1
        warnings = [
            r for r in caplog.records if "coordination storage" in r.getMessage() and "unreachable" in r.getMessage()
        ]
        assert len(warnings) == 1, "one log line per outage, not one per failed call"
        fallbacks = [e for e in await drain(events) if isinstance(e, poise.CoordinationFallback)]
        assert len(fallbacks) == 1
        assert fallbacks[0].endpoint_id is None
        assert isinstance(fallbacks[0].error, poise.CoordinationError)
        assert lb.statistics().pool.coordination_fallbacks == 1
        assert [c.connected for c in changes] == [False]
        assert changes[0].reason
        # the local circuit now decides alone: once its open window has passed (on the
        # injected clock) the next selection half-opens it and probes (reads change nothing)
        await fleet.advance(30.0)
        permit = lb.acquire(exclude=("b" if dead == "a" else "a",))
        assert permit.probe
        snap = lb.snapshot()[dead]
        assert snap.state is CircuitState.HALF_OPEN
        permit.succeed()
        assert state_of(lb, dead) is CircuitState.CLOSED


async def test_a_storage_that_comes_back_is_resynchronised_and_told_what_happened(faulty_fleet: Fleet) -> None:
    fleet = faulty_fleet
    changes: list[poise.CoordinationChange] = []
    async with fleet:
        lbs = await fleet.balancers(2, timeout=2.0, on_change=changes.append)
        await fleet.sync(*lbs)
        await fleet.kill()
        await fail(lbs[0])  # tripped while nobody could hear
        await fleet.sync(*lbs)
        assert not stats(lbs[0]).connected
        assert state_of(lbs[1]) is CircuitState.CLOSED
        await fleet.restart()
        await fleet.sync(*lbs)
        assert all(stats(lb).connected for lb in lbs)
        assert stats(lbs[0]).resyncs == 1
        assert [c.connected for c in changes] == [False, False, True, True]  # two balancers
        record = await fleet.record()
        assert record.state is CircuitState.OPEN, "the trip made during the outage was published"
        assert state_of(lbs[1]) is CircuitState.OPEN
        await fleet.advance(30.0)
        await fleet.sync(*lbs)
        probes = await grab_probes(fleet, lbs)
        assert len(probes) == 1, "leased again: one probe fleet-wide"
        probes[0].cancel()  # a permit is reported, never just dropped


async def test_a_storage_that_lost_its_keys_recovers_to_closed_without_errors(faulty_fleet: Fleet) -> None:
    fleet = faulty_fleet
    async with fleet:
        lbs = await fleet.balancers(3)
        await fail(lbs[0])
        await fleet.sync(*lbs)
        await fleet.advance(30.0)
        await fleet.sync(*lbs)
        (probe,) = await grab_probes(fleet, lbs)  # a round in progress, a lease held
        await fleet.flush()
        await fleet.sync(*lbs)
        assert all(state_of(lb) is CircuitState.CLOSED for lb in lbs)
        assert all(stats(lb).failures == 0 for lb in lbs)
        assert all(stats(lb).connected for lb in lbs)
        probe.fail(Fault.SUSPECT)  # from the forgotten round: stale
        await fleet.sync(*lbs)
        assert (await fleet.record()).state is CircuitState.CLOSED
        await fail(lbs[2])  # and the fleet works as before
        await fleet.sync(*lbs)
        record = await fleet.record()
        assert record.state is CircuitState.OPEN
        assert record.version == 1
        assert all(state_of(lb) is CircuitState.OPEN for lb in lbs)


async def test_a_storage_slower_than_the_timeout_is_treated_as_down(faulty_fleet: Fleet) -> None:
    fleet = faulty_fleet
    async with fleet:
        lb = await fleet.balancer(timeout=0.2)
        await fleet.sync(lb)
        async with fleet.slow():
            await fail(lb)
            await fleet.sync(lb)  # waits 0.2 s for the storage, then falls back
            assert not stats(lb).connected
            assert state_of(lb) is CircuitState.OPEN
        await fleet.sync(lb)
        assert stats(lb).connected
        assert (await fleet.record()).state is CircuitState.OPEN


POISONS = ["wrong type", "unknown state", "non-numeric version"]


@pytest.mark.parametrize("how", POISONS)
async def test_a_poisoned_record_affects_only_its_endpoint_once_and_the_next_write_repairs_it(
    fleet: Fleet, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with fleet:
        tripper, lb = await fleet.balancers(2, "a", "b")
        events = lb.events()
        await fleet.sync(tripper, lb)
        await fleet.poison("a", how)
        # a write outside the protocol is in no change log: the next full read finds it
        await fleet.advance(31.0)
        caplog.clear()
        await fleet.sync(lb)
        await fleet.sync(lb)  # a second poll of the same bad record reports nothing new
        s = stats(lb)
        assert s.connected
        assert s.poisoned == 1
        assert s.failures == 0
        fallbacks = [e for e in await drain(events) if isinstance(e, poise.CoordinationFallback)]
        assert len(fallbacks) == 1
        assert fallbacks[0].endpoint_id == "a"
        assert "a" in str(fallbacks[0].error)
        assert fallbacks[0].storage
        if fleet.kind != "memory":
            assert ":circuit:a" in str(fallbacks[0].error)
            assert {"wrong type": "not a hash", "unknown state": "ajar", "non-numeric version": "seven"}[how] in str(
                fallbacks[0].error
            )
        lines = [r.getMessage() for r in caplog.records if "unusable" in r.getMessage()]
        assert len(lines) == 1
        assert "None" not in lines[0]
        # the other endpoint stays coordinated
        await fail(tripper, exclude=("a",))
        await fleet.sync(tripper, lb)
        assert state_of(lb, "b") is CircuitState.OPEN
        # the poisoned one decides locally: its trip is the next write, which repairs the record
        await fail(lb, exclude=("b",))
        assert state_of(lb, "a") is CircuitState.OPEN
        await fleet.sync(lb)
        record = await fleet.record("a")
        assert record.problem is None
        assert record.state is CircuitState.OPEN
        assert record.version == 1
        await fleet.sync(tripper)
        assert state_of(tripper, "a") is CircuitState.OPEN, "the repaired record is shared again"
        assert stats(lb).poisoned == 1


async def test_the_fallback_log_names_the_storage_and_the_error(
    faulty_fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    fleet = faulty_fleet
    async with fleet:
        lb = await fleet.balancer()
        await fleet.sync(lb)
        await fleet.kill()
        caplog.clear()
        await fleet.sync(lb)
        (line,) = [r.getMessage() for r in caplog.records if "coordination" in r.getMessage()]
        assert "for None" not in line
        assert ("InMemoryStorage(" if fleet.kind == "memory" else "RedisStorage(namespace=") in line
        assert "unreachable" in line
        await fleet.restart()
        caplog.clear()  # its records hold the error, and so coredis's leaked streams (see COREDIS_LEAK)
