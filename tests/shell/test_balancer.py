"""The async shell on Trio (MockClock) and asyncio: permits, exits, probes, timers."""

from __future__ import annotations

import gc

import anyio
import attrs
import pytest

import poise_py as poise
from poise_py import CircuitState, Fault, IneligibleReason
from tests.support.clocks import FakeClock, endpoints, static_lb

pytestmark = pytest.mark.anyio

FAST_TRIP = poise.CircuitPolicy(
    consecutive_failures=1, minimum_volume=1, escalation=poise.Escalation(base=30.0, jitter=0.0)
)


async def fail_once(lb: poise.LoadBalancer, exc: Exception | None = None) -> None:
    with pytest.raises(type(exc) if exc else OSError):
        async with lb.acquire():
            raise exc or OSError("boom")


async def test_normal_exit_reports_success() -> None:
    async with static_lb("a") as lb:
        async with lb.acquire() as permit:
            assert permit.endpoint.id == "a"
            assert not permit.probe
            assert permit.epoch == 0
            assert permit.decision == poise.Decision(poise.DecisionMode.HEALTHY, 0)
        assert permit.done
        snap = lb.snapshot()["a"]
        assert snap.counters.successes == 1
        assert snap.inflight == 0


async def test_an_exception_is_classified_and_always_propagates() -> None:
    async with static_lb("a") as lb:
        await fail_once(lb, ConnectionResetError("reset"))
        await fail_once(lb, ValueError("caller bug"))
        faults = lb.snapshot()["a"].counters.faults
        assert faults[Fault.SUSPECT] == 1
        assert faults[Fault.CALLER] == 1


async def test_cancellation_is_its_own_outcome_not_a_fault() -> None:
    async with static_lb("a", circuit=FAST_TRIP) as lb:
        with anyio.move_on_after(1):
            async with lb.acquire():
                await anyio.sleep_forever()
        snap = lb.snapshot()["a"]
        assert snap.counters.cancellations == 1
        assert sum(snap.counters.faults.values()) == 0
        assert snap.state is CircuitState.CLOSED


async def test_an_explicit_report_inside_the_block_wins_over_the_exit() -> None:
    async with static_lb("a") as lb:
        with pytest.raises(RuntimeError):
            async with lb.acquire() as permit:
                permit.succeed()
                raise RuntimeError("after the report")
        async with lb.acquire() as permit:
            permit.fail(Fault.TRANSIENT)
        counters = lb.snapshot()["a"].counters
        assert counters.successes == 1
        assert counters.faults[Fault.TRANSIENT] == 1
        assert counters.faults[Fault.SUSPECT] == 0


async def test_reporting_twice_raises_permit_error() -> None:
    async with static_lb("a") as lb:
        async with lb.acquire() as permit:
            permit.succeed()
            with pytest.raises(poise.PermitError):
                permit.fail()
        with pytest.raises(poise.PermitError):
            permit.cancel()


async def test_fail_with_a_bad_fault_or_retry_after_raises_permit_error_and_keeps_the_permit() -> None:
    async with static_lb("a") as lb:
        async with lb.acquire() as permit:
            with pytest.raises(poise.PermitError):
                permit.fail("suspect")  # type: ignore[arg-type]
            with pytest.raises(poise.PermitError):
                permit.fail(Fault.TRANSIENT, retry_after=float("nan"))
            assert not permit.done
        assert lb.snapshot()["a"].counters.successes == 1


async def test_exception_group_of_only_cancellations_counts_as_cancellation() -> None:
    async with static_lb("a") as lb:
        with pytest.raises(ExceptionGroup):
            async with lb.acquire():
                raise ExceptionGroup("two", [ValueError("x"), ConnectionError("y")])
        # the first leaf decides
        assert lb.snapshot()["a"].counters.faults[Fault.CALLER] == 1


async def test_acquire_outside_the_running_balancer_raises_poise_error() -> None:
    lb = static_lb("a")
    with pytest.raises(poise.NotRunning):
        lb.acquire()
    async with lb:
        pass
    with pytest.raises(poise.PoiseError):
        lb.acquire()


async def test_a_running_balancer_cannot_be_entered_twice() -> None:
    async with static_lb("a") as lb:
        with pytest.raises(poise.AlreadyRunning):
            async with lb:
                pass


async def test_empty_static_pool_raises_empty_pool_not_no_eligible() -> None:
    async with poise.LoadBalancer(poise.StaticDiscovery([])) as lb:
        with pytest.raises(poise.EmptyPool):
            lb.acquire()


async def test_no_eligible_endpoints_counts_every_reason(clock: FakeClock) -> None:
    policy = attrs.evolve(FAST_TRIP, max_ejection_percent=1.0)
    async with static_lb("a", "b", "c", "d", circuit=policy, clock=clock) as lb:
        for target in ("a", "b"):
            with pytest.raises(OSError):
                async with lb.acquire(exclude=[i for i in "abcd" if i != target]):
                    raise OSError
        lb.set_status("c", poise.AdminStatus.DRAINING)
        with pytest.raises(poise.NoEligibleEndpoints) as info:
            lb.acquire(exclude=["d"])
        err = info.value
        assert err.total == 4
        assert err.reasons[IneligibleReason.OPEN] == 2
        assert err.reasons[IneligibleReason.DRAINING] == 1
        assert err.reasons[IneligibleReason.EXCLUDED] == 1
        assert isinstance(err, poise.SelectionError)


async def test_exclude_never_returns_an_excluded_endpoint() -> None:
    async with static_lb(*"abcdefgh", policy=poise.RoundRobin()) as lb:
        for _ in range(200):
            permit = lb.acquire(exclude=("a", "b", "c", "d", "e", "f", "g"))
            assert permit.endpoint.id == "h"
            permit.cancel()


async def test_a_thousand_concurrent_acquires_get_exactly_one_probe(clock: FakeClock) -> None:
    async with static_lb("solo", circuit=FAST_TRIP, clock=clock) as lb:
        await fail_once(lb)
        assert lb.snapshot()["solo"].state is CircuitState.OPEN
        clock.advance(30.0)
        probes: list[poise.Permit] = []
        refused: list[poise.NoEligibleEndpoints] = []
        release = anyio.Event()

        async def caller() -> None:
            try:
                async with lb.acquire() as permit:
                    probes.append(permit)
                    await release.wait()
            except poise.NoEligibleEndpoints as exc:
                refused.append(exc)

        async with anyio.create_task_group() as tg:
            for _ in range(1000):
                tg.start_soon(caller)
            await anyio.wait_all_tasks_blocked()
            release.set()
        assert len(probes) == 1
        assert probes[0].probe
        assert len(refused) == 999
        assert all(e.reasons[IneligibleReason.PROBES_TAKEN] == 1 for e in refused)
        assert lb.snapshot()["solo"].state is CircuitState.CLOSED


async def test_late_result_issued_before_open_half_open_closed_is_dropped(clock: FakeClock) -> None:
    async with static_lb("a", circuit=FAST_TRIP, clock=clock) as lb:
        slow = lb.acquire()  # epoch 0, still in flight through the whole cycle
        await fail_once(lb)  # -> OPEN
        clock.advance(30.0)
        async with lb.acquire() as probe:  # -> HALF_OPEN, probe succeeds -> CLOSED
            assert probe.probe
        snap = lb.snapshot()["a"]
        assert snap.state is CircuitState.CLOSED
        assert snap.epoch == 3
        slow.fail(Fault.FATAL)  # would eject at once if it counted
        snap = lb.snapshot()["a"]
        assert snap.state is CircuitState.CLOSED
        assert snap.epoch == 3
        assert snap.counters.stale == 1


async def test_a_garbage_collected_permit_is_a_cancellation_that_frees_its_probe_slot(
    clock: FakeClock,
) -> None:
    async with static_lb("a", circuit=FAST_TRIP, clock=clock) as lb:
        await fail_once(lb)
        clock.advance(30.0)
        permit = lb.acquire()
        assert permit.probe
        with pytest.raises(poise.NoEligibleEndpoints):
            lb.acquire()
        with pytest.warns(ResourceWarning, match="unreported permit"):  # dropped on purpose
            del permit
        gc.collect()
        # Reads change nothing: the balancer's next operation releases the dropped permit.
        again = lb.acquire()
        assert again.probe
        snap = lb.snapshot()["a"]
        assert snap.counters.cancellations == 1
        assert snap.state is CircuitState.HALF_OPEN
        assert snap.inflight == 1  # the new probe alone: the dropped one's slot was freed
        again.cancel()
        assert lb.snapshot()["a"].inflight == 0


@pytest.mark.backends("trio")
async def test_mock_clock_drives_the_open_window_without_real_sleeping() -> None:
    async with static_lb("a", "b", circuit=FAST_TRIP) as lb:
        with pytest.raises(OSError):
            async with lb.acquire(exclude=["b"]):
                raise OSError
        assert lb.snapshot()["a"].state is CircuitState.OPEN
        await anyio.sleep(29.0)
        assert lb.snapshot()["a"].state is CircuitState.OPEN
        await anyio.sleep(1.0)
        await anyio.wait_all_tasks_blocked()  # the timer, due at this very instant, runs first
        assert lb.snapshot()["a"].state is CircuitState.HALF_OPEN


async def test_max_ejection_percent_keeps_part_of_the_pool_when_every_endpoint_fails(
    clock: FakeClock,
) -> None:
    async with static_lb(*"abcd", circuit=FAST_TRIP, clock=clock) as lb:
        for _ in range(40):
            try:
                async with lb.acquire():
                    raise OSError
            except OSError:
                pass
        snap = lb.snapshot()
        assert snap.ejected == 2  # 50% of 4
        assert snap.available == 2
        assert snap.suppressed_ejections > 0


async def test_snapshot_is_frozen() -> None:
    async with static_lb("a") as lb:
        snap = lb.snapshot()
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            snap.available = 3  # type: ignore[misc]
        with pytest.raises(TypeError):
            snap["a"].counters.faults[Fault.SUSPECT] = 1  # type: ignore[index]


async def test_survivors_of_a_static_reentry_keep_their_circuit(clock: FakeClock) -> None:
    lb = static_lb("a", "b", circuit=FAST_TRIP, clock=clock)
    async with lb:
        with pytest.raises(OSError):
            async with lb.acquire(exclude=["b"]):
                raise OSError
    async with lb:
        assert lb.snapshot()["a"].state is CircuitState.OPEN


def test_invalid_balancer_arguments_raise_config_error() -> None:
    with pytest.raises(poise.ConfigError) as info:
        poise.LoadBalancer([])  # type: ignore[arg-type]
    assert info.value.knob == "discovery"
    with pytest.raises(poise.ConfigError):
        poise.LoadBalancer(poise.StaticDiscovery([]), circuit={})  # type: ignore[arg-type]
    with pytest.raises(poise.ConfigError):
        poise.LoadBalancer(poise.StaticDiscovery([]), policy=object())  # type: ignore[arg-type]


def test_duplicate_ids_in_a_static_list_are_rejected() -> None:
    with pytest.raises(poise.DuplicateIdentity):
        anyio.run(_enter, poise.LoadBalancer(poise.StaticDiscovery(endpoints("a", "a"))))


async def _enter(lb: poise.LoadBalancer) -> None:
    async with lb:
        pass
