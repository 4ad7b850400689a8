"""Hypothesis: whatever the interleaving, a shared half-open round never has more probes in
flight, fleet-wide, than its budget.

Three balancers share one in-memory storage on a fake clock. Rules take permits on any of them
(refusals are demand), finish them as successes, failures or cancellations, sync any of them
(with or without the timers), and move time. The invariant counts, for each shared round
(the record's version), the probe permits in flight whose balancer leased them in that round:
never more than ``permitted_probes``. Time never passes ``probe_lease``, whose lapse
deliberately starts a fresh round (see docs/coordination.md).
"""

from __future__ import annotations

import collections

import hypothesis.strategies as st
import trio
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import poise_py as poise
from poise_py._core._circuit import Ticket
from poise_py._core._record import Member
from tests.support.clocks import FakeClock, endpoints

POLICY = poise.CircuitPolicy(
    consecutive_failures=1,
    minimum_volume=1,
    permitted_probes=1,
    escalation=poise.Escalation(base=5.0, maximum=5.0, jitter=0.0),
    max_ejection_percent=1.0,
)
LBS = 3


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.storage = poise.InMemoryStorage(clock=self.clock)
        coordination = poise.Coordination(self.storage, sync_interval=3600.0, probe_lease=3600.0, max_open_wait=None)
        self.lbs = [
            poise.LoadBalancer(
                poise.StaticDiscovery(endpoints("a")),
                circuit=POLICY,
                clock=self.clock,
                seed=i,
                coordination=coordination,
            )
            for i in range(LBS)
        ]
        self.permits: list[tuple[int, Member, Ticket, int]] = []  # lb, state, ticket, shared version

        async def start() -> None:
            for lb in self.lbs:
                await lb._apply(lb._discovery.snapshot, ignore_duplicate=True)  # type: ignore[attr-defined]
                coordinator = lb._coordinator
                assert coordinator is not None
                await coordinator.start(self.clock)

        trio.run(start)

    def _version(self, i: int, state: Member) -> int:
        coordinator = self.lbs[i]._coordinator
        assert coordinator is not None
        return coordinator.mirrored_version(state)

    @rule(i=st.integers(0, LBS - 1))
    def acquire(self, i: int) -> None:
        lb = self.lbs[i]
        try:
            state, ticket, _, _ = lb._pool.select(self.clock())
        except poise.NoEligibleEndpoints:
            coordinator = lb._coordinator
            assert coordinator is not None
            coordinator.refused(self.clock())
            return
        self.permits.append((i, state, ticket, self._version(i, state)))

    @precondition(lambda self: self.permits)
    @rule(k=st.integers(0, 100), outcome=st.sampled_from(["succeed", "fail", "cancel"]))
    def finish(self, k: int, outcome: str) -> None:
        i, state, ticket, _ = self.permits.pop(k % len(self.permits))
        pool = self.lbs[i]._pool
        if outcome == "cancel":
            pool.cancel(state, ticket)
        else:
            pool.complete(state, ticket, None if outcome == "succeed" else poise.Fault.SUSPECT, self.clock())

    @rule(i=st.integers(0, LBS - 1), poll=st.booleans(), timers=st.booleans())
    def sync(self, i: int, poll: bool, timers: bool) -> None:
        coordinator = self.lbs[i]._coordinator
        assert coordinator is not None
        trio.run(lambda: coordinator.sync(poll=poll, timers=timers))

    @rule(seconds=st.sampled_from([0.5, 2.0, 6.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def at_most_the_budget_of_probes_per_round_fleet_wide(self) -> None:
        per_round: collections.Counter[int] = collections.Counter()
        for _, state, ticket, version in self.permits:
            if ticket.probe and ticket.epoch == state.circuit.epoch:
                per_round[version] += 1
        assert all(n <= POLICY.permitted_probes for n in per_round.values()), per_round

    def teardown(self) -> None:
        for i, state, ticket, _ in self.permits:
            self.lbs[i]._pool.cancel(state, ticket)


LeaseMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestLeases = LeaseMachine.TestCase
