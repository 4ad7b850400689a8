"""The balancer's one timer: each client's deadline is met on time, and reads change nothing."""

from __future__ import annotations

import threading

import anyio
import attrs
import pytest

import poise_py as poise
from poise_py import CircuitState
from tests.support.clocks import TRIP_AT_ONCE, FakeClock, endpoints, static_lb

# Trio on an autojumping MockClock, asyncio on virtual time: deadlines pass in no real time.
pytestmark = [pytest.mark.anyio, pytest.mark.virtual_asyncio]


def recorder(lb: poise.LoadBalancer) -> list[poise.BalancerEvent]:
    seen: list[poise.BalancerEvent] = []
    lb.add_observer(seen.append)
    return seen


async def strike(lb: poise.LoadBalancer, endpoint_id: str = "a") -> None:
    others = [s.id for s in lb.snapshot().endpoints if s.id != endpoint_id]
    with pytest.raises(OSError):
        async with lb.acquire(exclude=others):
            raise OSError("boom")


# -- each client, on the backend clock ---------------------------------------------------


async def test_the_timer_half_opens_a_circuit_at_its_reopen_time_without_any_acquire() -> None:
    async with static_lb("a", "b", circuit=TRIP_AT_ONCE) as lb:
        seen = recorder(lb)
        await strike(lb)
        (opened,) = [e for e in seen if isinstance(e, poise.CircuitOpened)]
        assert opened.reopen_at is not None
        await anyio.sleep(opened.reopen_at - anyio.current_time() + 1.0)
        (half,) = [e for e in seen if isinstance(e, poise.CircuitHalfOpened)]
        assert half.at == opened.reopen_at
        assert lb.snapshot()["a"].state is CircuitState.HALF_OPEN


async def test_the_timer_starts_each_health_probe_when_it_is_due() -> None:
    started: list[float] = []

    async def probe(endpoint: poise.Endpoint) -> None:
        started.append(anyio.current_time())

    check = poise.HealthCheck(probe=probe, interval=2.0, unhealthy_interval=1.0, timeout=0.5, jitter=0.0)
    async with static_lb("a", health_check=check) as lb:
        start = anyio.current_time()
        await anyio.sleep(6.5)
        snap = lb.snapshot()["a"].health
    assert snap is not None
    # First probe at once; not yet HEALTHY -> 1 s later; HEALTHY after two passes -> every 2 s.
    assert [round(t - start, 9) for t in started] == [0.0, 1.0, 3.0, 5.0]
    assert snap.next_probe_at is not None
    assert round(snap.next_probe_at - start, 9) == 7.0


async def test_the_timer_raises_the_no_eligible_alert_exactly_after_alert_after() -> None:
    async with static_lb("a", circuit=TRIP_AT_ONCE, no_eligible_alert_after=5.0) as lb:
        seen = recorder(lb)
        await strike(lb)
        start = anyio.current_time()
        with pytest.raises(poise.NoEligibleEndpoints):
            lb.acquire()
        await anyio.sleep(4.999)
        assert not [e for e in seen if isinstance(e, poise.NoEligiblePersisting)]
        await anyio.sleep(1.0)
        (alert,) = [e for e in seen if isinstance(e, poise.NoEligiblePersisting)]
        assert alert.since == start
        assert alert.at == start + 5.0  # on time, not at a polling granularity
        await anyio.sleep(30.0)  # the circuit half-opens: capacity is back and nobody was refused
        (cleared,) = [e for e in seen if isinstance(e, poise.NoEligibleCleared)]
        half = next(e for e in seen if isinstance(e, poise.CircuitHalfOpened))
        assert cleared.at == half.at


@attrs.define(eq=False)
class Flaky:
    """A resource whose ``ready()`` fails ``failures`` times, recording when it is asked."""

    failures: int
    asked: list[float] = attrs.field(factory=list)

    async def ready(self) -> bool:
        self.asked.append(anyio.current_time())
        return len(self.asked) > self.failures


async def test_the_timer_checks_a_quarantined_endpoint_again_when_its_cooldown_ends() -> None:
    resources = {"a": Flaky(failures=2), "b": Flaky(failures=0)}
    lb = poise.LoadBalancer(
        poise.StaticDiscovery(endpoints("a", "b")),
        endpoint_factory=lambda endpoint: resources[endpoint.id],
        readiness=poise.Readiness(timeout=1.0, cooldown=3.0),
    )
    async with lb:
        start = anyio.current_time()
        await anyio.sleep(5.0)
        assert lb.snapshot()["a"].eligible_reason is poise.IneligibleReason.QUARANTINED
        await anyio.sleep(2.0)
        assert lb.snapshot()["a"].eligible_reason is None
        assert lb.readiness_failures == 2
    assert [round(t - start, 9) for t in resources["a"].asked] == [0.0, 3.0, 6.0]
    assert [round(t - start, 9) for t in resources["b"].asked] == [0.0]


# -- the injected clock takes the same path ----------------------------------------------


async def test_with_an_injected_clock_the_timer_half_opens_an_open_circuit_without_any_acquire(
    clock: FakeClock,
) -> None:
    async with static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=clock) as lb:
        seen = recorder(lb)
        await strike(lb)
        assert lb.snapshot()["a"].state is CircuitState.OPEN
        clock.advance(30.0)  # the open window has passed on the injected clock...
        await anyio.sleep(30.0)  # ...and the timer's sleep, in backend time, ends
        assert lb.snapshot()["a"].state is CircuitState.HALF_OPEN
        (half,) = [e for e in seen if isinstance(e, poise.CircuitHalfOpened)]
        assert half.at == 1030.0


async def test_with_an_injected_clock_that_stands_still_the_timer_waits_instead_of_spinning() -> None:
    reads = 0

    def still() -> float:
        nonlocal reads
        reads += 1
        return 1000.0

    async with static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=still) as lb:
        await strike(lb)
        await anyio.sleep(31.0)  # the timer's sleep ends, but the injected clock has not moved
        before = reads
        await anyio.sleep(3600.0)
        assert reads == before  # no re-reads: the timer waits for a change
        assert lb.snapshot()["a"].state is CircuitState.OPEN
        async with lb.acquire(exclude=["a"]):
            pass  # a change wakes it; it reads the clock again, and still finds nothing due
        await anyio.wait_all_tasks_blocked()
        assert reads > before
        assert lb.snapshot()["a"].state is CircuitState.OPEN


# -- reads are pure ------------------------------------------------------------------------


async def test_statistics_and_snapshot_fire_no_timer_emit_nothing_and_change_nothing(clock: FakeClock) -> None:
    async with static_lb("a", circuit=TRIP_AT_ONCE, clock=clock, no_eligible_alert_after=5.0) as lb:
        seen = recorder(lb)
        await strike(lb)
        with pytest.raises(poise.NoEligibleEndpoints):
            lb.acquire()
        await anyio.wait_all_tasks_blocked()
        # Everything is due on the injected clock; the timer has not looked yet.
        clock.advance(60.0)
        events = list(seen)
        first_stats, first_snap = lb.statistics(), lb.snapshot()
        second_stats, second_snap = lb.statistics(), lb.snapshot()
        assert seen == events  # no event: no circuit move, no alert
        assert first_stats == second_stats
        assert first_snap == second_snap
        assert first_snap["a"].state is CircuitState.OPEN  # its reopen time passed, but reads fire nothing
        assert first_stats.pool.no_eligible_alerts == 0
        # The timer, not the read, does what is due once it runs.
        await anyio.sleep(60.0)
        assert lb.snapshot()["a"].state is CircuitState.HALF_OPEN
        assert lb.statistics().pool.no_eligible_alerts == 1


async def test_statistics_and_snapshot_can_be_read_from_another_thread() -> None:
    async with static_lb("a", "b") as lb:
        async with lb.acquire():
            pass

        def read() -> tuple[poise.BalancerStatistics, poise.PoolSnapshot, int]:
            return lb.statistics(), lb.snapshot(), threading.get_ident()

        stats, snap, thread = await anyio.to_thread.run_sync(read)
        assert thread != threading.get_ident()
        assert stats.pool.successes == 1
        assert stats.size == 2
        assert {s.id for s in snap.endpoints} == {"a", "b"}


async def test_reads_from_another_thread_survive_membership_churn() -> None:
    send, receive = anyio.create_memory_object_stream[poise.Update](8)
    lb = poise.LoadBalancer(receive)
    stop = threading.Event()
    reads = 0

    def reader() -> None:
        nonlocal reads
        while True:  # at least one read, however soon the churn ends
            stats, snap = lb.statistics(), lb.snapshot()
            assert stats.size >= 0
            assert snap.size >= 0
            reads += 1
            if stop.is_set():
                return

    async with lb, send, receive, anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, reader)
        for revision in range(1, 200):
            await send.send(poise.Snapshot(revision, endpoints(*(f"e{(revision + i) % 60}" for i in range(30)))))
            await anyio.wait_all_tasks_blocked()
        stop.set()
    assert reads >= 1
    assert lb.discovery_revision == 199
