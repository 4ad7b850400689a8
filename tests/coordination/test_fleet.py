"""Fleet coordination, end to end: balancers sharing circuits through InMemoryStorage and Redis.

Every test here runs twice per backend: against the embedded storage and against a real
redis-server (see tests/support/coordination.py for how time moves and syncs are driven).
"""

from __future__ import annotations

import pytest

import poise_py as poise
from poise_py import CircuitState, Fault
from tests.support.coordination import Fleet, fail, grab_held_probes, grab_probes, open_wait, state_of, stats

pytestmark = [pytest.mark.anyio, pytest.mark.real_clock]


async def test_acquire_on_a_closed_circuit_never_touches_the_storage(fleet: Fleet) -> None:
    async with fleet:
        lb = await fleet.balancer("a", "b")
        await fleet.sync(lb)
        before = stats(lb).operations
        for _ in range(500):
            async with lb.acquire():
                pass
        assert stats(lb).operations == before
        assert stats(lb).connected


async def test_a_local_trip_is_published_and_every_balancer_mirrors_it(fleet: Fleet) -> None:
    async with fleet:
        lbs = await fleet.balancers(3)
        await fleet.sync(*lbs)
        await fail(lbs[0])
        assert state_of(lbs[0]) is CircuitState.OPEN
        await fleet.sync(lbs[0])
        record = await fleet.record()
        assert record.state is CircuitState.OPEN
        assert record.failed_rounds == 0
        assert open_wait(record) == pytest.approx(30.0, abs=1e-3)
        assert stats(lbs[0]).published == 1
        await fleet.sync(*lbs[1:])
        for lb in lbs[1:]:
            assert state_of(lb) is CircuitState.OPEN
            with pytest.raises(poise.NoEligibleEndpoints):
                lb.acquire()


async def test_a_balancer_that_starts_late_mirrors_the_shared_state_before_its_first_call(fleet: Fleet) -> None:
    async with fleet:
        first = await fleet.balancer()
        await fail(first)
        await fleet.sync(first)
        late = await fleet.balancer(seed=9)  # its start-up sync reads the record
        assert state_of(late) is CircuitState.OPEN
        with pytest.raises(poise.NoEligibleEndpoints):
            late.acquire()


async def test_no_balancer_half_opens_on_its_own_timer_while_the_fleet_decides(fleet: Fleet) -> None:
    async with fleet:
        lbs = await fleet.balancers(2)
        await fail(lbs[0])
        await fleet.sync(*lbs)
        await fleet.advance(31.0)
        for lb in lbs:  # the local deadline has passed, but no sync has asked the storage
            assert state_of(lb) is CircuitState.OPEN
            with pytest.raises(poise.NoEligibleEndpoints):
                lb.acquire()
        await fleet.sync(*lbs)
        assert (await fleet.record()).state is CircuitState.HALF_OPEN
        assert all(state_of(lb) is CircuitState.HALF_OPEN for lb in lbs)


@pytest.mark.parametrize("permitted", [1, 2, 3])
async def test_exactly_permitted_probes_go_out_fleet_wide_per_round(fleet: Fleet, permitted: int) -> None:
    policy = poise.CircuitPolicy(
        consecutive_failures=1,
        minimum_volume=1,
        permitted_probes=permitted,
        escalation=poise.Escalation(base=30.0, maximum=300.0, jitter=0.0),
    )
    async with fleet:
        lbs = await fleet.balancers(5, circuit=policy)
        await fail(lbs[0])
        await fleet.sync(*lbs)
        for round_ in range(2):
            await fleet.advance(300.0)
            for _ in range(permitted):  # each sync leases at most one spare slot per balancer
                await fleet.sync(*lbs)
            probes = await grab_probes(fleet, lbs)
            await fleet.sync(*lbs)  # balancers whose slots are all in flight ask again: nothing left
            probes += await grab_probes(fleet, lbs)
            assert len(probes) == permitted, f"round {round_}"
            record = await fleet.record()
            assert record.probes_remaining == 0
            assert sum(stats(lb).leases for lb in lbs) == permitted * (round_ + 1)
            for permit in probes:
                permit.fail(Fault.SUSPECT)
            await fleet.sync(*lbs)
            assert (await fleet.record()).state is CircuitState.OPEN


async def test_failed_rounds_grow_the_shared_wait_and_a_passing_probe_resets_them(fleet: Fleet) -> None:
    async with fleet:
        lbs = await fleet.balancers(3)
        await fail(lbs[0])
        await fleet.sync(*lbs)
        wait = 30.0
        for expected_rounds, expected_wait in [(1, 60.0), (2, 120.0), (3, 240.0), (4, 300.0), (5, 300.0)]:
            await fleet.advance(wait)
            await fleet.sync(*lbs)
            (probe,) = await grab_probes(fleet, lbs)
            probe.fail(Fault.SUSPECT)
            await fleet.sync(*lbs)
            record = await fleet.record()
            assert record.state is CircuitState.OPEN
            assert record.failed_rounds == expected_rounds
            wait = open_wait(record)
            assert wait == pytest.approx(expected_wait, abs=1e-3)
            assert all(state_of(lb) is CircuitState.OPEN for lb in lbs)
            # each mirror escalates from the fleet's count if it must fall back later
            assert all(lb.snapshot()["a"].escalation_level == expected_rounds + 1 for lb in lbs)
        await fleet.advance(wait)
        await fleet.sync(*lbs)
        (probe,) = await grab_probes(fleet, lbs)
        probe.succeed()
        await fleet.sync(*lbs)
        record = await fleet.record()
        assert record.state is CircuitState.CLOSED
        assert record.failed_rounds == 0
        assert all(state_of(lb) is CircuitState.CLOSED for lb in lbs)
        await fail(lbs[1])  # a new episode starts from the base wait
        await fleet.sync(lbs[1])
        record = await fleet.record()
        assert open_wait(record) == pytest.approx(30.0, abs=1e-3)


async def test_a_retry_after_opens_the_shared_circuit_for_exactly_that_long(fleet: Fleet) -> None:
    async with fleet:
        lbs = await fleet.balancers(2)
        lbs[0].acquire().fail(Fault.TRANSIENT, retry_after=45.0)
        await fleet.sync(*lbs)
        record = await fleet.record()
        assert record.state is CircuitState.OPEN
        assert open_wait(record) == pytest.approx(45.0, abs=1e-3)
        assert state_of(lbs[1]) is CircuitState.OPEN


async def test_probe_successes_are_counted_fleet_wide_before_the_circuit_closes(fleet: Fleet) -> None:
    policy = poise.CircuitPolicy(
        consecutive_failures=1,
        minimum_volume=1,
        permitted_probes=2,
        success_threshold=2,
        escalation=poise.Escalation(base=30.0, maximum=300.0, jitter=0.0),
    )
    async with fleet:
        lbs = await fleet.balancers(2, circuit=policy)
        await fail(lbs[0])
        await fleet.sync(*lbs)
        await fleet.advance(30.0)
        await fleet.sync(*lbs)
        issued = await grab_held_probes(fleet, lbs, each=1)
        probes = [permit for _, permit in issued]
        assert len(probes) == 2
        assert {issuer for issuer, _ in issued} == set(lbs)  # one lease each: both had demand
        probes[0].succeed()
        await fleet.sync(*lbs)
        record = await fleet.record()
        assert record.state is CircuitState.HALF_OPEN
        assert record.probes_completed == 1
        probes[1].succeed()
        await fleet.sync(*lbs)
        await fleet.sync(*lbs)
        assert (await fleet.record()).state is CircuitState.CLOSED
        assert all(state_of(lb) is CircuitState.CLOSED for lb in lbs)


async def test_a_failed_probe_of_a_round_already_closed_is_stale(fleet: Fleet) -> None:
    policy = poise.CircuitPolicy(
        consecutive_failures=1,
        minimum_volume=1,
        permitted_probes=2,
        escalation=poise.Escalation(base=30.0, maximum=300.0, jitter=0.0),
    )
    async with fleet:
        lbs = await fleet.balancers(2, circuit=policy)
        await fail(lbs[0])
        await fleet.sync(*lbs)
        await fleet.advance(30.0)
        await fleet.sync(*lbs)
        (first_lb, first), (second_lb, second) = await grab_held_probes(fleet, lbs, each=1)
        first.succeed()
        await fleet.sync(first_lb)
        assert (await fleet.record()).state is CircuitState.CLOSED
        second.fail(Fault.SUSPECT)  # its balancer has not seen the close yet: a local trip
        await fleet.sync(second_lb)
        record = await fleet.record()
        assert record.state is CircuitState.CLOSED, "a result from a finished round reopened the circuit"
        assert state_of(second_lb) is CircuitState.CLOSED


async def test_a_round_whose_lease_holder_vanished_lapses_and_starts_afresh(fleet: Fleet) -> None:
    async with fleet:
        lb = await fleet.balancer(probe_lease=10.0)
        await fail(lb)
        await fleet.sync(lb)
        await fleet.advance(30.0)
        await fleet.sync(lb)  # the wait is over: the balancer's timer begins the round (no lease: no demand)
        phantom = await fleet.storage()  # an instance that leases the only slot, then dies
        record = (await phantom.read(["a"]))[0]
        assert record.state is CircuitState.HALF_OPEN
        reply = await phantom.lease_probe("a", expected_version=record.version)
        assert reply.applied
        await fleet.sync(lb)
        assert await grab_probes(fleet, [lb]) == []
        await fleet.advance(10.0)
        await fleet.sync(lb)
        record = await fleet.record()
        assert record.state is CircuitState.HALF_OPEN
        assert record.version == reply.state.version + 1
        probes = await grab_probes(fleet, [lb])
        assert len(probes) == 1
        probes[0].cancel()  # a permit is reported, never just dropped


async def test_leases_a_balancer_did_not_use_are_given_back_when_it_stops(fleet: Fleet) -> None:
    async with fleet:
        stays = await fleet.balancer()
        await fail(stays)
        await fleet.sync(stays)
        await fleet.advance(30.0)
        async with await fleet.build(seed=1) as leaves:
            with pytest.raises(poise.NoEligibleEndpoints):
                leaves.acquire()  # demand: the sync leases a slot this balancer then never uses
            await fleet.sync(leaves)
            assert stats(leaves).leases == 1
            assert (await fleet.record()).probes_remaining == 0
        assert (await fleet.record()).probes_remaining == 1  # it stopped holding an unused lease
        await fleet.sync(stays)
        probes = await grab_probes(fleet, [stays])
        assert len(probes) == 1
        probes[0].cancel()  # a permit is reported, never just dropped


async def test_permits_in_flight_when_the_fleet_opens_a_circuit_become_stale(fleet: Fleet) -> None:
    async with fleet:
        lbs = await fleet.balancers(2)
        await fleet.sync(*lbs)
        in_flight = lbs[1].acquire()
        await fail(lbs[0])
        await fleet.sync(*lbs)
        assert state_of(lbs[1]) is CircuitState.OPEN
        in_flight.fail(Fault.SUSPECT)
        assert lbs[1].snapshot()["a"].counters.stale == 1
        await fleet.sync(lbs[1])
        assert stats(lbs[1]).published == 0


async def test_max_ejection_percent_still_holds_for_shared_ejections(fleet: Fleet) -> None:
    guarded = poise.CircuitPolicy(
        consecutive_failures=1,
        minimum_volume=1,
        escalation=poise.Escalation(base=30.0, maximum=300.0, jitter=0.0),
        max_ejection_percent=0.5,
    )
    async with fleet:
        tripper = await fleet.balancer("a", "b")
        guarded_lb = await fleet.balancer("a", "b", circuit=guarded, seed=1)
        first = await fail(tripper)
        await fail(tripper, exclude=(first,))
        await fleet.sync(tripper)
        await fleet.sync(guarded_lb)
        states = sorted(e.state.value for e in guarded_lb.snapshot().endpoints)
        assert states == ["closed", "open"]
        assert stats(guarded_lb).declined == 1
        async with guarded_lb.acquire():  # one endpoint still serves here
            pass


async def test_a_passing_active_check_exempts_a_balancer_from_the_shared_episode(fleet: Fleet) -> None:
    async with fleet:
        tripper, checked = await fleet.balancers(2)
        await fail(tripper)
        await fleet.sync(tripper, checked)
        assert state_of(checked) is CircuitState.OPEN
        state = checked._pool.members["a"]
        assert checked._pool.uneject(state, fleet.clock())  # what a passing health check does
        await fleet.sync(checked)
        assert state_of(checked) is CircuitState.CLOSED
        async with checked.acquire():
            pass
        await fleet.advance(30.0)
        await fleet.sync(tripper, checked)
        assert state_of(checked) is CircuitState.CLOSED  # still sitting the episode out
        (probe,) = await grab_probes(fleet, [tripper])
        probe.succeed()
        await fleet.sync(tripper, checked)
        await fail(tripper)  # a new episode: the exemption is over
        await fleet.sync(tripper, checked)
        assert state_of(checked) is CircuitState.OPEN


async def test_protocol_1_and_protocol_2_balancers_share_a_fleet_predictably(fleet: Fleet) -> None:
    """Rules (docs/coordination.md): a round lasts what its tripper decided; only protocol-2
    trips count failed rounds; a record last written by protocol 1 carries no count."""
    constant = poise.CircuitPolicy(
        consecutive_failures=1,
        minimum_volume=1,
        escalation=poise.Escalation(base=30.0, maximum=30.0, jitter=0.0),
    )
    async with fleet:
        old = await fleet.balancer(circuit=constant, protocol_version=1)
        new = await fleet.balancer(seed=1, protocol_version=2)
        await fail(new)
        await fleet.sync(new, old)
        assert state_of(old) is CircuitState.OPEN

        async def round_failed_by(lb: poise.LoadBalancer, wait: float) -> poise.SharedState:
            await fleet.advance(wait)
            await fleet.sync(lb)  # this one begins the round
            await fleet.sync(old if lb is new else new)
            ((issuer, probe),) = await grab_held_probes(fleet, [lb, old if lb is new else new])  # and has demand first
            assert issuer is lb
            probe.fail(Fault.SUSPECT)
            await fleet.sync(lb)
            await fleet.sync(old, new)
            return await fleet.record()

        record = await round_failed_by(new, 30.0)  # protocol 2 trips from HALF_OPEN: counts
        assert (record.failed_rounds, record.protocol_version) == (1, 2)
        assert open_wait(record) == pytest.approx(60.0, abs=1e-3)
        record = await round_failed_by(old, 60.0)  # protocol 1 honoured the 60 s, trips for 30 s
        assert (record.failed_rounds, record.protocol_version) == (0, 1)
        assert open_wait(record) == pytest.approx(30.0, abs=1e-3)
        record = await round_failed_by(new, 30.0)  # the count restarts after a protocol-1 write
        assert (record.failed_rounds, record.protocol_version) == (1, 2)
        assert open_wait(record) == pytest.approx(60.0, abs=1e-3)
        # protocol 1 cannot shorten a protocol-2 round: the deadline is stored, not recomputed
        await fleet.advance(59.0)
        await fleet.sync(old)
        assert (await fleet.record()).state is CircuitState.OPEN
        assert state_of(old) is CircuitState.OPEN
        old_view = (await (await fleet.storage(protocol_version=1)).read(["a"]))[0]
        assert old_view.failed_rounds == 0  # protocol 1 does not know the field
