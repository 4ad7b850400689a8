"""The pure circuit: transitions, epochs, probe slots, stale results. No event loop."""

from __future__ import annotations

import pytest

import poise_py as poise
from poise_py import CircuitState, Fault, IneligibleReason
from poise_py._core._circuit import TRANSITIONS, Cause, IllegalMoveError, Ticket
from tests.support.circuits import NOW, make, ticket_of, trip


def test_closed_circuit_hands_out_the_same_ticket_object_per_epoch() -> None:
    c = make()
    assert ticket_of(c) is ticket_of(c)
    assert ticket_of(c) == Ticket(0, probe=False)


def test_trips_after_five_consecutive_suspect_faults_by_default() -> None:
    c = make()
    for _ in range(4):
        c.record(ticket_of(c), Fault.SUSPECT, NOW)
    assert c.state is CircuitState.CLOSED
    transition = c.record(ticket_of(c), Fault.SUSPECT, NOW)
    assert transition is not None
    assert transition.cause is Cause.CONSECUTIVE_FAILURES
    assert c.state is CircuitState.OPEN
    assert c.epoch == 1
    assert c.reopen_at == NOW + 30.0


def test_a_success_resets_the_consecutive_run() -> None:
    c = make()
    for _ in range(4):
        c.record(ticket_of(c), Fault.SUSPECT, NOW)
    c.record(ticket_of(c), None, NOW)
    for _ in range(4):
        c.record(ticket_of(c), Fault.SUSPECT, NOW)
    assert c.state is CircuitState.CLOSED


def test_minimum_volume_gates_a_cold_start_trip() -> None:
    c = make(consecutive_failures=2, minimum_volume=4)
    for _ in range(3):
        c.record(ticket_of(c), Fault.SUSPECT, NOW)
    assert c.state is CircuitState.CLOSED
    c.record(ticket_of(c), Fault.SUSPECT, NOW)
    assert c.state is CircuitState.OPEN


def test_open_refuses_until_the_deadline_then_half_opens_with_one_probe_slot() -> None:
    c = make()
    trip(c)
    assert c.try_acquire(NOW + 29.9) is IneligibleReason.OPEN
    assert c.next_deadline() == NOW + 30.0
    probe = ticket_of(c, NOW + 30.0)
    assert probe.probe
    assert c.state is CircuitState.HALF_OPEN
    assert c.epoch == 2
    assert c.try_acquire(NOW + 30.0) is IneligibleReason.PROBES_TAKEN


def test_probe_success_closes_at_a_new_epoch() -> None:
    c = make()
    trip(c)
    probe = ticket_of(c, NOW + 30)
    transition = c.record(probe, None, NOW + 30)
    assert transition is not None
    assert transition.cause is Cause.PROBE_SUCCEEDED
    assert c.state is CircuitState.CLOSED
    assert c.epoch == 3


def test_probe_failure_reopens_with_escalation() -> None:
    c = make()
    trip(c)
    c.record(ticket_of(c, NOW + 30), Fault.SUSPECT, NOW + 30)
    assert c.state is CircuitState.OPEN
    assert c.reopen_at == NOW + 30 + 60


def test_success_threshold_needs_that_many_probe_successes() -> None:
    c = make(success_threshold=2)
    trip(c)
    c.record(ticket_of(c, NOW + 30), None, NOW + 30)
    assert c.state is CircuitState.HALF_OPEN
    c.record(ticket_of(c, NOW + 30), None, NOW + 30)
    assert c.state is CircuitState.CLOSED


def test_cancelled_probe_releases_its_slot_and_changes_nothing_else() -> None:
    c = make()
    trip(c)
    probe = ticket_of(c, NOW + 30)
    epoch = c.epoch
    c.cancel(probe)
    assert c.state is CircuitState.HALF_OPEN
    assert c.epoch == epoch
    assert c.probes_in_flight == 0
    assert ticket_of(c, NOW + 30).probe


def test_late_result_from_before_open_half_open_closed_is_dropped() -> None:
    """The flaw in Poise's own circuit: a late result from an earlier epoch must not count."""
    c = make(consecutive_failures=1, minimum_volume=1)
    early = ticket_of(c)  # epoch 0, issued while CLOSED
    c.record(ticket_of(c), Fault.SUSPECT, NOW)  # -> OPEN (1)
    c.record(ticket_of(c, NOW + 30), None, NOW + 30)  # -> HALF_OPEN (2) -> CLOSED (3)
    assert c.state is CircuitState.CLOSED
    assert c.epoch == 3
    assert c.record(early, Fault.SUSPECT, NOW + 31) is None
    assert c.state is CircuitState.CLOSED
    assert c.consecutive_failures == 0
    assert c.window_counts(NOW + 31) == (0, 0, 0)
    assert c.stale_results == 1


def test_late_probe_result_from_an_earlier_half_open_round_is_dropped() -> None:
    c = make(permitted_probes=2)
    trip(c)
    slow_probe = ticket_of(c, NOW + 30)
    failing_probe = ticket_of(c, NOW + 30)
    c.record(failing_probe, Fault.SUSPECT, NOW + 30)  # round one fails: reopen
    assert c.state is CircuitState.OPEN
    second_round = ticket_of(c, NOW + 200)
    assert second_round.epoch > slow_probe.epoch
    assert c.record(slow_probe, None, NOW + 200) is None  # would have closed round one
    assert c.state is CircuitState.HALF_OPEN
    assert c.probes_in_flight == 1
    assert c.stale_results == 1


def test_fatal_ejects_at_once_without_the_volume_gate() -> None:
    c = make(minimum_volume=100)
    transition = c.record(ticket_of(c), Fault.FATAL, NOW)
    assert transition is not None
    assert transition.cause is Cause.FATAL
    assert c.state is CircuitState.OPEN


def test_permanent_blocks_and_is_never_probed() -> None:
    c = make()
    c.record(ticket_of(c), Fault.PERMANENT, NOW)
    assert c.state is CircuitState.BLOCKED
    assert c.next_deadline() is None
    assert c.try_acquire(NOW + 10_000) is IneligibleReason.PERMANENT
    c.reset(NOW + 10_000)
    assert c.state is CircuitState.CLOSED


@pytest.mark.parametrize("fault", [Fault.TRANSIENT, Fault.CALLER])
def test_transient_and_caller_faults_record_no_strike(fault: Fault) -> None:
    # TRANSIENT faults keep a run of their own (tests/shell/test_transient_ejection.py); off here.
    c = make(consecutive_failures=1, minimum_volume=1, consecutive_transient_failures=None)
    for _ in range(10):
        c.record(ticket_of(c), fault, NOW)
    assert c.state is CircuitState.CLOSED
    assert c.consecutive_failures == 0
    assert c.window_counts(NOW) == (0, 0, 0)


def test_retry_after_opens_for_at_least_that_long_without_escalating() -> None:
    c = make()
    transition = c.record(ticket_of(c), Fault.TRANSIENT, NOW, retry_after=90.0)
    assert transition is not None
    assert transition.cause is Cause.RETRY_AFTER
    assert c.reopen_at == NOW + 90.0
    assert c.level == 0


def test_may_eject_false_keeps_the_circuit_closed_and_counts_it() -> None:
    c = make(consecutive_failures=1, minimum_volume=1)
    assert c.record(ticket_of(c), Fault.SUSPECT, NOW, may_eject=False) is None
    assert c.state is CircuitState.CLOSED
    assert c.suppressed_ejections == 1


def test_illegal_move_raises_and_changes_nothing() -> None:
    c = make()
    before = (c.state, c.epoch, c.reopen_at)
    with pytest.raises(IllegalMoveError):
        c.adopt(CircuitState.CLOSED, NOW)  # CLOSED --shared_closed--> is not in TRANSITIONS
    with pytest.raises(IllegalMoveError):
        c.adopt(CircuitState.BLOCKED, NOW)  # nor is any adoption of BLOCKED
    assert (c.state, c.epoch, c.reopen_at) == before


def test_transition_table_reaches_every_state_and_always_allows_reset() -> None:
    targets = set(TRANSITIONS.values())
    assert targets == set(CircuitState)
    for state in CircuitState:
        assert TRANSITIONS[state, Cause.RESET] is CircuitState.CLOSED


@pytest.mark.parametrize(
    ("knobs", "knob"),
    [
        ({"consecutive_failures": 0}, "CircuitPolicy.consecutive_failures"),
        ({"permitted_probes": 0}, "CircuitPolicy.permitted_probes"),
        ({"failure_rate": 1.5}, "CircuitPolicy.failure_rate"),
        ({"failure_rate": float("nan")}, "CircuitPolicy.failure_rate"),
        ({"max_ejection_percent": 101}, "CircuitPolicy.max_ejection_percent"),
        ({"slow_call_rate": 0.5}, "CircuitPolicy.slow_call_duration"),
        ({"minimum_volume": -1}, "CircuitPolicy.minimum_volume"),
        ({"success_threshold": True}, "CircuitPolicy.success_threshold"),
    ],
)
def test_invalid_circuit_knobs_raise_config_error_naming_the_knob(knobs: dict[str, object], knob: str) -> None:
    with pytest.raises(poise.ConfigError) as info:
        poise.CircuitPolicy(**knobs)  # type: ignore[arg-type]
    assert info.value.knob == knob


@pytest.mark.parametrize(
    ("knobs", "knob"),
    [
        ({"base": -1.0}, "Escalation.base"),
        ({"base": float("nan")}, "Escalation.base"),
        ({"base": float("inf")}, "Escalation.base"),
        ({"base": 0}, "Escalation.base"),
        ({"maximum": 1.0, "base": 2.0}, "Escalation.maximum"),
        ({"multiplier": 1.0}, "Escalation.multiplier"),
        ({"jitter": 1.0}, "Escalation.jitter"),
    ],
)
def test_invalid_escalation_knobs_raise_config_error(knobs: dict[str, object], knob: str) -> None:
    with pytest.raises(poise.ConfigError) as info:
        poise.Escalation(**knobs)  # type: ignore[arg-type]
    assert info.value.knob == knob


def test_a_policy_with_no_trip_condition_is_refused() -> None:
    with pytest.raises(poise.ConfigError):
        poise.CircuitPolicy(consecutive_failures=None, consecutive_transient_failures=None)
