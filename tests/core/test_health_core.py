"""The pure health-check scheduler on plain floats (thresholds, intervals, reservations,
generations), and the circuit's un-eject move."""

from __future__ import annotations

import random
from typing import Any

import pytest

import poise_py as poise
from poise_py import AdminStatus, CircuitState, Fault, HealthStatus, IneligibleReason
from poise_py._core._circuit import TRANSITIONS, Cause, Circuit, Ticket
from poise_py._core._health_schedule import HealthScheduler, ProbeResult, ProbeToken

PASSED, FAILED, TIMED_OUT = ProbeResult.PASSED, ProbeResult.FAILED, ProbeResult.TIMED_OUT


async def _probe(endpoint: poise.Endpoint) -> None:
    return None


def check(**kwargs: Any) -> poise.HealthCheck:
    kwargs.setdefault("jitter", 0.0)
    return poise.HealthCheck(probe=_probe, **kwargs)


def scheduler(ids: tuple[str, ...] = ("a",), now: float = 0.0, **kwargs: Any) -> HealthScheduler:
    s = HealthScheduler(check(**kwargs), random.Random(7).random)
    for i in ids:
        s.add(i, now)
    return s


def one(s: HealthScheduler, now: float) -> ProbeToken:
    tokens = s.due(now)
    assert len(tokens) == 1
    return tokens[0]


def run(s: HealthScheduler, results: list[ProbeResult], now: float = 0.0) -> float:
    """Probe ``a`` once per result, each when due; return the time after the last."""
    for result in results:
        deadline = s.next_deadline()
        assert deadline is not None
        now = max(now, deadline)
        s.record(one(s, now), result, now)
    return now


def test_defaults_are_two_passes_three_failures_and_unknown_admitted() -> None:
    hc = poise.HealthCheck(probe=_probe)
    assert (hc.healthy_threshold, hc.unhealthy_threshold) == (2, 3)
    assert hc.admit_unknown
    assert hc.uneject
    assert hc.fast_interval == hc.interval / 4


@pytest.mark.parametrize(
    ("knob", "value"),
    [
        ("interval", 0),
        ("interval", float("nan")),
        ("timeout", -1.0),
        ("unhealthy_interval", 0.0),
        ("healthy_threshold", 0),
        ("unhealthy_threshold", True),
        ("jitter", 1.0),
        ("admit_unknown", 1),
        ("uneject", None),
    ],
)
def test_invalid_knobs_raise_config_error_naming_them(knob: str, value: object) -> None:
    knobs: dict[str, Any] = {knob: value}
    with pytest.raises(poise.ConfigError) as info:
        poise.HealthCheck(probe=_probe, **knobs)
    assert info.value.knob == f"HealthCheck.{knob}"


def test_a_probe_that_is_not_callable_is_refused() -> None:
    with pytest.raises(poise.ConfigError):
        poise.HealthCheck(probe="not a function")  # type: ignore[arg-type]


def test_unhealthy_interval_may_not_be_slower_than_interval() -> None:
    with pytest.raises(poise.ConfigError) as info:
        poise.HealthCheck(probe=_probe, interval=5.0, unhealthy_interval=6.0)
    assert info.value.knob == "HealthCheck.unhealthy_interval"


def test_readmit_bound_is_the_worst_case_from_recovery_to_healthy() -> None:
    hc = poise.HealthCheck(probe=_probe, interval=8.0, unhealthy_interval=2.0, timeout=1.0, jitter=0.5)
    # a failing probe in flight (1 s), then two probes each 3 s apart at worst, 1 s long
    assert hc.readmit_bound == pytest.approx(1.0 + 2 * (2.0 * 1.5 + 1.0))


def test_a_new_endpoint_is_probed_within_the_initial_jitter() -> None:
    s = HealthScheduler(poise.HealthCheck(probe=_probe, interval=10.0, jitter=0.2), random.Random(1).random)
    for i in range(50):
        s.add(f"e{i}", 100.0)
    assert s.next_deadline() is not None
    assert s.due(99.999) == []
    tokens = s.due(102.0)
    assert len(tokens) == 50
    assert len({t.endpoint_id for t in tokens}) == 50


def test_at_most_one_probe_is_reserved_per_endpoint() -> None:
    s = scheduler(("a", "b"))
    first = s.due(0.0)
    assert sorted(t.endpoint_id for t in first) == ["a", "b"]
    assert s.due(1_000.0) == []  # nothing more until a result or a cancellation
    assert s.next_deadline() is None
    s.record(first[0], PASSED, 5.0)
    later = s.due(1_000.0)
    assert [t.endpoint_id for t in later] == [first[0].endpoint_id]
    assert later[0].number != first[0].number


def test_healthy_needs_consecutive_passes() -> None:
    s = scheduler()
    run(s, [PASSED, FAILED, PASSED])
    assert s.status("a") is HealthStatus.UNKNOWN
    run(s, [PASSED])
    assert s.status("a") is HealthStatus.HEALTHY


def test_unhealthy_needs_consecutive_failures() -> None:
    s = scheduler()
    run(s, [PASSED, PASSED, FAILED, FAILED, PASSED, FAILED, FAILED])
    assert s.status("a") is HealthStatus.HEALTHY
    run(s, [FAILED])
    assert s.status("a") is HealthStatus.UNHEALTHY
    run(s, [PASSED])
    assert s.status("a") is HealthStatus.UNHEALTHY
    run(s, [PASSED])
    assert s.status("a") is HealthStatus.HEALTHY


def test_thresholds_of_one_follow_every_result() -> None:
    s = scheduler(healthy_threshold=1, unhealthy_threshold=1)
    for result, status in [(PASSED, "healthy"), (FAILED, "unhealthy"), (PASSED, "healthy")]:
        run(s, [result])
        assert s.status("a").value == status


def test_a_timeout_counts_as_a_failure() -> None:
    s = scheduler(unhealthy_threshold=2)
    run(s, [TIMED_OUT, FAILED])
    assert s.status("a") is HealthStatus.UNHEALTHY
    view = s.snapshot("a")
    assert (view.failures, view.timeouts, view.consecutive_failures) == (2, 1, 2)


def test_endpoints_not_known_healthy_are_probed_at_the_faster_interval() -> None:
    s = scheduler(interval=10.0, unhealthy_interval=1.0, healthy_threshold=1, unhealthy_threshold=1)
    now = run(s, [FAILED])  # unhealthy
    assert s.next_deadline() == now + 1.0
    now = run(s, [PASSED], now)  # healthy
    assert s.next_deadline() == now + 10.0
    s2 = scheduler(interval=10.0, unhealthy_interval=1.0)
    now = run(s2, [PASSED])  # one pass of two: still UNKNOWN
    assert s2.status("a") is HealthStatus.UNKNOWN
    assert s2.next_deadline() == now + 1.0


def test_jitter_spreads_intervals_within_bounds() -> None:
    s = HealthScheduler(
        poise.HealthCheck(probe=_probe, interval=10.0, jitter=0.2, healthy_threshold=1),
        random.Random(3).random,
    )
    ids = [f"e{i}" for i in range(200)]
    for i in ids:
        s.add(i, 0.0)
    for token in s.due(10.0):
        s.record(token, PASSED, 10.0)
    gaps = [s.snapshot(i).next_probe_at - 10.0 for i in ids]  # type: ignore[operator]
    assert all(8.0 <= g <= 12.0 for g in gaps)
    assert max(gaps) - min(gaps) > 2.0  # not lock-step


def test_a_cancelled_probe_reschedules_without_changing_classification() -> None:
    s = scheduler(unhealthy_threshold=2)
    now = run(s, [PASSED, PASSED, FAILED])
    before = s.snapshot("a")
    token = one(s, now + 100.0)
    assert s.cancel(token, now + 100.0)
    after = s.snapshot("a")
    assert after.status is HealthStatus.HEALTHY
    assert after.consecutive_failures == before.consecutive_failures == 1
    assert after.probes == before.probes
    assert after.cancelled == 1
    assert after.next_probe_at == now + 100.0 + 10.0
    assert not s.cancel(token, now + 101.0)  # a second cancel is stale
    assert s.record(token, FAILED, now + 101.0) is None


def test_a_forced_status_discards_the_probe_in_flight() -> None:
    s = scheduler(unhealthy_threshold=1)
    token = one(s, 0.0)
    assert s.set_admin("a", AdminStatus.FORCED_HEALTHY, 1.0)
    assert s.generation("a") == token.generation + 1
    assert s.reserved("a") is None
    assert s.record(token, FAILED, 2.0) is None  # the late result
    assert s.status("a") is HealthStatus.HEALTHY
    view = s.snapshot("a")
    assert (view.stale, view.probes, view.failures) == (1, 0, 0)
    assert s.due(1_000.0) == []  # parked: no probes while forced


def test_forced_unhealthy_is_the_classification_until_auto() -> None:
    s = scheduler(healthy_threshold=1)
    run(s, [PASSED])
    s.set_admin("a", AdminStatus.FORCED_UNHEALTHY, 20.0)
    assert s.status("a") is HealthStatus.UNHEALTHY
    assert s.next_deadline() is None


def test_draining_and_disabled_park_the_track_and_keep_the_classification() -> None:
    s = scheduler(healthy_threshold=1)
    run(s, [PASSED])
    for status in (AdminStatus.DRAINING, AdminStatus.DISABLED):
        s.set_admin("a", status, 30.0)
        assert s.status("a") is HealthStatus.HEALTHY
        assert s.due(10_000.0) == []


def test_auto_restarts_from_unknown_with_a_probe_due_at_once() -> None:
    s = scheduler(healthy_threshold=1)
    run(s, [PASSED])
    s.set_admin("a", AdminStatus.FORCED_UNHEALTHY, 40.0)
    assert s.set_admin("a", AdminStatus.AUTO, 50.0)
    view = s.snapshot("a")
    assert view.status is HealthStatus.UNKNOWN
    assert (view.consecutive_passes, view.consecutive_failures) == (0, 0)
    assert s.next_deadline() == 50.0  # jitter 0: at once
    token = one(s, 50.0)
    assert token.generation == 2
    assert s.record(token, PASSED, 51.0) is HealthStatus.HEALTHY


def test_setting_the_same_status_again_changes_nothing() -> None:
    s = scheduler()
    token = one(s, 0.0)
    assert not s.set_admin("a", AdminStatus.AUTO, 1.0)
    assert s.reserved("a") == token
    assert s.generation("a") == 0


def test_a_result_for_an_endpoint_that_left_is_stale_even_if_it_returns() -> None:
    s = scheduler()
    token = one(s, 0.0)
    s.remove("a")
    s.add("a", 1.0)
    assert s.record(token, FAILED, 2.0) is None
    assert s.stale == 1
    assert s.snapshot("a").probes == 0
    assert s.reserved("a") is None
    assert [t.endpoint_id for t in s.due(1.0)] == ["a"]


def test_adding_a_tracked_endpoint_twice_is_a_bug() -> None:
    s = scheduler()
    with pytest.raises(KeyError):
        s.add("a", 0.0)


def test_next_deadline_is_the_earliest_unreserved_probe() -> None:
    s = scheduler(("a",), interval=10.0, unhealthy_interval=10.0)
    s.add("b", 3.0)
    assert s.next_deadline() == 0.0
    s.record(one(s, 0.0), PASSED, 0.0)
    assert s.next_deadline() == 3.0
    s.set_admin("b", AdminStatus.DISABLED, 1.0)
    assert s.next_deadline() == 10.0
    s.remove("a")
    assert s.next_deadline() is None


# -- the circuit's un-eject move -------------------------------------------------------


def ejected_circuit() -> Circuit:
    policy = poise.CircuitPolicy(
        consecutive_failures=1, minimum_volume=1, escalation=poise.Escalation(base=10.0, jitter=0.0)
    )
    c = Circuit(policy, random.Random(1).random, 0.0)
    ticket = c.try_acquire(0.0)
    assert isinstance(ticket, Ticket)
    c.record(ticket, Fault.SUSPECT, 0.0)
    assert c.state is CircuitState.OPEN
    return c


def test_uneject_closes_an_open_circuit_at_a_new_epoch_keeping_the_escalation_level() -> None:
    c = ejected_circuit()
    old = c.try_acquire(0.0)  # refused while OPEN
    assert old is IneligibleReason.OPEN
    epoch, level = c.epoch, c.level
    transition = c.uneject(1.0)
    assert transition is not None
    assert (transition.source, transition.target, transition.cause) == (
        CircuitState.OPEN,
        CircuitState.CLOSED,
        Cause.HEALTH_CHECK_PASSED,
    )
    assert c.epoch == epoch + 1
    assert c.level == level
    assert c.ejections_in_row == 0
    assert c.next_deadline() is None


def test_uneject_closes_a_half_open_circuit_and_its_probe_becomes_stale() -> None:
    c = ejected_circuit()
    probe = c.try_acquire(10.0)
    assert isinstance(probe, Ticket)
    assert probe.probe
    assert c.uneject(10.5) is not None
    assert c.state is CircuitState.CLOSED
    assert c.probes_in_flight == 0
    assert c.record(probe, Fault.SUSPECT, 11.0) is None
    assert c.stale_results == 1
    assert c.state is CircuitState.CLOSED


def test_uneject_leaves_closed_blocked_and_retired_circuits_alone() -> None:
    c = ejected_circuit()
    c.uneject(1.0)
    assert c.uneject(2.0) is None  # CLOSED
    c.block(3.0)
    epoch = c.epoch
    assert c.uneject(4.0) is None  # BLOCKED: only an operator or discovery clears it
    assert (c.state, c.epoch) == (CircuitState.BLOCKED, epoch)
    assert (CircuitState.RETIRED, Cause.HEALTH_CHECK_PASSED) not in TRANSITIONS
