"""Active health and operator control through the balancer, on virtual time on both backends.

Trio runs on an autojumping MockClock, asyncio on ``tests.support.virtual_asyncio``'s loop: probe
intervals and timeouts cost no real time. Probes here are scripted: each call waits until
the test answers it, so every interleaving (a probe in flight while an operator acts, a
probe that never answers) is set up exactly.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import poise_py as poise
from poise_py import AdminStatus, CircuitState, Fault, HealthStatus, IneligibleReason
from tests.support.clocks import TRIP_AT_ONCE, endpoints

pytestmark = [pytest.mark.anyio, pytest.mark.virtual_asyncio]


class Call:
    """One probe call, waiting for the test's answer."""

    def __init__(self, endpoint_id: str) -> None:
        self.endpoint_id = endpoint_id
        self.started = anyio.current_time()
        self.healthy = True
        self._answered = anyio.Event()

    def answer(self, *, healthy: bool) -> None:
        self.healthy = healthy
        self._answered.set()

    async def wait(self) -> None:
        await self._answered.wait()


class ScriptedProbe:
    """A probe whose every call the test answers (or leaves hanging into the timeout)."""

    def __init__(self) -> None:
        self.pending: list[Call] = []
        self.probed: list[str] = []
        self._arrived: anyio.Event | None = None

    async def __call__(self, endpoint: poise.Endpoint) -> None:
        call = Call(endpoint.id)
        self.probed.append(endpoint.id)
        self.pending.append(call)
        if self._arrived is not None:
            self._arrived.set()
        await call.wait()
        if not call.healthy:
            raise ConnectionRefusedError(f"{endpoint.id} is down")

    async def next_call(self, endpoint_id: str | None = None) -> Call:
        """The next unanswered call (of ``endpoint_id``); virtual time runs until one starts."""
        while True:
            for call in self.pending:
                if endpoint_id is None or call.endpoint_id == endpoint_id:
                    self.pending.remove(call)
                    return call
            self._arrived = anyio.Event()
            await self._arrived.wait()

    async def answer(self, endpoint_id: str, *, healthy: bool) -> Call:
        """Answer the next call of ``endpoint_id`` and let the balancer take the result in."""
        call = await self.next_call(endpoint_id)
        call.answer(healthy=healthy)
        await anyio.wait_all_tasks_blocked()
        return call


def health_lb(
    probe: ScriptedProbe, *ids: str, circuit: poise.CircuitPolicy | None = None, **knobs: Any
) -> poise.LoadBalancer:
    knobs.setdefault("jitter", 0.0)
    return poise.LoadBalancer(
        poise.StaticDiscovery(endpoints(*ids)),
        policy=poise.RoundRobin(),
        circuit=circuit,
        health_check=poise.HealthCheck(probe=probe, **knobs),
        seed=1,
    )


def health(lb: poise.LoadBalancer, endpoint_id: str) -> poise.HealthSnapshot:
    view = lb.snapshot()[endpoint_id].health
    assert view is not None
    return view


def refusals(lb: poise.LoadBalancer) -> dict[IneligibleReason, int]:
    with pytest.raises(poise.NoEligibleEndpoints) as info:
        lb.acquire()
    return {r: n for r, n in info.value.reasons.items() if n}


# -- the late-probe race ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("forced", "late_answer_healthy", "expected"),
    [
        (AdminStatus.FORCED_HEALTHY, False, HealthStatus.HEALTHY),
        (AdminStatus.FORCED_UNHEALTHY, True, HealthStatus.UNHEALTHY),
    ],
)
async def test_a_probe_in_flight_when_a_status_is_forced_cannot_overwrite_it(
    forced: AdminStatus, late_answer_healthy: bool, expected: HealthStatus
) -> None:
    probe = ScriptedProbe()
    # Thresholds of one: the late result alone would flip the classification if it counted.
    async with health_lb(probe, "a", healthy_threshold=1, unhealthy_threshold=1, timeout=5.0) as lb:
        await probe.answer("a", healthy=not late_answer_healthy)
        slow = await probe.next_call("a")  # in flight
        generation = health(lb, "a").generation
        lb.set_status("a", forced)
        assert health(lb, "a").generation == generation + 1
        slow.answer(healthy=late_answer_healthy)  # the late result
        await anyio.wait_all_tasks_blocked()
        view = health(lb, "a")
        assert view.status is expected
        assert view.stale == 1
        assert view.probes == 1  # only the first, accepted result
        assert lb.snapshot()["a"].admin is forced
        await anyio.sleep(300)
        assert probe.pending == []  # nothing probes a forced endpoint
        assert not health(lb, "a").probing
        if expected is HealthStatus.HEALTHY:
            async with lb.acquire() as permit:
                assert permit.endpoint.id == "a"
        else:
            assert refusals(lb) == {IneligibleReason.UNHEALTHY: 1}


async def test_a_late_probe_that_times_out_after_a_forced_status_is_stale_too() -> None:
    probe = ScriptedProbe()
    async with health_lb(probe, "a", unhealthy_threshold=1, timeout=2.0) as lb:
        await probe.next_call("a")  # never answered
        lb.set_status("a", AdminStatus.FORCED_HEALTHY)
        await anyio.sleep(10)  # the timeout fires for a probe of the old generation
        view = health(lb, "a")
        assert (view.status, view.stale, view.timeouts) == (HealthStatus.HEALTHY, 1, 0)


async def test_auto_returns_control_to_fresh_probes() -> None:
    probe = ScriptedProbe()
    async with health_lb(probe, "a", healthy_threshold=1, unhealthy_threshold=1) as lb:
        await probe.answer("a", healthy=True)
        lb.set_status("a", AdminStatus.FORCED_UNHEALTHY)
        assert refusals(lb) == {IneligibleReason.UNHEALTHY: 1}
        lb.set_status("a", AdminStatus.AUTO)
        at = anyio.current_time()
        view = health(lb, "a")
        assert (view.status, view.generation) == (HealthStatus.UNKNOWN, 2)
        async with lb.acquire():  # UNKNOWN is admitted by default
            pass
        call = await probe.next_call("a")
        assert call.started == at  # jitter 0: the fresh probe is due at once
        call.answer(healthy=False)
        await anyio.wait_all_tasks_blocked()
        assert refusals(lb) == {IneligibleReason.UNHEALTHY: 1}


# -- thresholds and timing -------------------------------------------------------------


async def test_two_passes_admit_and_three_failures_eject_by_default() -> None:
    probe = ScriptedProbe()
    async with health_lb(probe, "a", admit_unknown=False) as lb:
        assert refusals(lb) == {IneligibleReason.UNCLASSIFIED: 1}
        await probe.answer("a", healthy=True)
        assert refusals(lb) == {IneligibleReason.UNCLASSIFIED: 1}
        await probe.answer("a", healthy=True)
        assert health(lb, "a").status is HealthStatus.HEALTHY
        async with lb.acquire():
            pass
        for _ in range(2):
            await probe.answer("a", healthy=False)
            async with lb.acquire():  # two failures are not yet three
                pass
        await probe.answer("a", healthy=False)
        assert health(lb, "a").status is HealthStatus.UNHEALTHY
        assert refusals(lb) == {IneligibleReason.UNHEALTHY: 1}
        await probe.answer("a", healthy=True)
        assert refusals(lb) == {IneligibleReason.UNHEALTHY: 1}
        await probe.answer("a", healthy=True)
        async with lb.acquire():
            pass


async def test_an_unanswered_probe_times_out_as_a_failure() -> None:
    probe = ScriptedProbe()
    async with health_lb(probe, "a", "b", unhealthy_threshold=1, timeout=2.0) as lb:
        await probe.answer("b", healthy=True)
        call = await probe.next_call("a")  # left hanging
        await anyio.sleep(3.0)
        view = health(lb, "a")
        assert (view.status, view.timeouts, view.failures) == (HealthStatus.UNHEALTHY, 1, 1)
        assert anyio.current_time() >= call.started + 2.0
        for _ in range(4):
            async with lb.acquire() as permit:
                assert permit.endpoint.id == "b"


async def test_an_unhealthy_endpoint_is_probed_at_the_faster_interval() -> None:
    probe = ScriptedProbe()
    async with health_lb(probe, "a", interval=10.0, unhealthy_interval=1.0, healthy_threshold=1, unhealthy_threshold=1):
        first = await probe.answer("a", healthy=True)
        second = await probe.answer("a", healthy=False)
        assert second.started - first.started == pytest.approx(10.0)
        third = await probe.answer("a", healthy=False)
        assert third.started - second.started == pytest.approx(1.0)


async def test_a_probe_cancelled_by_shutdown_invents_no_result() -> None:
    probe = ScriptedProbe()
    lb = health_lb(probe, "a", unhealthy_threshold=1)
    async with lb:
        await probe.next_call("a")  # in flight when the balancer closes
    view = health(lb, "a")
    assert (view.status, view.probes, view.failures, view.cancelled) == (HealthStatus.UNKNOWN, 0, 0, 1)


async def test_a_reopened_balancer_resumes_probing_where_operators_left_it() -> None:
    probe = ScriptedProbe()
    lb = health_lb(probe, "a", unhealthy_threshold=1)
    async with lb:
        await probe.next_call("a")  # in flight when the balancer closes: cancelled
    lb.set_status("a", AdminStatus.FORCED_UNHEALTHY)  # between runs: nothing to wake
    lb.set_status("a", AdminStatus.AUTO)
    async with lb:
        await probe.answer("a", healthy=False)
        view = health(lb, "a")
        assert (view.status, view.generation, view.cancelled) == (HealthStatus.UNHEALTHY, 2, 1)


# -- active and passive together -------------------------------------------------------


async def eject(lb: poise.LoadBalancer) -> None:
    async with lb.acquire() as permit:
        permit.fail(Fault.FATAL)


async def test_a_passing_probe_unejects_a_passively_ejected_endpoint() -> None:
    probe = ScriptedProbe()
    async with health_lb(probe, "a", circuit=TRIP_AT_ONCE, healthy_threshold=1, interval=10.0) as lb:
        await probe.answer("a", healthy=True)
        await eject(lb)
        opened = lb.snapshot()["a"]
        assert opened.state is CircuitState.OPEN
        call = await probe.answer("a", healthy=True)  # long before the 30 s window ends
        closed = lb.snapshot()["a"]
        assert closed.state is CircuitState.CLOSED
        assert closed.epoch == opened.epoch + 1
        assert closed.escalation_level == opened.escalation_level  # escalation is kept
        assert call.started < opened.reopen_at  # type: ignore[operator]
        async with lb.acquire() as permit:
            assert permit.epoch == closed.epoch


async def test_uneject_off_leaves_the_breaker_in_charge() -> None:
    probe = ScriptedProbe()
    async with health_lb(probe, "a", circuit=TRIP_AT_ONCE, healthy_threshold=1, uneject=False) as lb:
        await probe.answer("a", healthy=True)
        await eject(lb)
        await probe.answer("a", healthy=True)
        assert lb.snapshot()["a"].state is CircuitState.OPEN
        assert refusals(lb) == {IneligibleReason.OPEN: 1}


async def test_a_probe_started_before_the_ejection_does_not_uneject() -> None:
    probe = ScriptedProbe()
    async with health_lb(probe, "a", circuit=TRIP_AT_ONCE, healthy_threshold=1, timeout=5.0) as lb:
        await probe.answer("a", healthy=True)
        call = await probe.next_call("a")
        await eject(lb)
        call.answer(healthy=True)  # evidence from before the circuit opened
        await anyio.wait_all_tasks_blocked()
        assert lb.snapshot()["a"].state is CircuitState.OPEN
        await probe.answer("a", healthy=True)  # a probe of the ejected epoch does
        assert lb.snapshot()["a"].state is CircuitState.CLOSED


async def test_a_permit_from_before_an_uneject_is_stale() -> None:
    probe = ScriptedProbe()
    policy = poise.CircuitPolicy(
        consecutive_failures=1,
        minimum_volume=1,
        max_ejection_percent=1.0,
        escalation=poise.Escalation(base=30.0, jitter=0.0),
    )
    async with health_lb(probe, "a", circuit=policy, healthy_threshold=1) as lb:
        await probe.answer("a", healthy=True)
        old = lb.acquire()
        await eject(lb)
        await probe.answer("a", healthy=True)
        old.fail(Fault.FATAL)  # from the epoch before the ejection: dropped
        snap = lb.snapshot()["a"]
        assert snap.state is CircuitState.CLOSED
        assert snap.counters.stale == 1


async def test_an_active_check_never_clears_a_permanent_block_but_an_operator_does() -> None:
    probe = ScriptedProbe()
    async with health_lb(probe, "a", healthy_threshold=1) as lb:
        await probe.answer("a", healthy=True)
        async with lb.acquire() as permit:
            permit.fail(Fault.PERMANENT)  # a revoked key: 401
        for _ in range(3):
            await probe.answer("a", healthy=True)
        assert lb.snapshot()["a"].state is CircuitState.BLOCKED
        assert refusals(lb) == {IneligibleReason.PERMANENT: 1}
        lb.set_status("a", AdminStatus.FORCED_HEALTHY)  # forcing health is not clearing the block
        assert refusals(lb) == {IneligibleReason.PERMANENT: 1}
        lb.set_status("a", AdminStatus.AUTO)
        assert lb.snapshot()["a"].state is CircuitState.CLOSED
        async with lb.acquire():
            pass


async def test_forced_healthy_overrides_active_health_but_not_the_circuit() -> None:
    probe = ScriptedProbe()
    async with health_lb(probe, "a", circuit=TRIP_AT_ONCE, unhealthy_threshold=1) as lb:
        await probe.answer("a", healthy=False)
        assert refusals(lb) == {IneligibleReason.UNHEALTHY: 1}
        lb.set_status("a", AdminStatus.FORCED_HEALTHY)
        await eject(lb)
        assert refusals(lb) == {IneligibleReason.OPEN: 1}


async def test_a_health_check_that_could_outlast_the_breaker_is_refused() -> None:
    probe = ScriptedProbe()
    slow = poise.HealthCheck(probe=probe, interval=120.0, unhealthy_interval=60.0)
    with pytest.raises(poise.ConfigError) as info:
        poise.LoadBalancer(poise.StaticDiscovery(endpoints("a")), health_check=slow)
    assert info.value.knob == "health_check"
    patient = poise.CircuitPolicy(escalation=poise.Escalation(base=300.0, maximum=600.0, jitter=0.0))
    poise.LoadBalancer(poise.StaticDiscovery(endpoints("a")), circuit=patient, health_check=slow)


async def test_discovery_starts_and_stops_probing_endpoints() -> None:
    probe = ScriptedProbe()
    send, receive = anyio.create_memory_object_stream[poise.Update](10)
    lb = poise.LoadBalancer(receive, health_check=poise.HealthCheck(probe=probe, jitter=0.0, unhealthy_threshold=1))
    async with lb, send, receive:
        await send.send(poise.Snapshot(1, endpoints("a", "b")))
        late = await probe.next_call("a")
        await probe.answer("b", healthy=True)
        await send.send(poise.Delta(2, removed=["a"]))
        await send.send(poise.Delta(3, added=endpoints("a")))
        await anyio.wait_all_tasks_blocked()
        late.answer(healthy=False)  # the result of the endpoint that left
        await anyio.wait_all_tasks_blocked()
        view = health(lb, "a")
        assert (view.status, view.probes) == (HealthStatus.UNKNOWN, 0)
        await probe.answer("a", healthy=False)  # the re-added endpoint is probed afresh
        assert health(lb, "a").status is HealthStatus.UNHEALTHY


async def test_without_a_health_check_the_snapshot_has_no_health_view() -> None:
    async with poise.LoadBalancer(poise.StaticDiscovery(endpoints("a"))) as lb:
        assert lb.snapshot()["a"].health is None


# -- draining --------------------------------------------------------------------------


async def hold(lb: poise.LoadBalancer, endpoint_id: str, release: anyio.Event, others: tuple[str, ...]) -> None:
    async with lb.acquire(exclude=others) as permit:
        assert permit.endpoint.id == endpoint_id
        await release.wait()


@pytest.mark.parametrize("with_health", [False, True])
async def test_draining_stops_new_permits_and_drained_returns_when_the_last_ends(with_health: bool) -> None:
    probe = ScriptedProbe()
    lb = (
        health_lb(probe, "a", "b")
        if with_health
        else poise.LoadBalancer(poise.StaticDiscovery(endpoints("a", "b")), policy=poise.RoundRobin())
    )
    drained_at: list[int] = []
    async with lb, anyio.create_task_group() as tg:
        releases = [anyio.Event(), anyio.Event()]
        for release in releases:
            tg.start_soon(hold, lb, "a", release, ("b",))
        await anyio.wait_all_tasks_blocked()
        assert lb.snapshot()["a"].inflight == 2
        lb.set_status("a", AdminStatus.DRAINING)
        for _ in range(4):
            async with lb.acquire() as permit:
                assert permit.endpoint.id == "b"
        with pytest.raises(poise.NoEligibleEndpoints) as info:
            lb.acquire(exclude=("b",))
        assert info.value.reasons[IneligibleReason.DRAINING] == 1

        async def wait_drained() -> None:
            await lb.drained("a")
            drained_at.append(lb.snapshot()["a"].inflight)

        tg.start_soon(wait_drained)
        await anyio.wait_all_tasks_blocked()
        releases[0].set()
        await anyio.wait_all_tasks_blocked()
        assert drained_at == []
        releases[1].set()
        await anyio.wait_all_tasks_blocked()
        assert drained_at == [0]
        assert lb.snapshot()["a"].counters.successes == 2  # in-flight results still count
        await lb.drained("a")  # nothing in flight: returns at once


async def test_drained_refuses_an_endpoint_that_takes_new_permits() -> None:
    async with poise.LoadBalancer(poise.StaticDiscovery(endpoints("a"))) as lb:
        permit = lb.acquire()
        with pytest.raises(poise.NotDraining):
            await lb.drained("a")
        permit.cancel()
        with pytest.raises(poise.NotDraining):  # idle, but still in service: draining was never asked
            await lb.drained("a")
        with pytest.raises(KeyError):
            await lb.drained("nope")


async def test_leaving_draining_wakes_a_waiter_with_not_draining() -> None:
    async with poise.LoadBalancer(poise.StaticDiscovery(endpoints("a"))) as lb:
        permit = lb.acquire()
        lb.set_status("a", AdminStatus.DISABLED)
        errors: list[BaseException] = []

        async def wait_drained() -> None:
            try:
                await lb.drained("a")
            except poise.NotDraining as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_drained)
            await anyio.wait_all_tasks_blocked()
            lb.set_status("a", AdminStatus.AUTO)
        assert len(errors) == 1
        permit.succeed()


async def test_drained_returns_when_a_draining_endpoint_leaves_discovery_and_its_permit_ends() -> None:
    send, receive = anyio.create_memory_object_stream[poise.Update](10)
    lb = poise.LoadBalancer(receive)
    async with lb, send, receive:
        await send.send(poise.Snapshot(1, endpoints("a", "b")))
        await anyio.wait_all_tasks_blocked()
        permit = lb.acquire(exclude=("b",))
        lb.set_status("a", AdminStatus.DRAINING)
        done: list[bool] = []

        async def wait_drained() -> None:
            await lb.drained("a")
            done.append(True)

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_drained)
            await send.send(poise.Delta(2, removed=["a"]))
            await anyio.wait_all_tasks_blocked()
            assert done == []
            permit.fail()
        assert done == [True]


async def test_disabled_endpoints_get_neither_permits_nor_probes() -> None:
    probe = ScriptedProbe()
    async with health_lb(probe, "a", "b") as lb:
        lb.set_status("a", AdminStatus.DISABLED)  # before its first probe starts
        for _ in range(4):
            async with lb.acquire() as permit:
                assert permit.endpoint.id == "b"
        await anyio.sleep(100)
        assert set(probe.probed) == {"b"}
        assert not health(lb, "a").probing
