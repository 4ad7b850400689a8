"""The pure circuit's coordination moves: leased mode, adopting shared state, granted slots."""

from __future__ import annotations

import random

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import poise_py as poise
from poise_py import CircuitState, Fault, IneligibleReason
from poise_py._core._circuit import TRANSITIONS, Cause, Circuit, IllegalMoveError, Ticket
from tests.support.circuits import NOW, make, ticket_of, trip

_C, _O, _H = CircuitState.CLOSED, CircuitState.OPEN, CircuitState.HALF_OPEN


def leased(**knobs: object) -> Circuit:
    c = make(**knobs)
    assert c.set_leased(True, NOW) is None
    return c


def test_the_shared_moves_are_in_the_transition_table_and_never_lift_a_local_verdict() -> None:
    assert TRANSITIONS[_C, Cause.SHARED_OPEN] is _O
    assert TRANSITIONS[_O, Cause.SHARED_OPEN] is _O
    assert TRANSITIONS[_O, Cause.SHARED_HALF_OPEN] is _H
    assert TRANSITIONS[_H, Cause.SHARED_HALF_OPEN] is _H
    assert TRANSITIONS[_H, Cause.SHARED_CLOSED] is _C
    for local in (CircuitState.BLOCKED, CircuitState.RETIRED):
        for cause in (Cause.SHARED_OPEN, Cause.SHARED_HALF_OPEN, Cause.SHARED_CLOSED):
            assert (local, cause) not in TRANSITIONS


def test_adopting_from_blocked_raises_and_changes_nothing() -> None:
    c = leased()
    c.record(ticket_of(c), Fault.PERMANENT, NOW)
    before = (c.state, c.epoch, c.level)
    with pytest.raises(IllegalMoveError):
        c.adopt(_O, NOW, reopen_at=NOW + 30, level=2)
    with pytest.raises(IllegalMoveError):
        c.adopt(CircuitState.BLOCKED, NOW)
    assert (c.state, c.epoch, c.level) == before


def test_a_leased_circuit_never_half_opens_on_its_own_timer() -> None:
    c = leased()
    trip(c)
    assert c.reopen_at is not None
    later = c.reopen_at + 1.0
    assert c.handle_timer(later) is None
    assert c.try_acquire(later) is IneligibleReason.OPEN
    assert c.state is _O
    assert not c.grant(1), "slots go only to a half-open round"
    assert c.probe_limit == 0


def test_unleasing_hands_the_timer_back() -> None:
    c = leased()
    trip(c)
    assert c.reopen_at is not None
    later = c.reopen_at + 1.0
    c.set_leased(False, later)
    transition = c.handle_timer(later)
    assert transition is not None
    assert transition.cause is Cause.COOLDOWN_ELAPSED
    assert c.probe_limit == c.policy.permitted_probes


def test_an_adopted_half_open_round_has_no_slot_until_one_is_granted() -> None:
    c = leased(permitted_probes=2)
    c.adopt(_O, NOW, reopen_at=NOW + 30, level=1)
    transition = c.adopt(_H, NOW + 30, level=1)
    assert transition.cause is Cause.SHARED_HALF_OPEN
    assert c.try_acquire(NOW + 30) is IneligibleReason.PROBES_TAKEN
    assert not c.accepting
    assert c.grant(1)
    probe = ticket_of(c, NOW + 30)
    assert probe.probe
    assert c.try_acquire(NOW + 30) is IneligibleReason.PROBES_TAKEN
    assert c.grant(5)
    assert c.probe_limit == 2, "grants are capped at the policy's slots"


def test_a_completed_leased_probe_spends_its_slot_a_cancelled_one_keeps_it() -> None:
    c = leased()
    c.adopt(_H, NOW, level=1)
    c.grant(1)
    c.cancel(ticket_of(c))
    probe = ticket_of(c)  # the lease survived the cancellation
    assert c.record(probe, None, NOW) is None, "the fleet, not one success, closes a shared circuit"
    assert c.state is _H
    assert c.probe_successes == 1
    assert c.try_acquire(NOW) is IneligibleReason.PROBES_TAKEN


def test_a_failed_leased_probe_opens_locally_escalated_from_the_fleets_level() -> None:
    c = leased(escalation=poise.Escalation(base=30, maximum=300, jitter=0.0))
    c.adopt(_H, NOW, level=2)  # two failed rounds so far
    c.grant(1)
    transition = c.record(ticket_of(c), Fault.SUSPECT, NOW)
    assert transition is not None
    assert transition.cause is Cause.PROBE_FAILED
    assert transition.reopen_at == NOW + 120.0


def test_unleasing_a_half_open_circuit_whose_probes_passed_closes_it() -> None:
    c = leased()
    c.adopt(_H, NOW, level=1)
    c.grant(1)
    c.record(ticket_of(c), None, NOW)
    transition = c.set_leased(False, NOW)
    assert transition is not None
    assert transition.cause is Cause.PROBE_SUCCEEDED
    assert c.state is _C
    assert c.level == 0


def test_leasing_takes_back_free_local_slots_but_not_probes_in_flight() -> None:
    c = make(permitted_probes=3)
    trip(c)
    at = c.reopen_at
    assert at is not None
    c.handle_timer(at)
    ticket_of(c, at)
    c.set_leased(True, at)
    assert c.probe_limit == 1
    assert c.try_acquire(at) is IneligibleReason.PROBES_TAKEN


def test_adopting_closed_starts_a_fresh_episode_and_stales_old_permits() -> None:
    c = leased()
    closed = ticket_of(c)
    c.adopt(_O, NOW, reopen_at=NOW + 60, level=3)
    assert c.level == 3
    assert c.ejections == 1
    c.adopt(_C, NOW + 60)
    assert c.level == 0
    assert c.window_counts(NOW + 60)[0] == 0
    assert c.record(closed, Fault.SUSPECT, NOW + 60) is None
    assert c.stale_results == 1
    assert c.consecutive_failures == 0


def test_retime_moves_an_open_deadline_without_a_move() -> None:
    c = leased()
    trip(c)
    epoch = c.epoch
    assert c.retime(NOW + 99)
    assert (c.reopen_at, c.epoch) == (NOW + 99, epoch)
    c.adopt(_H, NOW, level=1)
    assert not c.retime(NOW + 5)


def test_a_retry_after_is_carried_on_the_transition_for_publishing() -> None:
    c = make(consecutive_failures=1, minimum_volume=1)
    transition = c.record(ticket_of(c), Fault.TRANSIENT, NOW, retry_after=42.0)
    assert transition is not None
    assert transition.cause is Cause.RETRY_AFTER
    assert transition.retry_after == 42.0
    c = make(consecutive_failures=1, minimum_volume=1)
    transition = c.record(ticket_of(c), Fault.SUSPECT, NOW, retry_after=1e9)
    assert transition is not None
    assert transition.retry_after == c.policy.max_retry_after


class LeasedCircuitMachine(RuleBasedStateMachine):
    """Any interleaving of traffic, timers, adoption, grants and lease changes keeps the invariants."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        policy = poise.CircuitPolicy(
            consecutive_failures=2,
            minimum_volume=1,
            permitted_probes=2,
            escalation=poise.Escalation(base=5.0, maximum=40.0),
        )
        self.circuit = Circuit(policy, random.Random(1).random, self.now)
        self.outstanding: list[Ticket] = []
        self.last_epoch = 0

    @rule()
    def acquire(self) -> None:
        got = self.circuit.try_acquire(self.now)
        if isinstance(got, Ticket):
            self.outstanding.append(got)

    @rule(data=st.data(), fault=st.sampled_from([None, Fault.SUSPECT, Fault.TRANSIENT, Fault.FATAL]))
    @precondition(lambda self: self.outstanding)
    def record(self, data: st.DataObject, fault: Fault | None) -> None:
        ticket = self.outstanding.pop(data.draw(st.integers(0, len(self.outstanding) - 1)))
        self.circuit.record(ticket, fault, self.now)

    @rule(data=st.data())
    @precondition(lambda self: self.outstanding)
    def cancel(self, data: st.DataObject) -> None:
        self.circuit.cancel(self.outstanding.pop(data.draw(st.integers(0, len(self.outstanding) - 1))))

    @rule(seconds=st.floats(0.0, 60.0))
    def advance(self, seconds: float) -> None:
        self.now += seconds
        leased = self.circuit.leased
        before = self.circuit.state
        self.circuit.handle_timer(self.now)
        if leased and before is _O:
            assert self.circuit.state is _O, "a leased circuit half-opened on its own"

    @rule(leased=st.booleans())
    def set_leased(self, leased: bool) -> None:
        self.circuit.set_leased(leased, self.now)

    @rule(shared=st.sampled_from([_C, _O, _H]), level=st.integers(0, 70))
    @precondition(lambda self: self.circuit.state in (_C, _O, _H))
    def adopt(self, shared: CircuitState, level: int) -> None:
        target = shared
        c = self.circuit
        if (
            c.state,
            {_C: Cause.SHARED_CLOSED, _O: Cause.SHARED_OPEN, _H: Cause.SHARED_HALF_OPEN}[target],
        ) in TRANSITIONS:
            c.adopt(target, self.now, reopen_at=self.now + 10.0 if target is _O else None, level=level)
            assert c.state is target
        else:
            before = (c.state, c.epoch)
            with pytest.raises(IllegalMoveError):
                c.adopt(target, self.now)
            assert (c.state, c.epoch) == before

    @rule(slots=st.integers(0, 3))
    def grant(self, slots: int) -> None:
        self.circuit.grant(slots)

    @invariant()
    def probes_in_flight_match_live_probe_tickets_and_the_slots(self) -> None:
        c = self.circuit
        live = sum(1 for t in self.outstanding if t.probe and t.epoch == c.epoch)
        assert c.probes_in_flight == live
        assert 0 <= c.probes_in_flight <= c.policy.permitted_probes
        if c.state is _H:
            assert 0 <= c.probe_limit <= c.policy.permitted_probes

    @invariant()
    def epoch_only_grows(self) -> None:
        assert self.circuit.epoch >= self.last_epoch
        self.last_epoch = self.circuit.epoch


LeasedCircuitMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
TestLeasedCircuitMachine = LeasedCircuitMachine.TestCase
