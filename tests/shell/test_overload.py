"""Overload protection on a running balancer: caps, adaptive limits and slow start, with their events."""

from __future__ import annotations

import contextlib

import pytest

import poise_py as poise
from tests.support.clocks import FakeClock

pytestmark = pytest.mark.anyio


async def test_a_capped_balancer_spills_to_another_endpoint_and_sheds_when_every_one_is_full() -> None:
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint("a"), poise.Endpoint("b", metadata={"max_in_flight": 3})]),
        policy=poise.RoundRobin(),
        max_in_flight=1,
        clock=FakeClock(),
    )
    async with lb:
        held = [lb.acquire() for _ in range(4)]  # the round robin turns to "a" again while it is full
        assert sorted(p.endpoint.id for p in held) == ["a", "b", "b", "b"]
        assert poise.DecisionMode.LIMITED in {p.decision.mode for p in held}
        with pytest.raises(poise.Overloaded) as info:
            lb.acquire()
        assert isinstance(info.value, poise.SelectionError)
        assert info.value.at_limit == 2
        assert info.value.retry_after is None  # no adaptive limit has measured a call
        for permit in held:
            permit.succeed()
        async with lb.acquire():
            pass
        assert lb.statistics().pool.selections[poise.DecisionMode.LIMITED] >= 1


async def test_lb_call_raises_overloaded_when_every_endpoint_is_full() -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]), max_in_flight=1, clock=FakeClock())

    async def call(endpoint: poise.Endpoint) -> str:
        return endpoint.id

    async with lb:
        held = lb.acquire()
        with pytest.raises(poise.Overloaded):
            await lb.call(call, attempts=3)
        held.succeed()
        assert await lb.call(call) == "a"


async def test_an_adaptive_limit_reports_its_moves_as_events() -> None:
    clock = FakeClock()
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint("a")]),
        concurrency=poise.AdaptiveConcurrency(poise.AIMD(initial_limit=4)),
        clock=clock,
    )
    events: list[poise.BalancerEvent] = []
    lb.add_observer(events.append)
    async with lb:
        for _ in range(20):
            held = [lb.acquire() for _ in range(4)]
            clock.advance(0.01)
            for permit in held:
                permit.succeed()
    changes = [e for e in events if isinstance(e, poise.ConcurrencyLimitChanged)]
    assert changes
    assert changes[0].endpoint_id == "a"
    assert changes[0].previous == 4
    assert all(c.limit - c.previous >= 2 for c in changes)  # reported per step, not per call


async def test_a_joining_endpoint_ramps_up_and_the_events_say_so() -> None:
    clock = FakeClock()
    publisher = poise.DiscoveryPublisher()
    lb = poise.LoadBalancer(
        publisher.subscribe(),
        slow_start=poise.SlowStart(window=10.0),
        policy=poise.RoundRobin(),
        clock=clock,
    )
    events: list[poise.BalancerEvent] = []
    lb.add_observer(events.append)
    publisher.publish(poise.Snapshot(1, [poise.Endpoint("a"), poise.Endpoint("b")]))
    async with lb:
        await lb.wait_ready()
        publisher.publish(poise.Delta(2, added=[poise.Endpoint("c")]))
        while len(lb.snapshot().endpoints) < 3:
            await _yield()
        picked = {"a": 0, "b": 0, "c": 0}
        for _ in range(900):
            async with lb.acquire() as permit:
                picked[permit.endpoint.id] += 1
        assert picked["c"] < 900 / 3 * 0.3  # a tenth of a third, give or take
        clock.advance(11.0)
        for _ in range(30):
            async with lb.acquire():
                pass
        publisher.close()
    kinds = [(type(e).__name__, getattr(e, "endpoint_id", None)) for e in events]
    assert ("SlowStartBegan", "c") in kinds
    assert ("SlowStartEnded", "c") in kinds
    assert ("SlowStartBegan", "a") not in kinds  # the first members start together


async def test_a_ramp_that_ends_by_an_ejection_or_a_departure_says_so() -> None:
    clock = FakeClock()
    publisher = poise.DiscoveryPublisher()
    lb = poise.LoadBalancer(publisher.subscribe(), slow_start=poise.SlowStart(window=30.0), clock=clock)
    events: list[poise.BalancerEvent] = []
    lb.add_observer(events.append)
    publisher.publish(poise.Snapshot(1, [poise.Endpoint("a")]))
    async with lb:
        await lb.wait_ready()
        publisher.publish(poise.Delta(2, added=[poise.Endpoint("b"), poise.Endpoint("c")]))
        while len(lb.snapshot().endpoints) < 3:
            await _yield()
        lb.acquire(exclude=["a", "c"]).fail(poise.Fault.FATAL)  # b ejected mid-ramp
        assert lb.snapshot()["b"].ramp_progress is None
        publisher.publish(poise.Delta(3, removed=["c"]))  # c leaves mid-ramp
        while len(lb.snapshot().endpoints) > 2:
            await _yield()
        publisher.close()
    ramps = [
        (type(e).__name__, e.endpoint_id) for e in events if isinstance(e, poise.SlowStartBegan | poise.SlowStartEnded)
    ]
    assert sorted(ramps) == [
        ("SlowStartBegan", "b"),
        ("SlowStartBegan", "c"),
        ("SlowStartEnded", "b"),
        ("SlowStartEnded", "c"),
    ]


async def _yield() -> None:
    import anyio

    await anyio.sleep(0)


@pytest.mark.parametrize(
    ("kwargs", "knob"),
    [
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"max_in_flight": True}, "max_in_flight"),
        ({"concurrency": poise.AIMD()}, "concurrency"),
        ({"slow_start": 30}, "slow_start"),
    ],
)
async def test_load_knobs_are_checked_naming_them(kwargs: dict[str, object], knob: str) -> None:
    with pytest.raises(poise.ConfigError) as info:
        poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]), **kwargs)  # type: ignore[arg-type]
    assert info.value.knob == knob


async def test_timeouts_on_several_endpoints_are_the_pools_load_and_never_eject_them() -> None:
    clock = FakeClock()
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint(i) for i in ("a", "b", "c")]), policy=poise.RoundRobin(), clock=clock
    )
    async with lb:
        for _ in range(30):  # every call to a and b times out: queueing across the pool
            with contextlib.suppress(TimeoutError):
                async with lb.acquire() as permit:
                    if permit.endpoint.id != "c":
                        raise TimeoutError
            clock.advance(0.05)
        states = {e.endpoint.id: e.state for e in lb.snapshot().endpoints}
        assert states == dict.fromkeys(("a", "b", "c"), poise.CircuitState.CLOSED)
        # The same failures, not load-shaped, are each endpoint's own: a is ejected.
        for _ in range(15):
            permit = lb.acquire()
            if permit.endpoint.id == "a":
                permit.fail(poise.Fault.SUSPECT)
            else:
                permit.succeed()
        assert {e.endpoint.id: e.state for e in lb.snapshot().endpoints}["a"] is poise.CircuitState.OPEN


async def test_a_permit_reports_a_load_shaped_failure_and_refuses_a_wrong_typed_flag() -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a"), poise.Endpoint("b")]), clock=FakeClock())
    async with lb:
        permit = lb.acquire()
        # The compiled build's signature refuses a non-bool itself (mypyc's TypeError) before
        # the body runs; the pure build's check names the argument.
        refused = TypeError if poise.COMPILED else poise.PermitError
        with pytest.raises(refused, match="overload" if not poise.COMPILED else "bool"):
            permit.fail(poise.Fault.SUSPECT, overload="yes")  # type: ignore[arg-type]
        permit.fail(poise.Fault.SUSPECT, overload=True)
        assert lb.statistics().endpoints[permit.endpoint.id].faults[poise.Fault.SUSPECT] == 1


def three_with_a_ejected_for_load() -> tuple[FakeClock, poise.LoadBalancer, list[poise.BalancerEvent]]:
    """A round robin over a, b, c on a fake clock, its events recorded (enter it, then :func:`eject_a_for_load`)."""
    clock = FakeClock()
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint(i) for i in ("a", "b", "c")]), policy=poise.RoundRobin(), clock=clock
    )
    events: list[poise.BalancerEvent] = []
    lb.add_observer(events.append)
    return clock, lb, events


def eject_a_for_load(lb: poise.LoadBalancer) -> None:
    for _ in range(5):  # a answers 503 alone: its own fault, ejected for 30 s or so
        lb.acquire(exclude={"b", "c"}).fail(poise.Fault.SUSPECT, overload=True)
    assert lb.snapshot()["a"].state is poise.CircuitState.OPEN


async def test_an_endpoint_ejected_for_load_is_restored_when_one_in_rotation_fails_the_same_way() -> None:
    clock, lb, events = three_with_a_ejected_for_load()
    async with lb:
        eject_a_for_load(lb)
        clock.advance(2.0)
        # b times out now: the pool is loaded, and a's 503s were its load, not a's fault.
        lb.acquire(exclude={"a", "c"}).fail(poise.Fault.SUSPECT, overload=True)
        assert lb.snapshot()["a"].state is poise.CircuitState.CLOSED
        (closed,) = [e for e in events if isinstance(e, poise.CircuitClosed)]
        assert (closed.endpoint_id, closed.cause, closed.previous, closed.at) == (
            "a",
            poise.Cause.POOL_LOADED,
            poise.CircuitState.OPEN,
            clock.now,
        )
        async with lb.acquire(exclude={"b", "c"}) as permit:
            assert not permit.probe
        assert not [e for e in events if isinstance(e, poise.SlowStartBegan)]  # never its own: no ramp


async def test_an_endpoint_ejected_for_load_is_recalled_when_the_pool_shows_load_later() -> None:
    clock, lb, events = three_with_a_ejected_for_load()
    async with lb:
        eject_a_for_load(lb)
        clock.advance(12.0)  # past the overload window: no misjudged ejection to undo
        lb.acquire(exclude={"a", "b"}).fail(poise.Fault.SUSPECT, overload=True)  # c's own
        # b times out now: the pool is loaded and needs a's capacity back.
        lb.acquire(exclude={"a", "c"}).fail(poise.Fault.SUSPECT, overload=True)
        assert lb.snapshot()["a"].state is poise.CircuitState.HALF_OPEN
        (half,) = [e for e in events if isinstance(e, poise.CircuitHalfOpened)]
        assert (half.endpoint_id, half.cause, half.at) == ("a", poise.Cause.RECALLED, clock.now)
        async with lb.acquire(exclude={"b", "c"}) as probe:
            assert probe.probe
        assert lb.snapshot()["a"].state is poise.CircuitState.CLOSED
        # Out while the pool was loaded: it ramps back up over overload_window (10 s), with
        # no slow start configured.
        (began,) = [e for e in events if isinstance(e, poise.SlowStartBegan)]
        assert (began.endpoint_id, began.at) == ("a", clock.now)
        clock.advance(5.0)
        assert lb.snapshot()["a"].ramp_progress == pytest.approx(0.5)
        assert lb.snapshot()["b"].ramp_progress is None
