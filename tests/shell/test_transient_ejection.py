"""Sustained TRANSIENT faults eject: ``CircuitPolicy(consecutive_transient_failures=N)``.

One TRANSIENT fault is still "skip, no strike, endpoint retained"; a run of N of them with
no success in between ejects with the usual escalation, jitter, cap and half-open
recovery. Also the regression tests of two bugs of this area (TimeWindow.clear, the
snapshot's escalation level).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

import poise_py as poise
from poise_py import CircuitState, Fault
from poise_py._core._circuit import Cause, Circuit, Ticket
from tests.support.clocks import FakeClock, static_lb
from tests.support.coordination import Fleet

NOW = 100.0


def make(**knobs: Any) -> Circuit:
    knobs.setdefault("escalation", poise.Escalation(jitter=0.0))
    return Circuit(poise.CircuitPolicy(**knobs), random.Random(0).random, NOW)


def ticket_of(c: Circuit, now: float = NOW) -> Ticket:
    t = c.try_acquire(now)
    assert isinstance(t, Ticket), t
    return t


def record(c: Circuit, fault: Fault | None, now: float = NOW, **kwargs: Any) -> None:
    c.record(ticket_of(c, now), fault, now, **kwargs)


def test_the_default_ejects_after_five_transient_faults_in_a_row() -> None:
    c = make()
    for _ in range(4):
        record(c, Fault.TRANSIENT)
        assert c.state is CircuitState.CLOSED
    transition = c.record(ticket_of(c), Fault.TRANSIENT, NOW)
    assert transition is not None
    assert transition.cause is Cause.CONSECUTIVE_TRANSIENT
    assert c.state is CircuitState.OPEN
    assert c.reopen_at == NOW + 30.0  # the normal escalation's first window
    assert c.consecutive_failures == 0  # never a strike


def test_one_transient_fault_never_ejects_even_at_the_smallest_run() -> None:
    c = make(consecutive_transient_failures=2)
    record(c, Fault.TRANSIENT)
    assert c.state is CircuitState.CLOSED
    record(c, None)
    record(c, Fault.TRANSIENT)
    assert c.state is CircuitState.CLOSED


@pytest.mark.parametrize("bad", [0, 1, -3, 2.5, True, "5"])
def test_a_run_shorter_than_two_or_not_an_int_is_a_config_error(bad: object) -> None:
    with pytest.raises(poise.ConfigError) as info:
        poise.CircuitPolicy(consecutive_transient_failures=bad)  # type: ignore[arg-type]
    assert info.value.knob == "CircuitPolicy.consecutive_transient_failures"


def test_none_turns_transient_ejection_off() -> None:
    c = make(consecutive_transient_failures=None)
    for _ in range(100):
        record(c, Fault.TRANSIENT)
    assert c.state is CircuitState.CLOSED
    assert c.consecutive_transient_failures == 100


def test_a_success_resets_both_runs() -> None:
    c = make(consecutive_failures=3, consecutive_transient_failures=3)
    for fault in (Fault.TRANSIENT, Fault.TRANSIENT, Fault.SUSPECT, Fault.SUSPECT):
        record(c, fault)
    assert (c.consecutive_failures, c.consecutive_transient_failures) == (2, 2)
    record(c, None)
    assert (c.consecutive_failures, c.consecutive_transient_failures) == (0, 0)
    record(c, Fault.TRANSIENT)
    record(c, Fault.SUSPECT)
    assert c.state is CircuitState.CLOSED


def test_a_fault_of_one_class_does_not_reset_the_other_classs_run() -> None:
    c = make(consecutive_failures=3, consecutive_transient_failures=3, minimum_volume=1)
    for fault in (Fault.TRANSIENT, Fault.SUSPECT, Fault.TRANSIENT, Fault.SUSPECT):
        record(c, fault)
    assert (c.consecutive_failures, c.consecutive_transient_failures) == (2, 2)
    transition = c.record(ticket_of(c), Fault.TRANSIENT, NOW)
    assert transition is not None
    assert transition.cause is Cause.CONSECUTIVE_TRANSIENT


def test_the_transient_run_is_not_gated_by_minimum_volume() -> None:
    c = make(minimum_volume=50, consecutive_transient_failures=3)
    for _ in range(3):
        record(c, Fault.TRANSIENT)
    assert c.state is CircuitState.OPEN
    assert c.window_counts(NOW) == (0, 0, 0)  # TRANSIENT faults still never enter the window


def test_a_transient_probe_that_continues_the_run_reopens_with_escalation() -> None:
    c = make(consecutive_transient_failures=3)
    for _ in range(3):
        record(c, Fault.TRANSIENT)
    assert c.reopen_at == NOW + 30.0
    later = NOW + 30.0
    probe = ticket_of(c, later)
    assert probe.probe
    transition = c.record(probe, Fault.TRANSIENT, later)
    assert transition is not None
    assert transition.cause is Cause.PROBE_FAILED
    assert c.reopen_at == later + 60.0  # escalated


def test_a_transient_probe_after_a_strike_ejection_changes_nothing_until_its_run_is_long() -> None:
    c = make(consecutive_failures=1, minimum_volume=1, consecutive_transient_failures=3)
    record(c, Fault.SUSPECT)
    later = NOW + 30.0
    for _ in range(2):
        probe = ticket_of(c, later)
        assert c.record(probe, Fault.TRANSIENT, later) is None
        assert c.state is CircuitState.HALF_OPEN
    probe = ticket_of(c, later)
    transition = c.record(probe, Fault.TRANSIENT, later)
    assert transition is not None
    assert transition.cause is Cause.PROBE_FAILED


def test_a_transient_ejection_recovers_through_a_probe_and_restarts_the_run() -> None:
    c = make(consecutive_transient_failures=2)
    record(c, Fault.TRANSIENT)
    record(c, Fault.TRANSIENT)
    later = NOW + 30.0
    c.record(ticket_of(c, later), None, later)
    assert c.state is CircuitState.CLOSED
    assert c.level == 0
    record(c, Fault.TRANSIENT, later)
    assert c.state is CircuitState.CLOSED


def test_the_hard_cap_retires_an_endpoint_whose_transient_runs_never_end() -> None:
    c = make(consecutive_transient_failures=2, hard_cap=poise.HardCap(max_ejections=2))
    record(c, Fault.TRANSIENT)
    record(c, Fault.TRANSIENT)
    now = NOW
    for _ in range(2):
        now = c.reopen_at if c.reopen_at is not None else now
        c.record(ticket_of(c, now), Fault.TRANSIENT, now)
    assert c.state is CircuitState.RETIRED


def test_retry_after_on_the_tripping_transient_extends_the_escalated_window() -> None:
    c = make(consecutive_transient_failures=2)
    record(c, Fault.TRANSIENT)
    transition = c.record(ticket_of(c), Fault.TRANSIENT, NOW, retry_after=90.0)
    assert transition is not None
    assert transition.cause is Cause.CONSECUTIVE_TRANSIENT
    assert c.reopen_at == NOW + 90.0


def test_jitter_scales_a_transient_ejection_like_any_other() -> None:
    c = Circuit(
        poise.CircuitPolicy(consecutive_transient_failures=2, escalation=poise.Escalation(jitter=0.5)),
        lambda: 0.0,
        NOW,
    )
    record(c, Fault.TRANSIENT)
    record(c, Fault.TRANSIENT)
    assert c.reopen_at == NOW + 15.0  # 30 s x (1 - 0.5)


def test_a_refused_transient_trip_is_suppressed_and_counted() -> None:
    c = make(consecutive_transient_failures=2)
    record(c, Fault.TRANSIENT)
    assert c.record(ticket_of(c), Fault.TRANSIENT, NOW, may_eject=False) is None
    assert c.state is CircuitState.CLOSED
    assert c.suppressed_ejections == 1


@pytest.mark.anyio
async def test_a_worker_answering_unavailable_is_ejected_by_lb_call(clock: FakeClock) -> None:
    async with static_lb("a", "b", "c", policy=poise.RoundRobin(), clock=clock) as lb:

        async def dispatch(endpoint: poise.Endpoint) -> str:
            if endpoint.id == "a":
                raise poise.FaultError(Fault.TRANSIENT)
            return endpoint.id

        results = [await lb.call(dispatch) for _ in range(30)]
        assert "a" not in results
        snap = lb.snapshot()["a"]
        assert snap.state is CircuitState.OPEN
        assert snap.counters.faults[Fault.TRANSIENT] == 5
        assert snap.counters.ejections == 1


@pytest.mark.anyio
@pytest.mark.real_clock
async def test_a_transient_trip_is_published_and_mirrored_through_coordination(fleet: Fleet) -> None:
    # The fleet fixture: InMemoryStorage(clock=the fleet's FakeClock), then a real Redis.
    circuit = poise.CircuitPolicy(
        consecutive_transient_failures=2,
        escalation=poise.Escalation(base=30.0, maximum=300.0, jitter=0.0),
        max_ejection_percent=1.0,
    )
    async with fleet:
        lbs = [await fleet.balancer("a", circuit=circuit, seed=i) for i in range(2)]
        await fleet.sync(*lbs)
        lbs[0].acquire().fail(Fault.TRANSIENT)
        assert lbs[0].snapshot()["a"].state is CircuitState.CLOSED  # one never ejects
        lbs[0].acquire().fail(Fault.TRANSIENT)
        assert lbs[0].snapshot()["a"].state is CircuitState.OPEN
        await fleet.sync(*lbs)
        shared = await fleet.record()
        assert shared.state is CircuitState.OPEN
        assert shared.reopen_at is not None
        assert shared.opened_at is not None
        assert shared.reopen_at - shared.opened_at == pytest.approx(30.0, abs=1e-3)
        assert lbs[1].snapshot()["a"].state is CircuitState.OPEN
        with pytest.raises(poise.NoEligibleEndpoints):
            lbs[1].acquire()


# -- bugs of this area -------------------------------------------------------------------


def test_time_window_clear_forgets_the_counts_while_the_clock_is_under_one_window() -> None:
    # Failures before an ejection used to count again after the circuit closed, so the
    # next failure re-ejected at once, ignoring minimum_volume.
    window = poise.TimeWindow(duration=30.0, buckets=10).build()
    for _ in range(5):
        window.add(1, 3.0)
    window.clear()
    assert window.counts(4.0) == (0, 0, 0)


def test_a_closed_circuit_does_not_re_eject_on_the_first_failure_after_recovery() -> None:
    c = Circuit(
        poise.CircuitPolicy(
            consecutive_failures=None,
            failure_rate=0.5,
            minimum_volume=4,
            window=poise.TimeWindow(duration=30.0, buckets=10),
            escalation=poise.Escalation(base=1.0, maximum=10.0, jitter=0.0),
        ),
        random.Random(0).random,
        0.0,
    )
    for _ in range(4):
        c.record(ticket_of(c, 0.5), Fault.SUSPECT, 0.5)
    assert c.state is CircuitState.OPEN
    c.record(ticket_of(c, 2.0), None, 2.0)  # the probe closes it
    assert c.state is CircuitState.CLOSED
    c.record(ticket_of(c, 3.5), Fault.SUSPECT, 3.5)  # another bucket than the old failures
    assert c.state is CircuitState.CLOSED
    assert c.window_counts(3.5) == (1, 1, 0)


@pytest.mark.anyio
async def test_snapshot_escalation_level_decays_while_the_circuit_stays_closed(clock: FakeClock) -> None:
    circuit = poise.CircuitPolicy(
        consecutive_failures=1,
        minimum_volume=1,
        max_ejection_percent=1.0,
        escalation=poise.Escalation(base=10.0, maximum=100.0, jitter=0.0, reset_on_success=False),
    )
    async with static_lb("a", circuit=circuit, clock=clock) as lb:
        lb.acquire().fail(Fault.SUSPECT)
        clock.advance(10.0)
        lb.acquire().fail(Fault.SUSPECT)  # the probe fails: level 2
        clock.advance(20.0)
        lb.acquire().succeed()  # the probe closes it; the level stays (no reset)
        assert lb.snapshot()["a"].escalation_level == 2
        clock.advance(10.0)
        assert lb.snapshot()["a"].escalation_level == 1
        clock.advance(10.0)
        assert lb.snapshot()["a"].escalation_level == 0


@pytest.mark.anyio
async def test_a_worker_that_answers_unavailable_one_call_in_three_is_never_ejected(clock: FakeClock) -> None:
    # Successes go through the pool's inlined hot path: it must end the TRANSIENT run too.
    async with static_lb("a", "b", policy=poise.RoundRobin(), clock=clock) as lb:
        calls = 0
        for _ in range(60):
            permit = lb.acquire()
            if permit.endpoint.id == "a":
                calls += 1
                if calls % 3 == 0:
                    permit.fail(Fault.TRANSIENT)
                    continue
            permit.succeed()
        snap = lb.snapshot()["a"]
        assert snap.counters.faults[Fault.TRANSIENT] == 10
        assert snap.state is CircuitState.CLOSED
        assert snap.counters.ejections == 0


@pytest.mark.anyio
@pytest.mark.parametrize("code", ["UNAVAILABLE", "DEADLINE_EXCEEDED"])
async def test_a_dead_or_black_holed_grpc_worker_is_chosen_at_most_five_times_in_forty_calls(
    clock: FakeClock, code: str
) -> None:
    # The gRPC worker pool: a worker with nothing listening (UNAVAILABLE) or that never
    # answers (DEADLINE_EXCEEDED) maps to TRANSIENT through classify.grpc().
    import grpc
    import grpc.aio

    status = getattr(grpc.StatusCode, code)
    chosen: list[str] = []

    async def dispatch(endpoint: poise.Endpoint) -> str:
        chosen.append(endpoint.id)
        if endpoint.id == "dead":
            raise grpc.aio.AioRpcError(status, grpc.aio.Metadata(), grpc.aio.Metadata(), "details")
        return endpoint.id

    async with static_lb(
        "dead", "w1", "w2", "w3", policy=poise.RoundRobin(), classifier=poise.classify.grpc(), clock=clock
    ) as lb:
        results = [await lb.call(dispatch) for _ in range(40)]
        assert "dead" not in results
        assert chosen.count("dead") == 5
        assert lb.snapshot()["dead"].state is CircuitState.OPEN


def test_a_refused_transient_trip_degrades_the_endpoint_with_its_cause() -> None:
    c = make(consecutive_transient_failures=2)
    record(c, Fault.TRANSIENT)
    record(c, Fault.TRANSIENT, may_eject=False)
    assert c.degraded
    assert c.degraded_cause is Cause.CONSECUTIVE_TRANSIENT
    record(c, None)
    assert not c.degraded
