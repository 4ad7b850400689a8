"""Hypothesis state machine over overload judgement: restores, recalls and their ramps (pure pool).

Any interleaving of selections, successes, load-shaped and ordinary failures, cancellations
and the passing of time keeps these true: an endpoint is restored (``Cause.POOL_LOADED``)
only from OPEN, only by the load-shaped failure of a call in rotation (not a probe's) on
another endpoint, within ``overload_window`` of its ejection from rotation, and with its
escalation level given back to what it was before that ejection; a restored endpoint never
ramps, a recalled one that passes its probe does; every endpoint the pool keeps as
recallable is ejected (OPEN, or HALF_OPEN after its window) and still a member.
"""

from __future__ import annotations

import random

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import poise_py as poise
from poise_py import CircuitState, Fault
from poise_py._core._circuit import Cause, Ticket, Transition
from poise_py._core._listener import NullListener
from poise_py._core._pool import Pool
from poise_py._core._record import Member

IDS = ("a", "b", "c", "d")
WINDOW = 3.0


class Moves(NullListener):
    """Records every circuit move and ramp the pool reports."""

    def __init__(self) -> None:
        self.moves: list[tuple[Member, Transition]] = []
        self.ramps: list[Member] = []

    def transition(self, state: Member, transition: Transition) -> None:
        self.moves.append((state, transition))

    def ramp(self, state: Member, *, started: bool) -> None:
        if started:
            self.ramps.append(state)


class OverloadMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.pool = Pool(
            poise.CircuitPolicy(consecutive_failures=2, max_ejection_percent=1.0, overload_window=WINDOW),
            poise.RoundRobin(),
            random.Random(7),
        )
        self.heard = Moves()
        self.pool.listen(self.heard)
        self.pool.apply(self.now, added=[poise.Endpoint(i) for i in IDS])
        self.flying: list[tuple[Member, Ticket, float]] = []
        self.ejected_at: dict[Member, tuple[float, int]] = {}
        """When each endpoint was last ejected from rotation (CLOSED -> OPEN), and its level before."""

    def _heard(self, by: tuple[Member, Ticket, bool] | None, level_before: dict[Member, int]) -> None:
        """Check the moves the last operation reported; ``by``: the call it completed, and whether load-shaped."""
        for state, t in self.heard.moves:
            if t.source is CircuitState.CLOSED and t.target is CircuitState.OPEN:
                self.ejected_at[state] = (t.at, level_before.get(state, 0))
            if t.cause is Cause.POOL_LOADED:
                assert t.source is CircuitState.OPEN
                assert t.target is CircuitState.CLOSED
                assert by is not None, "a restore outside a completed call"
                other, ticket, overload = by
                assert other is not state, "restored by its own failure"
                assert overload, "restored by a failure that is not load-shaped"
                assert not ticket.probe, "restored by a probe's failure"
                at, level = self.ejected_at[state]
                assert t.at - at <= WINDOW, "restored after the overload window"
                assert state.circuit.level == level, "the escalation step was not given back"
                assert state not in self.heard.ramps, "a restored endpoint ramps"
        self.heard.moves.clear()
        self.heard.ramps.clear()

    @property
    def recalled(self) -> set[Member]:
        return set(self.pool.load.recalls)

    def _levels(self) -> dict[Member, int]:
        return {s: s.circuit.level for s in self.pool.members.values()}

    @rule(seconds=st.sampled_from([0.1, 0.5, 1.0, 2.5, 40.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        levels = self._levels()
        self.pool.handle_timer(self.now)
        self._heard(None, levels)

    @rule(endpoint=st.sampled_from(IDS))
    def select(self, endpoint: str) -> None:
        levels = self._levels()
        try:
            state, ticket, _, _ = self.pool.select(self.now, exclude=[i for i in IDS if i != endpoint])
        except (poise.NoEligibleEndpoints, poise.EmptyPool):
            self._heard(None, levels)
            return
        self._heard(None, levels)
        self.flying.append((state, ticket, self.now))

    @rule(endpoint=st.sampled_from(IDS), outcome=st.sampled_from(["success", "load", "load", "suspect", "cancel"]))
    def call(self, endpoint: str, outcome: str) -> None:
        """One call to ``endpoint`` that ends at once (the common case: the rules below interleave)."""
        self.select(endpoint)
        if self.flying and self.flying[-1][0].endpoint.id == endpoint and self.flying[-1][2] == self.now:
            self._complete(len(self.flying) - 1, outcome)

    @precondition(lambda self: bool(self.flying))
    @rule(data=st.data(), outcome=st.sampled_from(["success", "load", "suspect", "cancel"]))
    def complete(self, data: st.DataObject, outcome: str) -> None:
        self._complete(data.draw(st.integers(0, len(self.flying) - 1)), outcome)

    def _complete(self, index: int, outcome: str) -> None:
        recalled = self.recalled
        state, ticket, started = self.flying.pop(index)
        levels = self._levels()
        if outcome == "success":
            self.pool.succeed(state, ticket, self.now, started)
        elif outcome == "cancel":
            self.pool.cancel(state, ticket)
        else:
            fault = Fault.SUSPECT
            self.pool.complete(state, ticket, fault, self.now, latency=self.now - started, overload=outcome == "load")
        for s, t in self.heard.moves:
            if t.cause is Cause.PROBE_SUCCEEDED and s in recalled:
                assert s in self.heard.ramps, "a recalled endpoint back without a ramp"
        self._heard((state, ticket, outcome == "load"), levels)

    @invariant()
    def recallable_endpoints_are_ejected_members(self) -> None:
        # OPEN, or HALF_OPEN once its window ran out (a recall then finds nothing to do).
        members = set(self.pool.members.values())
        for state in self.pool.load.recallable:
            assert state in members
            assert state.circuit.state in (CircuitState.OPEN, CircuitState.HALF_OPEN)

    @invariant()
    def levels_are_never_negative(self) -> None:
        for state in self.pool.members.values():
            assert state.circuit.level >= 0
            assert state.circuit.ejections_in_row >= 0


TestOverloadMachine = OverloadMachine.TestCase
TestOverloadMachine.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
