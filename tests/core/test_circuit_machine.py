"""Hypothesis state machine over the pure circuit: the invariants hold for any interleaving."""

from __future__ import annotations

import random

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import poise_py as poise
from poise_py import CircuitState, Fault
from poise_py._core._circuit import Circuit, Ticket

faults = st.sampled_from([None, *Fault])


class CircuitMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.circuit: Circuit | None = None
        self.outstanding: list[Ticket] = []
        self.last_epoch = 0

    @rule(
        probes=st.integers(1, 3),
        consecutive=st.integers(1, 4),
        volume=st.integers(1, 5),
        rate=st.none() | st.floats(0.1, 1.0),
        window=st.sampled_from([poise.CountWindow(8), poise.TimeWindow(10.0, 5)]),
        slow=st.none() | st.floats(0.1, 2.0),
        transient=st.none() | st.integers(2, 4),
    )
    @precondition(lambda self: self.circuit is None)
    def build(
        self,
        probes: int,
        consecutive: int,
        volume: int,
        rate: float | None,
        window: poise.CountWindow | poise.TimeWindow,
        slow: float | None,
        transient: int | None,
    ) -> None:
        policy = poise.CircuitPolicy(
            consecutive_failures=consecutive,
            consecutive_transient_failures=transient,
            failure_rate=rate,
            minimum_volume=volume,
            permitted_probes=probes,
            window=window,
            slow_call_rate=0.5 if slow is not None else None,
            slow_call_duration=slow,
            escalation=poise.Escalation(base=5.0, maximum=40.0),
        )
        self.circuit = Circuit(policy, random.Random(1).random, self.now)

    def _snapshot(self) -> tuple[object, ...]:
        c = self.circuit
        assert c is not None
        return (c.state, c.epoch, c.reopen_at, c.consecutive_failures, c.window_counts(self.now), c.level)

    @rule()
    @precondition(lambda self: self.circuit is not None)
    def acquire(self) -> None:
        assert self.circuit is not None
        got = self.circuit.try_acquire(self.now)
        if isinstance(got, Ticket):
            assert got.epoch == self.circuit.epoch
            self.outstanding.append(got)

    @rule(data=st.data(), fault=faults, latency=st.floats(0.0, 3.0), may_eject=st.booleans())
    @precondition(lambda self: self.circuit is not None and self.outstanding)
    def record(self, data: st.DataObject, fault: Fault | None, latency: float, may_eject: bool) -> None:
        c = self.circuit
        assert c is not None
        ticket = self.outstanding.pop(data.draw(st.integers(0, len(self.outstanding) - 1)))
        if ticket.epoch != c.epoch:
            before = self._snapshot()
            stale = c.stale_results
            assert c.record(ticket, fault, self.now, latency=latency, may_eject=may_eject) is None
            assert self._snapshot() == before, "a stale result changed the circuit"
            assert c.stale_results == stale + 1
        else:
            c.record(ticket, fault, self.now, latency=latency, may_eject=may_eject)

    @rule(data=st.data(), latency=st.floats(0.0, 3.0))
    @precondition(lambda self: self.circuit is not None and self.outstanding)
    def succeed_fast(self, data: st.DataObject, latency: float) -> None:
        # The pool's exit: the CLOSED fast path, else the long way (as Pool.succeed does).
        c = self.circuit
        assert c is not None
        ticket = self.outstanding.pop(data.draw(st.integers(0, len(self.outstanding) - 1)))
        before = self._snapshot()
        if c.record_success(ticket, self.now, self.now - latency):
            assert c.state is CircuitState.CLOSED
            assert ticket is c.fast_ticket
            assert (c.state, c.epoch, c.reopen_at, c.consecutive_failures) == (*before[:3], 0)
        else:
            assert self._snapshot() == before, "a refused fast path changed the circuit"
            c.record(ticket, None, self.now, latency=latency)

    @rule(data=st.data())
    @precondition(lambda self: self.circuit is not None and self.outstanding)
    def cancel(self, data: st.DataObject) -> None:
        c = self.circuit
        assert c is not None
        ticket = self.outstanding.pop(data.draw(st.integers(0, len(self.outstanding) - 1)))
        before = self._snapshot()
        c.cancel(ticket)
        assert self._snapshot() == before, "a cancellation changed the circuit's windows or state"

    @rule(seconds=st.floats(0.0, 60.0))
    def advance(self, seconds: float) -> None:
        self.now += seconds
        if self.circuit is not None:
            self.circuit.handle_timer(self.now)

    @rule()
    @precondition(lambda self: self.circuit is not None)
    def recall(self) -> None:
        c = self.circuit
        assert c is not None
        state, level = c.state, c.level
        transition = c.recall(self.now)
        if state is CircuitState.OPEN:  # the pool recalls it: probed now, nothing else changes
            assert transition is not None
            assert (c.state, c.level) == (CircuitState.HALF_OPEN, level)
        else:
            assert transition is None
            assert c.state is state

    @rule()
    @precondition(lambda self: self.circuit is not None)
    def restore(self) -> None:
        c = self.circuit
        assert c is not None
        state, level, in_row, ejections, epoch = c.state, c.level, c.ejections_in_row, c.ejections, c.epoch
        leased = c.leased
        transition = c.restore(self.now)
        if state is CircuitState.OPEN and not leased:  # the pool undoes a misjudged ejection: CLOSED, one step back
            assert transition is not None
            assert (c.state, c.epoch) == (CircuitState.CLOSED, epoch + 1)
            assert (c.level, c.ejections_in_row, c.ejections) == (max(0, level - 1), max(0, in_row - 1), ejections)
            assert c.tally.runs == 0
        else:
            assert transition is None
            assert (c.state, c.epoch) == (state, epoch)

    @rule()
    @precondition(lambda self: self.circuit is not None)
    def reset(self) -> None:
        assert self.circuit is not None
        self.circuit.reset(self.now)
        assert self.circuit.state is CircuitState.CLOSED

    @invariant()
    def probes_never_exceed_permitted_slots(self) -> None:
        c = self.circuit
        if c is not None:
            assert 0 <= c.probes_in_flight <= c.policy.permitted_probes
            live_probes = sum(1 for t in self.outstanding if t.probe and t.epoch == c.epoch)
            assert c.probes_in_flight == live_probes

    @invariant()
    def only_a_closed_circuit_admits_and_with_its_current_epoch(self) -> None:
        c = self.circuit
        if c is not None:
            if c.state is CircuitState.CLOSED:
                assert c.fast_ticket is not None
                assert c.fast_ticket == c.try_acquire(self.now)  # the same ticket, without a side effect
                assert (c.fast_ticket.epoch, c.fast_ticket.probe) == (c.epoch, False)
            else:
                assert c.fast_ticket is None

    @invariant()
    def the_fast_path_skips_the_rules_exactly_when_there_are_none(self) -> None:
        c = self.circuit
        if c is not None:
            tally = c.tally
            assert tally.counts_only is (tally.slow_limit is None and tally.window is None)

    @invariant()
    def the_volume_counts_down_from_the_count_windows_size(self) -> None:
        c = self.circuit
        if c is not None:
            tally = c.tally
            window = c.policy.window
            assert tally.volume_cap == (window.size if isinstance(window, poise.CountWindow) else 0)
            assert 0 <= tally.volume_room <= tally.volume_cap
            assert tally.volume == tally.volume_cap - tally.volume_room

    @invariant()
    def epoch_only_grows(self) -> None:
        c = self.circuit
        if c is not None:
            assert c.epoch >= self.last_epoch
            self.last_epoch = c.epoch

    @invariant()
    def open_circuits_have_a_bounded_deadline(self) -> None:
        c = self.circuit
        if c is not None and c.state is CircuitState.OPEN:
            assert c.reopen_at is not None
            assert c.reopen_at - self.now <= max(40.0, c.policy.max_retry_after)

    @invariant()
    def only_a_closed_circuit_is_degraded_and_the_runs_stay_in_range(self) -> None:
        c = self.circuit
        if c is not None:
            assert not c.degraded or (c.state is CircuitState.CLOSED and c.degraded_cause is not None)
            assert 0 <= c.consecutive_failures < 2**32
            assert 0 <= c.consecutive_transient_failures < 2**32


CircuitMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
TestCircuitMachine = CircuitMachine.TestCase
