"""Degraded endpoints: what ``max_ejection_percent`` does with a trip it refuses.

The endpoint is not ejected (the pool is never emptied by ejection) but it leaves its
tier's healthy set and becomes reserve capacity, used only when the healthy endpoints
lack capacity (Envoy's degraded hosts, with the tiers' overprovisioning arithmetic). It
is ejected as soon as the guard has room.
"""

from __future__ import annotations

import collections

import pytest

import poise_py as poise
from poise_py import CircuitState, DecisionMode, Fault
from poise_py._core._circuit import Cause
from poise_py._core._pool import Pool
from poise_py._core._routing import TRAFFIC_UNITS
from tests.support.clocks import FakeClock, static_lb
from tests.support.routing import make_pool, tiered

DEGRADED, HEALTHY, SPILLOVER = DecisionMode.DEGRADED, DecisionMode.HEALTHY, DecisionMode.SPILLOVER


def guarded(percent: float = 0.5) -> poise.CircuitPolicy:
    """FATAL trips at once; at most ``percent`` of the pool ejected."""
    return poise.CircuitPolicy(max_ejection_percent=percent, escalation=poise.Escalation(base=10.0, jitter=0.0))


def fail(pool: Pool, endpoint_id: str, fault: Fault = Fault.FATAL, now: float = 0.0) -> None:
    """One call routed to ``endpoint_id`` (every other endpoint excluded) that fails."""
    others = [i for i in pool.members if i != endpoint_id]
    state, ticket, _, _ = pool.select(now, exclude=others)
    assert state.endpoint.id == endpoint_id
    pool.complete(state, ticket, fault, now)


def picks(
    pool: Pool,
    n: int,
    now: float = 0.0,
    *,
    failing: frozenset[str] = frozenset(),
    cancelled: frozenset[str] = frozenset(),
) -> collections.Counter[tuple[str, DecisionMode]]:
    """``n`` calls; those to ``failing`` endpoints fail (FATAL), those to ``cancelled``
    ones are cancelled (no outcome), the rest succeed."""
    counts: collections.Counter[tuple[str, DecisionMode]] = collections.Counter()
    for _ in range(n):
        state, ticket, at, decision = pool.select(now)
        counts[state.endpoint.id, decision.mode] += 1
        if state.endpoint.id in cancelled:
            pool.cancel(state, ticket)
        elif state.endpoint.id in failing:
            pool.complete(state, ticket, Fault.FATAL, now)
        else:
            pool.succeed(state, ticket, now, at)
    return counts


def test_a_refused_ejection_degrades_the_endpoint_instead() -> None:
    pool = make_pool(eps=tiered(4), circuit=guarded())
    fail(pool, "t0-0")
    fail(pool, "t0-1")
    assert pool.ejected_count == 2  # the guard's limit for 4
    fail(pool, "t0-2")
    c = pool.members["t0-2"].circuit
    assert c.state is CircuitState.CLOSED
    assert c.degraded
    assert c.degraded_cause is Cause.FATAL
    assert c.suppressed_ejections == 1
    assert pool.degraded_count == 1
    assert pool.ejected_count == 2


def test_a_degraded_endpoint_takes_no_traffic_while_the_healthy_ones_have_capacity() -> None:
    # Ten endpoints, at most one ejected: one OPEN, one degraded, eight healthy; 8/10 x 1.4
    # is over 100%, so the healthy ones take everything.
    pool = make_pool(eps=tiered(10), circuit=guarded(0.1))
    fail(pool, "t0-0")
    fail(pool, "t0-1")
    assert pool.members["t0-1"].circuit.degraded
    counts = picks(pool, 400)
    assert not any(endpoint == "t0-1" for endpoint, _ in counts)
    assert {mode for _, mode in counts} == {HEALTHY}
    assert pool.fast_scope is not None  # the hot path is unchanged while the reserve is idle


def test_degraded_endpoints_take_the_capacity_the_healthy_ones_lack_as_degraded() -> None:
    # Four endpoints: two OPEN, one degraded, one healthy. Healthy health 1.4/4 = 35%,
    # the reserve 35% more; scaled to the whole traffic, half each. (The degraded one's
    # calls are cancelled: a fault there, with the healthy one answering, would eject it.)
    pool = make_pool(eps=tiered(4), circuit=guarded())
    for i in range(3):
        fail(pool, f"t0-{i}")
    assert pool.router.routes[0][0] == TRAFFIC_UNITS // 2
    counts = picks(pool, 2000, cancelled=frozenset({"t0-2"}))
    assert set(counts) == {("t0-3", HEALTHY), ("t0-2", DEGRADED)}
    assert 900 < counts["t0-2", DEGRADED] < 1100


def test_every_endpoint_failing_leaves_the_degraded_ones_carrying_all_traffic() -> None:
    pool = make_pool(eps=tiered(2), circuit=guarded())
    fail(pool, "t0-0")
    fail(pool, "t0-1")
    assert pool.ejected_count == 1  # never emptied by ejection
    counts = picks(pool, 50, failing=frozenset({"t0-0", "t0-1"}))
    assert counts == {("t0-1", DEGRADED): 50}
    assert pool.members["t0-1"].circuit.suppressed_ejections == 51


def test_the_healthy_endpoints_of_every_tier_come_before_a_tiers_degraded_ones() -> None:
    # Tier 0: 4 endpoints, two OPEN, one degraded, one healthy (35%); tier 1 healthy
    # takes the rest before tier 0's reserve is used.
    pool = make_pool(eps=tiered(4, 2), circuit=guarded())
    for i in range(2):
        fail(pool, f"t0-{i}")
    fail(pool, "t1-0")
    fail(pool, "t0-2")
    assert pool.members["t1-0"].circuit.state is CircuitState.OPEN
    assert pool.members["t0-2"].circuit.degraded
    modes = {(mode, tier) for (_, mode, tier) in [(0, r[2].mode, r[2].tier) for r in pool.router.routes]}
    assert modes == {(HEALTHY, 0), (SPILLOVER, 1)}  # 35% + 70% healthy: no reserve needed
    counts = picks(pool, 500)
    assert not any(endpoint == "t0-2" for endpoint, _ in counts)


def test_the_degraded_endpoint_is_ejected_as_soon_as_the_guard_has_room() -> None:
    pool = make_pool(eps=tiered(2), circuit=guarded())
    fail(pool, "t0-0")
    fail(pool, "t0-1")
    b = pool.members["t0-1"].circuit
    assert b.degraded
    # t0-0's probe succeeds: it closes, and the guard's room ejects t0-1 at once.
    state, ticket, _, _ = pool.select(10.0, exclude=["t0-1"])
    assert ticket.probe
    pool.complete(state, ticket, None, 10.0)
    assert pool.members["t0-0"].circuit.state is CircuitState.CLOSED
    assert b.state is CircuitState.OPEN
    assert not b.degraded
    assert b.ejections == 1
    assert pool.degraded_count == 0


def test_a_success_ends_degradation_when_no_trip_condition_holds_any_more() -> None:
    policy = poise.CircuitPolicy(consecutive_failures=2, minimum_volume=1, max_ejection_percent=0.5)
    pool = make_pool(eps=tiered(2), circuit=policy)
    for _ in range(2):
        fail(pool, "t0-0", Fault.SUSPECT)
        fail(pool, "t0-1", Fault.SUSPECT)
    b = pool.members["t0-1"].circuit
    assert b.degraded
    assert b.degraded_cause is Cause.CONSECUTIVE_FAILURES
    state, ticket, at, decision = pool.select(0.0)
    assert decision.mode is DEGRADED
    pool.succeed(state, ticket, 0.0, at)  # the inlined success path must see it
    assert not b.degraded
    assert pool.degraded_count == 0
    assert pool.members["t0-1"].pos >= 0


def test_a_failure_rate_degradation_outlasts_one_success() -> None:
    policy = poise.CircuitPolicy(
        consecutive_failures=None, failure_rate=0.5, minimum_volume=2, max_ejection_percent=0.5
    )
    pool = make_pool(eps=tiered(2), circuit=policy)
    for _ in range(2):
        fail(pool, "t0-0", Fault.SUSPECT)
    for _ in range(3):
        fail(pool, "t0-1", Fault.SUSPECT)
    b = pool.members["t0-1"].circuit
    assert b.degraded
    picks(pool, 1)  # 3 failures of 4: still over the rate
    assert b.degraded
    picks(pool, 2)  # 3 of 6: the rate still holds at 50%
    assert b.degraded
    picks(pool, 1)  # 3 of 7: under it
    assert not b.degraded


def test_an_operator_reset_ends_degradation() -> None:
    pool = make_pool(eps=tiered(2), circuit=guarded())
    fail(pool, "t0-0")
    fail(pool, "t0-1")
    state = pool.members["t0-1"]
    pool.reset_circuit(state, 1.0)
    assert not state.circuit.degraded
    assert state.pos >= 0
    assert state.degraded_pos == -1


def test_removing_an_ejected_endpoint_makes_room_for_the_degraded_one() -> None:
    pool = make_pool(eps=tiered(4), circuit=guarded())
    for i in range(3):
        fail(pool, f"t0-{i}")
    assert pool.members["t0-2"].circuit.degraded
    pool.apply(1.0, removed=["t0-0"])  # 3 members: the guard allows 1, one is OPEN
    assert pool.members["t0-2"].circuit.degraded
    pool.apply(1.0, removed=["t0-1"])  # 2 members, none ejected: room again
    assert pool.members["t0-2"].circuit.state is CircuitState.OPEN
    assert pool.degraded_count == 0


@pytest.mark.anyio
async def test_snapshot_statistics_and_events_show_degraded_endpoints(clock: FakeClock) -> None:
    seen: list[poise.BalancerEvent] = []
    async with static_lb("a", "b", circuit=guarded(), policy=poise.RoundRobin(), clock=clock) as lb:
        lb.add_observer(seen.append)
        lb.acquire(exclude=["b"]).fail(Fault.FATAL)
        permit = lb.acquire(exclude=["a"])
        permit.fail(Fault.FATAL)
        snap = lb.snapshot()
        assert snap["b"].degraded
        assert snap["b"].state is CircuitState.CLOSED
        assert not snap["a"].degraded
        assert snap.degraded == 1
        assert snap.tiers[0].degraded == 1
        assert snap.available == 1
        permit = lb.acquire()
        assert permit.endpoint.id == "b"
        assert permit.decision == poise.Decision(DEGRADED, 0)
        permit.fail(Fault.SUSPECT)
        stats = lb.statistics()
        assert stats.degraded == 1
        assert stats.pool.selections[DEGRADED] == 1
        assert stats.endpoints["b"].selections[DEGRADED] == 1
        degraded = [e for e in seen if isinstance(e, poise.EndpointDegraded)]
        assert degraded == [poise.EndpointDegraded(at=clock(), endpoint_id="b", cause=Cause.FATAL)]
        clock.advance(10.0)
        probe = lb.acquire(exclude=["b"])
        assert probe.probe
        probe.succeed()  # a closes: the guard has room, b is ejected
        ended = [e for e in seen if isinstance(e, poise.EndpointDegradationEnded)]
        assert ended == [poise.EndpointDegradationEnded(at=clock(), endpoint_id="b", ejected=True)]
        assert lb.snapshot()["b"].state is CircuitState.OPEN
        assert lb.snapshot().degraded == 0


# -- the guard tells a dying endpoint from a sick pool -------------------------------------


def call(lb: poise.LoadBalancer, endpoint_id: str, fault: Fault | None) -> None:
    """One call routed to ``endpoint_id`` (every other endpoint excluded)."""
    permit = lb.acquire(exclude=[s.endpoint.id for s in lb.snapshot().endpoints if s.endpoint.id != endpoint_id])
    assert permit.endpoint.id == endpoint_id
    if fault is None:
        permit.succeed()
    else:
        permit.fail(fault)


def refuse(lb: poise.LoadBalancer, endpoint_id: str) -> None:
    """A departed member: refused connections (TRANSIENT) until the default run trips."""
    for _ in range(5):
        call(lb, endpoint_id, Fault.TRANSIENT)


@pytest.mark.anyio
async def test_dying_endpoints_leave_past_the_guard_while_the_rest_of_the_pool_answers(clock: FakeClock) -> None:
    # Six remembered members, five of them gone (a dead discovery publisher's last
    # snapshot): the live one answers, so each departed one is ejected, guard or not.
    ids = ("a", "b", "c", "d", "e", "live")
    async with static_lb(*ids, clock=clock) as lb:
        for endpoint_id in ids:
            call(lb, endpoint_id, None)
        for endpoint_id in ids[:5]:
            refuse(lb, endpoint_id)
        snap = lb.snapshot()
        assert [snap[i].state for i in ids] == [CircuitState.OPEN] * 5 + [CircuitState.CLOSED]
        assert snap.ejected == 5
        assert snap.degraded == 0
        for _ in range(20):
            async with lb.acquire() as permit:
                assert permit.endpoint.id == "live"


@pytest.mark.anyio
async def test_a_degraded_endpoint_leaves_at_its_next_fault_once_the_pool_answers_again(clock: FakeClock) -> None:
    async with static_lb("a", "b", "c", "d", clock=clock) as lb:
        for endpoint_id in "abcd":
            call(lb, endpoint_id, None)
        refuse(lb, "a")
        refuse(lb, "b")
        call(lb, "d", Fault.SUSPECT)  # d's latest call failed: no vouching
        refuse(lb, "c")
        assert lb.snapshot()["c"].degraded
        call(lb, "d", None)  # d answers again
        call(lb, "c", Fault.TRANSIENT)
        snap = lb.snapshot()
        assert snap["c"].state is CircuitState.OPEN
        assert snap.degraded == 0
        assert snap.ejected == 3


@pytest.mark.anyio
async def test_a_sick_pool_is_not_drained_past_the_guard(clock: FakeClock) -> None:
    # A shared dependency fails every call on every endpoint: the ones still in rotation
    # fail too, so the guard holds and the rest are degraded, not ejected.
    ids = ("a", "b", "c", "d", "e", "f")
    async with static_lb(*ids, clock=clock) as lb:
        for endpoint_id in ids:
            call(lb, endpoint_id, None)
        for _ in range(5):  # one burst: every endpoint fails each round
            for endpoint_id in ids:
                if lb.snapshot()[endpoint_id].state is CircuitState.CLOSED:
                    call(lb, endpoint_id, Fault.SUSPECT)
        snap = lb.snapshot()
        assert snap.ejected == 3  # the guard's limit for six
        assert snap.degraded == 3
        assert snap.available == 3


@pytest.mark.anyio
async def test_the_last_endpoint_in_rotation_is_never_ejected_past_the_guard(clock: FakeClock) -> None:
    # Nobody is left to vouch for the pool: the guard holds as before.
    async with static_lb("a", "b", clock=clock) as lb:
        call(lb, "a", None)
        call(lb, "b", None)
        refuse(lb, "a")
        refuse(lb, "b")
        snap = lb.snapshot()
        assert snap["a"].state is CircuitState.OPEN
        assert snap["b"].state is CircuitState.CLOSED
        assert snap["b"].degraded
        assert snap.available == 1
