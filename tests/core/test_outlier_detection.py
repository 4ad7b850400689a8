"""Pool-relative outlier detection: success-rate ejection and failure-rate minimum hosts."""

from __future__ import annotations

import math

import attrs
import pytest
import trio
import trio.testing

import poise_py as poise
from poise_py import CircuitState, Fault
from poise_py._core._circuit import Cause
from poise_py._core._outlier import success_rate_outliers
from poise_py._core._pool import Pool
from tests.support.clocks import FakeClock, static_lb
from tests.support.routing import make_pool, tiered

SR = poise.SuccessRateEjection(stdev_factor=1.9, minimum_hosts=5, request_volume=10, interval=10.0)


def detecting(success_rate: poise.SuccessRateEjection = SR, percent: float = 0.5) -> poise.CircuitPolicy:
    """Only pool-relative detection trips: the per-endpoint conditions are off."""
    return poise.CircuitPolicy(
        consecutive_failures=None,
        consecutive_transient_failures=None,
        failure_rate=None,
        success_rate=success_rate,
        max_ejection_percent=percent,
        escalation=poise.Escalation(base=30.0, maximum=300.0, jitter=0.0),
    )


def traffic(pool: Pool, failing: dict[str, float], calls: int, now: float) -> None:
    """``calls`` calls to each endpoint; endpoint ``i`` fails a ``failing[i]`` share of them."""
    for endpoint_id in list(pool.members):
        others = [i for i in pool.members if i != endpoint_id]
        share = failing.get(endpoint_id, 0.0)
        for n in range(calls):
            state, ticket, _, _ = pool.select(now, exclude=others)
            if n < round(share * calls):
                pool.complete(state, ticket, Fault.SUSPECT, now)
            else:
                pool.complete(state, ticket, None, now)


def test_outliers_are_below_mean_minus_factor_stdev_worst_first() -> None:
    rates = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0, "e": 0.5}
    samples = [(k, 100, round((1 - r) * 100)) for k, r in rates.items()]
    mean = 0.9
    stdev = math.sqrt((4 * 0.1**2 + 0.4**2) / 5)
    assert 0.5 < mean - 1.9 * stdev < 1.0
    assert success_rate_outliers(SR, samples) == ["e"]
    samples.append(("f", 100, 60))
    assert success_rate_outliers(SR, samples) == []  # two bad ones widen the spread
    assert success_rate_outliers(attrs.evolve(SR, stdev_factor=1.0), samples) == ["f", "e"]


def test_too_few_hosts_with_the_request_volume_judge_nobody() -> None:
    samples = [("a", 100, 0), ("b", 100, 0), ("c", 100, 0), ("d", 9, 0), ("e", 100, 90)]
    assert success_rate_outliers(SR, samples) == []  # d lacks the volume: 4 hosts < 5


def test_equal_rates_have_no_outlier() -> None:
    assert success_rate_outliers(SR, [(i, 50, 5) for i in range(8)]) == []


@pytest.mark.parametrize(
    ("knobs", "knob"),
    [
        ({"stdev_factor": 0}, "SuccessRateEjection.stdev_factor"),
        ({"stdev_factor": math.nan}, "SuccessRateEjection.stdev_factor"),
        ({"minimum_hosts": 1}, "SuccessRateEjection.minimum_hosts"),
        ({"request_volume": 0}, "SuccessRateEjection.request_volume"),
        ({"interval": 0}, "SuccessRateEjection.interval"),
        ({"interval": math.inf}, "SuccessRateEjection.interval"),
    ],
)
def test_bad_success_rate_knobs_are_config_errors(knobs: dict[str, float], knob: str) -> None:
    with pytest.raises(poise.ConfigError) as info:
        poise.SuccessRateEjection(**knobs)  # type: ignore[arg-type]
    assert info.value.knob == knob


def test_minimum_hosts_needs_a_failure_rate_and_success_rate_its_type() -> None:
    with pytest.raises(poise.ConfigError) as info:
        poise.CircuitPolicy(minimum_hosts=5)
    assert info.value.knob == "CircuitPolicy.minimum_hosts"
    with pytest.raises(poise.ConfigError) as info:
        poise.CircuitPolicy(success_rate=0.9)  # type: ignore[arg-type]
    assert info.value.knob == "CircuitPolicy.success_rate"


def test_the_pool_ejects_a_success_rate_outlier_at_its_evaluation_deadline() -> None:
    pool = make_pool(eps=tiered(6), circuit=detecting())
    assert pool.next_deadline() == 10.0  # the first evaluation: interval after the first endpoints
    traffic(pool, {"t0-5": 0.5}, 20, now=5.0)
    pool.handle_timer(9.9)
    assert pool.members["t0-5"].circuit.state is CircuitState.CLOSED
    pool.handle_timer(10.0)
    c = pool.members["t0-5"].circuit
    assert c.state is CircuitState.OPEN
    assert c.reopen_at == 40.0  # the escalation's first window
    assert all(pool.members[f"t0-{i}"].circuit.state is CircuitState.CLOSED for i in range(5))
    assert pool.next_deadline() == 20.0  # the next evaluation


def test_each_evaluation_judges_only_its_own_interval() -> None:
    pool = make_pool(eps=tiered(6), circuit=detecting())
    traffic(pool, {"t0-5": 0.5}, 20, now=5.0)
    pool.handle_timer(10.0)
    assert pool.members["t0-5"].circuit.state is CircuitState.OPEN
    pool.reset_circuit(pool.members["t0-5"], 11.0)
    traffic(pool, {}, 20, now=15.0)  # a clean interval: nobody is an outlier
    pool.handle_timer(20.0)
    assert pool.ejected_count == 0


def test_a_success_rate_ejection_recovers_through_its_half_open_probe() -> None:
    pool = make_pool(eps=tiered(6), circuit=detecting())
    traffic(pool, {"t0-5": 0.5}, 20, now=5.0)
    pool.handle_timer(10.0)
    state = pool.members["t0-5"]
    others = [i for i in pool.members if i != "t0-5"]
    probe = pool.select(40.0, exclude=others)
    assert probe[1].probe
    pool.complete(probe[0], probe[1], None, 40.0)
    assert state.circuit.state is CircuitState.CLOSED


def test_the_guard_ejects_the_worst_outlier_and_degrades_the_next() -> None:
    sr = poise.SuccessRateEjection(stdev_factor=1.0, minimum_hosts=5, request_volume=10, interval=10.0)
    pool = make_pool(eps=tiered(10), circuit=detecting(sr, percent=0.1))
    traffic(pool, {"t0-8": 0.3, "t0-9": 0.6}, 20, now=5.0)
    pool.handle_timer(10.0)
    assert pool.members["t0-9"].circuit.state is CircuitState.OPEN
    worse = pool.members["t0-8"].circuit
    assert worse.state is CircuitState.CLOSED
    assert worse.degraded
    assert worse.degraded_cause is Cause.SUCCESS_RATE
    assert pool.suppressed_ejections == 1


@pytest.mark.anyio
async def test_a_balancer_with_an_injected_clock_evaluates_when_a_selection_passes_the_deadline(
    clock: FakeClock,
) -> None:
    async with static_lb(*[f"w{i}" for i in range(6)], circuit=detecting(), clock=clock) as lb:
        for _ in range(240):
            permit = lb.acquire()
            if permit.endpoint.id == "w5":
                permit.fail(Fault.SUSPECT)
            else:
                permit.succeed()
        clock.advance(10.0)
        lb.acquire().succeed()
        snap = lb.snapshot()["w5"]
        assert snap.state is CircuitState.OPEN
        assert snap.counters.ejections == 1


def test_failure_rate_with_minimum_hosts_trips_only_with_enough_hosts_having_the_volume() -> None:
    policy = poise.CircuitPolicy(
        consecutive_failures=None,
        consecutive_transient_failures=None,
        failure_rate=0.5,
        minimum_volume=4,
        minimum_hosts=3,
        max_ejection_percent=1.0,
    )
    pool = make_pool(eps=tiered(3), circuit=policy)
    traffic(pool, {"t0-0": 1.0}, 4, now=0.0)  # t0-0 first, then the others
    # t0-0 failed 4 of 4, but when it failed nobody else had 4 outcomes: no trip yet.
    c = pool.members["t0-0"].circuit
    assert c.state is CircuitState.CLOSED
    # Now every endpoint has the volume: its next failure trips.
    others = [i for i in pool.members if i != "t0-0"]
    state, ticket, _, _ = pool.select(0.0, exclude=others)
    pool.complete(state, ticket, Fault.SUSPECT, 0.0)
    assert c.state is CircuitState.OPEN


def test_failure_rate_without_minimum_hosts_trips_alone() -> None:
    policy = poise.CircuitPolicy(
        consecutive_failures=None, failure_rate=0.5, minimum_volume=4, max_ejection_percent=1.0
    )
    pool = make_pool(eps=tiered(3), circuit=policy)
    traffic(pool, {"t0-0": 1.0}, 4, now=0.0)
    assert pool.members["t0-0"].circuit.state is CircuitState.OPEN


@pytest.mark.anyio
@pytest.mark.backends("trio")
async def test_the_balancers_own_timer_runs_the_evaluation_without_any_call() -> None:
    # The backend's clock (an autojumping MockClock): only the balancer's timer task can
    # notice the deadline, since nothing selects after the traffic.
    opened: list[poise.CircuitOpened] = []
    publisher = poise.DiscoveryPublisher()
    async with poise.LoadBalancer(publisher.subscribe(), circuit=detecting()) as lb:
        lb.add_observer(lambda e: opened.append(e) if isinstance(e, poise.CircuitOpened) else None)
        await trio.sleep(1.0)  # the timer task is waiting with no deadline: the pool is empty
        publisher.publish(poise.Snapshot(1, [poise.Endpoint(f"w{i}") for i in range(6)]))
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(240):
            permit = lb.acquire()
            if permit.endpoint.id == "w5":
                permit.fail(Fault.SUSPECT)
            else:
                permit.succeed()
        await trio.sleep(10.5)
        assert [(e.endpoint_id, e.cause) for e in opened] == [("w5", Cause.SUCCESS_RATE)]
