"""Coordinated fleets on the event loop's clock: leases follow demand, in virtual time.

Every balancer here reads the event loop's clock (no injected clock) and the storage is a
default :class:`InMemoryStorage`, which reads the same clock; on Trio a ``MockClock`` and on
asyncio the simulator's virtual-time loop make every sleep free, so the coordinators'
background polls, deadlines and lease holds run as they would in production. Bounds such
as "within one ``sync_interval``" are virtual-time ``fail_after`` scopes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
import pytest

import poise_py as poise
from poise_py import CircuitState, Fault
from tests.support.clocks import endpoints

pytestmark = [pytest.mark.anyio, pytest.mark.virtual_asyncio]

SYNC = 1.0
POLICY = poise.CircuitPolicy(
    consecutive_failures=1,
    minimum_volume=1,
    permitted_probes=1,
    escalation=poise.Escalation(base=30.0, maximum=300.0, jitter=0.0),
    max_ejection_percent=1.0,
)


STORAGE_OF: dict[poise.LoadBalancer, poise.Storage] = {}
"""The storage each balancer of a running :func:`fleet` shares (its ``Coordination.storage``)."""


@contextlib.asynccontextmanager
async def fleet(
    n: int, *ids: str, coordination: poise.Coordination | None = None
) -> AsyncIterator[list[poise.LoadBalancer]]:
    """``n`` running balancers over one default in-memory storage, on the loop's clock."""
    shared = coordination or poise.Coordination(sync_interval=SYNC)
    async with contextlib.AsyncExitStack() as stack:
        lbs = [
            await stack.enter_async_context(
                poise.LoadBalancer(
                    poise.StaticDiscovery(endpoints(*(ids or ("a",)))),
                    circuit=POLICY,
                    seed=i,
                    coordination=shared,
                )
            )
            for i in range(n)
        ]
        STORAGE_OF.update(dict.fromkeys(lbs, shared.storage))
        try:
            yield lbs
        finally:
            for lb in lbs:
                del STORAGE_OF[lb]


def stats(lb: poise.LoadBalancer) -> poise.CoordinationStatistics:
    s = lb.coordination_statistics()
    assert s is not None
    return s


def state_of(lb: poise.LoadBalancer, endpoint_id: str = "a") -> CircuitState:
    return lb.snapshot()[endpoint_id].state


async def record(lb: poise.LoadBalancer, key: str = "a") -> poise.SharedState:
    """The shared record of ``key`` in the storage of ``lb``'s fleet."""
    return (await STORAGE_OF[lb].read([key]))[0]


async def until_probe(lb: poise.LoadBalancer, every: float = 0.05) -> poise.Permit:
    """Ask ``lb`` for a permit every ``every`` seconds until it hands out a probe."""
    while True:
        try:
            permit = lb.acquire()
        except poise.NoEligibleEndpoints:
            await anyio.sleep(every)
            continue
        assert permit.probe
        return permit


async def trip(lbs: list[poise.LoadBalancer]) -> float:
    """Trip the shared circuit from ``lbs[0]``; returns the shared deadline in loop time."""
    lbs[0].acquire().fail(Fault.SUSPECT)
    await anyio.sleep(SYNC * 1.5)  # published, and every balancer polled it
    assert all(state_of(lb) is CircuitState.OPEN for lb in lbs)
    shared = await record(lbs[0])
    assert shared.state is CircuitState.OPEN
    assert shared.reopen_at is not None
    return shared.reopen_at


async def test_a_fleet_on_the_loops_clock_trips_half_opens_and_closes_by_itself() -> None:
    async with fleet(3) as lbs:
        deadline = await trip(lbs)
        assert deadline == pytest.approx(anyio.current_time() - SYNC * 1.5 + 30.0)
        await anyio.sleep(deadline - anyio.current_time() - 1.0)
        assert all(state_of(lb) is CircuitState.OPEN for lb in lbs)  # not one second early
        with anyio.fail_after(1.0 + SYNC):
            probe = await until_probe(lbs[1])
        assert anyio.current_time() >= deadline
        assert all(state_of(lb) is CircuitState.HALF_OPEN for lb in lbs)
        probe.succeed()
        await anyio.sleep(SYNC * 1.5)
        assert (await record(lbs[0])).state is CircuitState.CLOSED
        assert all(state_of(lb) is CircuitState.CLOSED for lb in lbs)
        async with lbs[2].acquire() as permit:
            assert not permit.probe


@pytest.mark.parametrize("n", [2, 3])
async def test_the_one_busy_instance_gets_the_probe_within_one_sync_interval_of_the_deadline(n: int) -> None:
    async with fleet(n) as lbs:
        busy = lbs[-1]
        deadline = await trip(lbs)
        await anyio.sleep(deadline - anyio.current_time())
        with anyio.fail_after(SYNC):
            probe = await until_probe(busy)
        assert [stats(lb).leases for lb in lbs[:-1]] == [0] * (n - 1), "an idle instance leased the probe"
        assert stats(busy).leases == 1
        probe.succeed()
        await anyio.sleep(SYNC * 1.5)
        assert all(state_of(lb) is CircuitState.CLOSED for lb in lbs)


async def test_three_hundred_concurrent_acquires_over_three_instances_yield_exactly_one_probe() -> None:
    async with fleet(3) as lbs:
        deadline = await trip(lbs)
        await anyio.sleep(deadline - anyio.current_time())
        probes: list[poise.Permit] = []

        async def caller(lb: poise.LoadBalancer) -> None:
            with anyio.move_on_after(3 * SYNC):
                while True:
                    with contextlib.suppress(poise.NoEligibleEndpoints):
                        probes.append(lb.acquire())
                    await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            for i in range(300):
                tg.start_soon(caller, lbs[i % 3])
        assert len(probes) == 1
        assert all(p.probe for p in probes)
        assert sum(stats(lb).leases for lb in lbs) == 1
        assert (await record(lbs[0])).probes_remaining == 0
        for permit in probes:
            permit.cancel()  # a permit is reported, never just dropped


async def test_a_cancelled_probes_slot_reaches_another_instance_within_one_sync_interval() -> None:
    async with fleet(2) as lbs:
        first, second = lbs
        deadline = await trip(lbs)
        await anyio.sleep(deadline - anyio.current_time())
        probe = await until_probe(first)
        with anyio.fail_after(1.0), contextlib.suppress(poise.NoEligibleEndpoints):
            second.acquire()  # refused: the fleet's only slot is in flight on `first`
        probe.cancel()
        cancelled_at = anyio.current_time()
        with anyio.fail_after(SYNC + 0.1):
            other = await until_probe(second)
        assert anyio.current_time() - cancelled_at <= SYNC
        assert stats(first).released == 1
        other.succeed()
        await anyio.sleep(SYNC * 1.5)
        assert all(state_of(lb) is CircuitState.CLOSED for lb in lbs)


async def test_an_unused_lease_goes_back_after_one_sync_interval_and_serves_another_instance() -> None:
    async with fleet(2) as lbs:
        once, busy = lbs
        deadline = await trip(lbs)
        await anyio.sleep(deadline - anyio.current_time())
        with pytest.raises(poise.NoEligibleEndpoints):
            once.acquire()  # one refused call, and then no more traffic here
        await anyio.sleep(0.01)
        assert stats(once).leases == 1
        granted_at = anyio.current_time()
        with anyio.fail_after(2 * SYNC + 0.1):  # the hold, then the busy instance's next poll
            probe = await until_probe(busy)
        assert stats(once).released == 1
        assert anyio.current_time() - granted_at <= 2 * SYNC + 0.05
        probe.fail(Fault.SUSPECT)
        await anyio.sleep(SYNC * 1.5)
        assert (await record(busy)).failed_rounds == 1


async def test_an_instance_whose_operator_excludes_the_endpoint_never_spends_the_fleets_probe() -> None:
    async with fleet(2, "a", "b") as lbs:
        excluded, idle = lbs
        excluded.set_status("a", poise.AdminStatus.FORCED_UNHEALTHY)
        idle.acquire(exclude=("b",)).fail(Fault.SUSPECT)
        await anyio.sleep(SYNC * 1.5)
        shared = await record(idle)
        assert shared.reopen_at is not None
        await anyio.sleep(shared.reopen_at - anyio.current_time() + SYNC)
        for _ in range(50):  # traffic here goes to "b": demand, but "a" is excluded here
            async with excluded.acquire() as permit:
                assert permit.endpoint.id == "b"
            await anyio.sleep(0.05)
        assert stats(excluded).leases == 0
        after = await record(idle)
        assert after.state is CircuitState.HALF_OPEN
        assert after.probes_remaining == 1


async def test_callers_waiting_on_a_fleet_get_the_leased_probe_and_then_the_closed_circuit() -> None:
    async with fleet(2) as lbs:
        second = lbs[1]
        deadline = await trip(lbs)  # "a" open for 30 s, fleet-wide
        start = anyio.current_time()
        served: list[tuple[float, bool]] = []

        async def caller() -> None:
            async with second.acquire(wait=120) as permit:  # demand: the waiting round leases
                served.append((anyio.current_time() - start, permit.probe))
                await anyio.sleep(0.1)

        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(caller)
        pool = second.statistics().pool
    assert len(served) == 20
    assert sum(probe for _, probe in served) == 1  # the fleet's one probe slot, leased to a waiter
    probe_at = next(at for at, probe in served if probe)
    assert deadline - start <= probe_at <= deadline - start + SYNC  # leased within one sync interval
    assert all(at <= probe_at + 0.1 + 2 * SYNC for at, _ in served)  # the verdict, published, closes it
    assert pool.waits == 20
    assert pool.waits_expired == 0
