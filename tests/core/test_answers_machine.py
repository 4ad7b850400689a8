"""Hypothesis state machine over what answers say: quota rests, quota limits and failure-penalty holds.

Any interleaving of selections, outcomes, quota answers, readiness verdicts, membership changes
and the passing of time keeps these true: a resting endpoint is never selected and is
ineligible until its quota resets, then comes back by itself; an endpoint is never given more
calls in flight than its provider said are left; every held failure ends by its time; the
circuit never hears of a quota.
"""

from __future__ import annotations

import random

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import poise_py as poise
from poise_py import CircuitState, Fault, IneligibleReason
from poise_py._core._circuit import Ticket
from poise_py._core._pool import Pool
from poise_py._core._record import Member

IDS = ("a", "b", "c")


class AnswersMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.pool = Pool(
            poise.CircuitPolicy(consecutive_failures=1_000_000, consecutive_transient_failures=None),
            poise.PowerOfTwoChoices(failure_penalty=0.5),
            random.Random(3),
        )
        self.pool.apply(self.now, added=[poise.Endpoint(i) for i in IDS])
        self.flying: list[tuple[Member, Ticket, float]] = []
        self.left: dict[str, int] = {}
        """The requests each endpoint's provider last said are left (while it has some)."""
        self.not_ready: set[str] = set()

    @rule(seconds=st.floats(0.0, 3.0))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.pool.handle_timer(self.now)

    @rule()
    def select(self) -> None:
        try:
            state, ticket, _, _ = self.pool.select(self.now)
        except (poise.NoEligibleEndpoints, poise.Overloaded):
            return
        assert self.pool.resting_until(state) is None, "a resting endpoint was selected"
        left = self.left.get(state.endpoint.id)
        if left is not None:
            assert state.inflight <= left, "more calls in flight than the quota left"
        self.flying.append((state, ticket, self.now))

    @rule(data=st.data(), fault=st.sampled_from([None, Fault.TRANSIENT, Fault.SUSPECT, Fault.CALLER]))
    def complete(self, data: st.DataObject, fault: Fault | None) -> None:
        if not self.flying:
            return
        state, ticket, started = self.flying.pop(data.draw(st.integers(0, len(self.flying) - 1)))
        if fault is None:
            self.pool.succeed(state, ticket, self.now, started)
        else:
            self.pool.complete(state, ticket, fault, self.now, latency=self.now - started)

    @rule(endpoint=st.sampled_from(IDS), remaining=st.integers(0, 4), resets_in=st.none() | st.floats(0.1, 10.0))
    def provider_answers(self, endpoint: str, remaining: int, resets_in: float | None) -> None:
        state = self.pool.members.get(endpoint)
        if state is None:
            return
        before = (state.circuit.state, state.circuit.consecutive_failures, state.circuit.epoch)
        self.pool.report_quota(state, self.now, remaining=remaining, resets_in=resets_in, share=remaining / 4)
        assert (state.circuit.state, state.circuit.consecutive_failures, state.circuit.epoch) == before
        if remaining:
            self.left[endpoint] = remaining
        else:
            self.left.pop(endpoint, None)
            assert self.pool.resting_until(state) is not None

    @rule(endpoint=st.sampled_from(IDS), ready=st.booleans())
    def readiness(self, endpoint: str, ready: bool) -> None:
        state = self.pool.members.get(endpoint)
        if state is None:
            return
        self.pool.set_readiness(state, None if ready else IneligibleReason.QUARANTINED)
        if ready:
            self.not_ready.discard(endpoint)
        else:
            self.not_ready.add(endpoint)

    @rule(endpoint=st.sampled_from(IDS))
    def leave_and_come_back(self, endpoint: str) -> None:
        if endpoint not in self.pool.members:
            return
        self.pool.apply(self.now, removed=[endpoint])
        self.pool.apply(self.now, added=[poise.Endpoint(endpoint)])
        self.left.pop(endpoint, None)
        self.not_ready.discard(endpoint)

    @invariant()
    def a_resting_endpoint_is_out_until_its_reset_and_back_after_it(self) -> None:
        for endpoint, state in self.pool.members.items():
            until = self.pool.resting_until(state)
            reason = self.pool.refusal(state)
            if until is not None:
                assert until > self.now or self.pool.next_deadline() is not None
                assert reason in (IneligibleReason.QUOTA, IneligibleReason.QUARANTINED)
            elif endpoint not in self.not_ready:
                assert reason is not IneligibleReason.QUOTA

    @invariant()
    def no_hold_outlives_its_time_and_the_circuit_never_opens(self) -> None:
        for state in self.pool.members.values():
            assert self.pool.held(state, self.now + 0.5 + 1e-9) == 0
            assert state.circuit.state is CircuitState.CLOSED  # the circuit never trips here


AnswersMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)
TestAnswersMachine = AnswersMachine.TestCase
