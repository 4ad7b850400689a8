"""Hypothesis state machine: the pool's incremental routing structures always equal a recomputation.

Membership changes, circuit moves (faults, probes, timers, resets, un-ejections), operator
statuses, active health verdicts, readiness and selections with exclusions run in any order; after every step each scope's candidates,
positions, loads, capacity, panic set and degraded set, every picker's structure (Fenwick tree, EDF
schedule, weight counts, Maglev members) and the router's plan are checked against a
brute-force recomputation from the endpoints' states. With a ``max_ejection_percent``
under 1.0 the guard refuses trips, so endpoints degrade (reserve capacity) and are
ejected as soon as the guard has room.
"""

from __future__ import annotations

import collections
import random

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import poise_py as poise
from poise_py import AdminStatus, CircuitState, DecisionMode, Fault, IneligibleReason, SelectionError
from poise_py._core._circuit import Ticket
from poise_py._core._ejection import ejection_allowance
from poise_py._core._pickers import (
    HashPicker,
    P2CPicker,
    WeightedRandomPicker,
    WeightedRoundRobinPicker,
)
from poise_py._core._pool import Pool
from poise_py._core._record import Member
from poise_py._core._routing import TRAFFIC_UNITS, DegradedScope, PanicScope, Scope, distribute, health

IDS = [f"e{i}" for i in range(10)]
OPTED_OUT = {AdminStatus.DRAINING, AdminStatus.DISABLED}
ADMIN_REFUSAL = {
    AdminStatus.DRAINING: IneligibleReason.DRAINING,
    AdminStatus.DISABLED: IneligibleReason.DISABLED,
    AdminStatus.FORCED_UNHEALTHY: IneligibleReason.UNHEALTHY,
}


def gate(state: Member) -> IneligibleReason | None:
    """Readiness first; then active health under AUTO, or the operator's status otherwise."""
    if state.readiness is not None:
        return state.readiness
    if state.admin is AdminStatus.AUTO:
        return state.health_refusal
    return ADMIN_REFUSAL.get(state.admin)


POLICIES: list[poise.Policy] = [
    poise.RoundRobin(),
    poise.Random(),
    poise.WeightedRandom(),
    poise.WeightedRoundRobin(),
    poise.PowerOfTwoChoices(),
    poise.PeakEwma(),
    poise.ConsistentHash(table_size=97),
    poise.ConsistentHash(table_size=97, balance_factor=1.25),
]
endpoints = st.builds(
    lambda i, tier, zone, weight: poise.Endpoint(i, tier=tier, zone=zone, weight=weight),
    st.sampled_from(IDS),
    st.integers(0, 2),
    st.sampled_from([None, "a", "b"]),
    st.integers(1, 4),
)


class RoutingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.pool: Pool | None = None
        self.held: list[tuple[Member, Ticket]] = []
        self.gone: list[Member] = []

    def clock(self) -> float:
        return self.now

    @initialize(
        policy=st.sampled_from(POLICIES),
        zone=st.sampled_from([None, "a"]),
        panic=st.sampled_from([None, poise.PanicMode.USE_ALL, poise.PanicMode.FAIL_CLOSED]),
        threshold=st.sampled_from([0.5, 1.0]),
        guard=st.sampled_from([1.0, 0.5, 0.2]),
        initial=st.lists(endpoints, max_size=6, unique_by=lambda e: e.id),
        outliers=st.booleans(),
    )
    def build(
        self,
        policy: poise.Policy,
        zone: str | None,
        panic: poise.PanicMode | None,
        threshold: float,
        guard: float,
        initial: list[poise.Endpoint],
        outliers: bool,
    ) -> None:
        self.pool = Pool(
            poise.CircuitPolicy(
                max_ejection_percent=guard,
                success_rate=(
                    poise.SuccessRateEjection(stdev_factor=0.5, minimum_hosts=2, request_volume=2, interval=5.0)
                    if outliers
                    else None
                ),
                consecutive_failures=2,
                minimum_volume=1,
                escalation=poise.Escalation(base=5.0, maximum=20.0),
            ),
            policy,
            random.Random(0),
            routing=poise.Routing(local_zone=zone),
            panic=None if panic is None else poise.Panic(threshold=threshold, mode=panic),
        )
        self.pool.apply(self.now, added=initial)

    @property
    def p(self) -> Pool:
        assert self.pool is not None
        return self.pool

    # -- membership ------------------------------------------------------------------

    @rule(endpoint=endpoints)
    def add(self, endpoint: poise.Endpoint) -> None:
        if endpoint.id not in self.p.members:
            self.p.apply(self.now, added=[endpoint])

    @rule(i=st.sampled_from(IDS))
    def remove(self, i: str) -> None:
        if i in self.p.members:
            self.gone.append(self.p.members[i])
            self.p.apply(self.now, removed=[i])

    @rule(
        leaving=st.sets(st.sampled_from(IDS), max_size=8),
        joining=st.lists(endpoints, max_size=8, unique_by=lambda e: e.id),
    )
    def change_many(self, leaving: set[str], joining: list[poise.Endpoint]) -> None:
        """One change that removes and adds several endpoints, whatever their states (a discovery
        snapshot): the pool takes them out and in a list per scope, with the same result."""
        removed = [i for i in IDS if i in leaving and i in self.p.members]  # in a fixed order
        added = [e for e in joining if e.id not in self.p.members or e.id in leaving]
        self.gone.extend(self.p.members[i] for i in removed)
        self.p.apply(self.now, removed=removed, added=added)

    @rule(endpoint=endpoints)
    def update(self, endpoint: poise.Endpoint) -> None:
        if endpoint.id in self.p.members:
            self.p.apply(self.now, updated=[endpoint])

    # -- traffic -----------------------------------------------------------------------

    @rule(key=st.integers(0, 50), exclude=st.sets(st.sampled_from(IDS), max_size=4))
    def select(self, key: int, exclude: set[str]) -> None:
        try:
            state, ticket, _, decision = self.p.select(self.now, key, exclude)
        except SelectionError:
            return
        assert state.live
        assert state.endpoint.id not in exclude
        assert decision.tier == state.endpoint.tier
        assert state.admin not in OPTED_OUT
        assert state.readiness is None
        if decision.mode is not DecisionMode.PANIC:
            assert gate(state) is None
            assert state.circuit.degraded == (decision.mode is DecisionMode.DEGRADED)
        self.held.append((state, ticket))

    @rule(data=st.data(), outcome=st.sampled_from([None, "cancel", *Fault]))
    @precondition(lambda self: self.held)
    def finish(self, data: st.DataObject, outcome: Fault | str | None) -> None:
        state, ticket = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        if outcome is None:
            self.p.succeed(state, ticket, self.now, self.now)
        elif outcome == "cancel":
            self.p.cancel(state, ticket)
        else:
            assert isinstance(outcome, Fault)
            self.p.complete(state, ticket, outcome, self.now, latency=0.01)

    @rule(
        i=st.sampled_from(IDS),
        outcome=st.sampled_from([None, Fault.SUSPECT, Fault.FATAL]),
        times=st.integers(1, 3),
    )
    def call_one(self, i: str, outcome: Fault | None, times: int) -> None:
        """Calls to ``i`` (every other endpoint excluded) that end at once: trips come quickly."""
        others = [x for x in self.p.members if x != i]
        for _ in range(times):
            try:
                state, ticket, _, _ = self.p.select(self.now, None, others)
            except SelectionError:
                return
            if outcome is None:
                self.p.succeed(state, ticket, self.now, self.now)
            else:
                self.p.complete(state, ticket, outcome, self.now, latency=0.01)

    @rule(seconds=st.sampled_from([0.5, 5.0, 30.0]))
    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.p.handle_timer(self.now)

    # -- operators ---------------------------------------------------------------------

    @rule(i=st.sampled_from(IDS), status=st.sampled_from(AdminStatus))
    def admin(self, i: str, status: AdminStatus) -> None:
        if i in self.p.members:
            self.p.set_admin(i, status)

    @rule(i=st.sampled_from(IDS))
    def reset(self, i: str) -> None:
        if i in self.p.members:
            self.p.reset_circuit(self.p.members[i], self.now)

    @rule(i=st.sampled_from(IDS), verdict=st.sampled_from([None, IneligibleReason.UNHEALTHY]))
    def active_health(self, i: str, verdict: IneligibleReason | None) -> None:
        if i in self.p.members:
            self.p.set_health(self.p.members[i], verdict)

    @rule(
        i=st.sampled_from(IDS),
        reason=st.sampled_from([None, IneligibleReason.NOT_READY, IneligibleReason.QUARANTINED]),
    )
    def readiness(self, i: str, reason: IneligibleReason | None) -> None:
        if i in self.p.members:
            self.p.set_readiness(self.p.members[i], reason)

    @rule(i=st.sampled_from(IDS))
    def uneject(self, i: str) -> None:
        if i in self.p.members:
            self.p.uneject(self.p.members[i], self.now)

    # -- the invariant ---------------------------------------------------------------

    @invariant()
    def structures_equal_a_recomputation(self) -> None:
        if self.pool is None:
            return
        pool = self.pool
        router = pool.router
        members = list(pool.members.values())
        zone = pool.routing.local_zone
        homed: dict[Scope, list[Member]] = collections.defaultdict(list)
        for s in members:
            tier = router.tiers[s.endpoint.tier]
            want = tier.local if tier.remote is None or s.endpoint.zone == zone else tier.remote
            assert s.home is want
            assert s.loads is want.loads
            homed[want].append(s)
        assert {t.number for t in router.order} == {s.endpoint.tier for s in members}
        assert [t.number for t in router.order] == sorted(router.tiers)
        for s in self.gone:
            assert (s.pos, s.is_candidate, s.panic_pos, s.degraded_pos, s.live) == (-1, False, -1, -1, False)
        for tier in router.order:
            in_tier = [s for s in members if s.endpoint.tier == tier.number]
            for scope in tier.scopes():
                mine = homed[scope]
                expected = {id(s) for s in mine if s.circuit.accepting and gate(s) is None and not s.circuit.degraded}
                self.check_scope(scope, expected, mine, panic_pos=False)
                assert scope.members == len(mine)
                assert scope.capacity == sum(s.admin not in OPTED_OUT for s in mine)
            if tier.panic is not None:
                usable = {
                    id(s)
                    for s in in_tier
                    if s.admin not in OPTED_OUT
                    and s.readiness is None
                    and s.circuit.state not in (CircuitState.BLOCKED, CircuitState.RETIRED)
                }
                self.check_scope(tier.panic, usable, in_tier, panic_pos=True)
            else:
                assert all(s.panic_pos == -1 for s in in_tier)
            reserve = [s for s in in_tier if s.circuit.accepting and gate(s) is None and s.circuit.degraded]
            self.check_scope(tier.degraded, {id(s) for s in reserve}, in_tier, degraded_pos=True)
            assert tier.degraded.members == tier.degraded.capacity == len(reserve)
        for s in members:
            assert s.is_candidate == (s.pos >= 0)  # the pool's test, kept beside the position
            assert not s.circuit.degraded or s.circuit.state is CircuitState.CLOSED
        self.check_plan()
        assert pool.ejected_count == sum(s.circuit.ejected for s in members)
        assert pool.degraded_count == sum(s.circuit.degraded for s in members)
        # The guard's promise: no endpoint left degraded while the guard has room to eject
        # it. (A trip past it, vouched for by the endpoints in rotation, may eject more.)
        allowance = ejection_allowance(len(members), pool.circuit_policy.max_ejection_percent)
        assert pool.degraded_count == 0 or pool.ejected_count >= allowance
        assert pool.weight_total == sum(s.endpoint.weight for s in members)
        assert sum(s.inflight for s in members) <= len(self.held)

    def check_scope(
        self,
        scope: Scope,
        expected: set[int],
        mine: list[Member],
        *,
        panic_pos: bool = False,
        degraded_pos: bool = False,
    ) -> None:
        candidates = scope.candidates
        assert {id(s) for s in candidates} == expected
        assert len(candidates) == len(expected)

        def position(s: Member) -> int:
            return s.panic_pos if panic_pos else s.degraded_pos if degraded_pos else s.pos

        for i, s in enumerate(candidates):
            assert position(s) == i
        for s in mine:
            if id(s) not in expected:
                assert position(s) == -1
        if degraded_pos:
            assert isinstance(scope, DegradedScope)
            assert not scope.tracked
            assert not scope.loads  # untracked: its pickers read the states
            mine = [s for s in mine if id(s) in expected]  # its members are its candidates
        elif not panic_pos:
            if self.p.stores_loads:  # else the policy never reads them
                assert list(scope.loads) == [s.inflight for s in candidates]
            if scope.totals:
                assert scope.load_total == sum(s.inflight for s in candidates)
        else:
            assert isinstance(scope, PanicScope)
            assert not scope.tracked
            assert not scope.loads  # untracked: its pickers read the states
        picker = scope.picker
        weights = [s.endpoint.weight for s in candidates]
        if isinstance(picker, WeightedRandomPicker):
            buckets = picker.buckets.buckets()
            assert picker.buckets.total == sum(weights)
            held = [s for states, *_ in buckets for s in states]
            assert {id(s) for s in held} == expected
            assert len(held) == len(expected)
            for states, bucket_weights, total, top, below in buckets:
                assert states  # only non-empty buckets are drawn from
                assert bucket_weights == [s.endpoint.weight for s in states]
                assert total == sum(bucket_weights)
                assert len({w.bit_length() for w in bucket_weights}) == 1
                assert top >= max(bucket_weights)
                assert below == sum(w < top for w in bucket_weights)
        if isinstance(picker, WeightedRoundRobinPicker):
            assert {id(s) for s in picker.schedule.live_states()} == expected
        if isinstance(picker, P2CPicker):
            member_weights = collections.Counter(s.endpoint.weight for s in mine)
            assert picker._weights == member_weights
            if len(member_weights) > 1:  # weighted mode: Envoy's least request over the candidates
                assert picker.schedule is not None
                assert {id(s) for s in picker.schedule.live_states()} == expected
                assert picker.pick == picker._least_request
            else:
                assert picker.schedule is None
                assert picker.pick == picker._least_loaded
        if isinstance(picker, HashPicker):
            assert {id(s) for s in picker.table._members if picker.is_candidate(s)} == expected
            assert picker._weight == sum(weights)
            table_members = {id(s) for s in picker.table._members}
            assert table_members == {id(s) for s in mine}

    def check_plan(self) -> None:
        pool = self.p
        router = pool.router
        factor = (7, 5)
        healths = [health(t.healthy, t.capacity, factor) for t in router.order]
        # Envoy's degraded load: after every tier's healthy load, each tier's degraded
        # endpoints take what its healthy ones leave, up to their own health.
        reserves = [
            min(TRAFFIC_UNITS - h, health(len(t.degraded.candidates), t.capacity, factor))
            for t, h in zip(router.order, healths, strict=True)
        ]
        levels = distribute(healths + reserves)
        n = len(healths)
        shares = [a + b for a, b in zip(levels[:n], levels[n:], strict=True)]
        combined = min(TRAFFIC_UNITS, sum(healths) + sum(reserves))
        panic = pool.panic
        for tier in router.order:
            usable = len(tier.local.candidates) + len(tier.degraded.candidates)
            usable += len(tier.remote.candidates) if tier.remote is not None else 0
            share = usable / tier.capacity if tier.capacity else 1.0
            assert tier.panicking == (
                panic is not None and combined < TRAFFIC_UNITS and tier.capacity > 0 and share < panic.threshold
            )
        if combined:
            assert [router.shares[t.number] for t in router.order] == shares
            assert router.routes[-1][0] == TRAFFIC_UNITS
            prev = degraded_total = 0
            for cum, scope, choice, _ in router.routes:
                if choice.mode is DecisionMode.DEGRADED:
                    assert isinstance(scope, DegradedScope)
                    assert scope.candidates
                    degraded_total += cum - prev
                prev = cum
            panicking = [t.panicking for t in router.order]
            assert degraded_total == sum(x for x, p in zip(levels[n:], panicking, strict=True) if not p)
        healthy_routes = [r for r in router.routes if r[2].mode is DecisionMode.HEALTHY]
        if router.fast is not None:
            assert len(router.routes) == 1
            assert healthy_routes
            assert pool.fast_scope is router.fast.candidates
        else:
            assert pool.fast_scope is None


RoutingMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestRoutingMachine = RoutingMachine.TestCase
