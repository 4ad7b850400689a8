"""Tiers, spillover, zones, panic and decisions, on the pure pool and through the balancer."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import poise_py as poise
from poise_py import AdminStatus, CircuitState, DecisionMode, IneligibleReason, NoEligibleEndpoints
from poise_py._core._circuit import PanicTicket
from poise_py._core._record import MODE_INDEX
from poise_py._core._routing import TRAFFIC_UNITS, distribute, health
from tests.support.clocks import FakeClock
from tests.support.routing import decisions, eject, make_pool, run, shares, tiered

HEALTHY, SPILLOVER, PANIC = DecisionMode.HEALTHY, DecisionMode.SPILLOVER, DecisionMode.PANIC
ENVOY = (7, 5)  # the overprovisioning factor 1.4 as a ratio


def unhealthy(pool: object, *ids: str) -> None:
    for i in ids:
        pool.set_admin(i, AdminStatus.FORCED_UNHEALTHY)  # type: ignore[attr-defined]


def tier_shares(pool: object) -> dict[int, float]:
    return {t: s / TRAFFIC_UNITS for t, s in pool.router.shares.items()}  # type: ignore[attr-defined]


# -- the arithmetic ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("healthy", "expected"),
    [(14, 1.0), (10, 1.0), (7, 0.7), (5, 0.5), (0, 0.0)],
    ids=["100%", "71.4%", "50%", "35.7%", "0%"],
)
def test_tier_health_is_healthy_share_times_1_4_capped_at_100_percent(healthy: int, expected: float) -> None:
    assert health(healthy, 14, ENVOY) == round(expected * TRAFFIC_UNITS)


def test_distribute_fills_tiers_in_order_and_scales_up_when_health_is_short() -> None:
    u = TRAFFIC_UNITS
    assert distribute([u, u, u]) == [u, 0, 0]
    assert distribute([700_000, u, u]) == [700_000, 300_000, 0]
    assert distribute([700_000, 0, u]) == [700_000, 0, 300_000]
    assert distribute([0, 700_000, u]) == [0, 700_000, 300_000]
    assert distribute([300_000, 200_000]) == [600_000, 400_000]  # 50% in all: scaled to 100%
    assert distribute([0, 0]) == [0, 0]


# -- the LLM gateway's waterfall: T0 -> T1 -> T2 ------------------------------------------------


def test_llm_gateway_waterfall_spills_t0_to_t1_to_t2_by_the_overprovisioning_arithmetic() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(14, 14, 4))
    t0 = [f"t0-{i}" for i in range(14)]
    t1 = [f"t1-{i}" for i in range(14)]

    # 100% healthy: T0 takes everything, HEALTHY.
    assert tier_shares(pool) == {0: 1.0, 1: 0.0, 2: 0.0}
    assert decisions(pool, 1000) == {(HEALTHY, 0): 1000}

    # 71.4% healthy (10 of 14): x 1.4 is exactly 100%, so still no spill.
    unhealthy(pool, *t0[:4])
    assert tier_shares(pool) == {0: 1.0, 1: 0.0, 2: 0.0}
    assert decisions(pool, 1000) == {(HEALTHY, 0): 1000}

    # 50% healthy: T0 keeps 70%, the other 30% spills to T1.
    unhealthy(pool, *t0[4:7])
    assert tier_shares(pool) == {0: 0.7, 1: 0.3, 2: 0.0}
    seen = decisions(pool, 100_000)
    assert set(seen) == {(HEALTHY, 0), (SPILLOVER, 1)}
    assert seen[SPILLOVER, 1] / 100_000 == pytest.approx(0.3, abs=0.01)

    # 0% healthy: everything spills to T1.
    unhealthy(pool, *t0[7:])
    assert tier_shares(pool) == {0: 0.0, 1: 1.0, 2: 0.0}
    assert decisions(pool, 1000) == {(SPILLOVER, 1): 1000}

    # And T1 at 50% spills on to T2 by the same rule.
    unhealthy(pool, *t1[:7])
    assert tier_shares(pool) == {0: 0.0, 1: 0.7, 2: 0.3}
    seen = decisions(pool, 100_000)
    assert seen[SPILLOVER, 2] / 100_000 == pytest.approx(0.3, abs=0.01)

    # Recovery: T0 back to 100% takes everything again.
    for i in t0:
        pool.set_admin(i, AdminStatus.AUTO)
    assert decisions(pool, 1000) == {(HEALTHY, 0): 1000}


def test_open_circuits_spill_like_unhealthy_endpoints() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(2, 2))
    eject(pool, "t0-0")
    assert tier_shares(pool) == {0: 0.7, 1: 0.3}
    eject(pool, "t0-1")
    assert tier_shares(pool) == {0: 0.0, 1: 1.0}
    assert run(pool, 100).keys() == {"t1-0", "t1-1"}


def test_all_tiers_short_of_health_scale_up_rather_than_drop_traffic() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(10, 10))
    unhealthy(pool, *(f"t0-{i}" for i in range(7)), *(f"t1-{i}" for i in range(8)))
    # T0 30% x 1.4 = 42%, T1 20% x 1.4 = 28%: 70% in all, scaled to 60% / 40%.
    assert tier_shares(pool) == {0: 0.6, 1: 0.4}


def test_a_factor_of_one_spills_as_soon_as_one_endpoint_is_unhealthy() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(10, 10), routing=poise.Routing(overprovisioning_factor=1.0))
    unhealthy(pool, "t0-0")
    assert tier_shares(pool) == {0: 0.9, 1: pytest.approx(0.1)}


def test_draining_is_taken_out_of_capacity_while_forced_unhealthy_spills() -> None:
    drained = make_pool(poise.RoundRobin(), tiered(2, 2))
    drained.set_admin("t0-0", AdminStatus.DRAINING)
    assert tier_shares(drained) == {0: 1.0, 1: 0.0}  # one of one is 100%
    assert run(drained, 10).keys() == {"t0-1"}
    forced = make_pool(poise.RoundRobin(), tiered(2, 2))
    forced.set_admin("t0-0", AdminStatus.FORCED_UNHEALTHY)
    assert tier_shares(forced) == {0: 0.7, 1: 0.3}


def test_the_first_tier_with_capacity_is_the_healthy_one() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(1, 2))
    pool.set_admin("t0-0", AdminStatus.DISABLED)  # the operator took all of T0 out
    assert decisions(pool, 100) == {(HEALTHY, 1): 100}
    pool.set_admin("t0-0", AdminStatus.FORCED_UNHEALTHY)  # unhealthy capacity: a spill
    assert decisions(pool, 100) == {(SPILLOVER, 1): 100}


def test_tiers_come_and_go_with_discovery() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(1))
    pool.apply(0.0, added=[poise.Endpoint("backup", tier=3)], removed=["t0-0"])
    assert decisions(pool, 10) == {(HEALTHY, 3): 10}
    pool.apply(0.0, added=[poise.Endpoint("primary", tier=0)])
    assert decisions(pool, 10) == {(HEALTHY, 0): 10}
    pool.apply(0.0, updated=[poise.Endpoint("primary", tier=5)])
    assert decisions(pool, 10) == {(HEALTHY, 3): 10}
    assert [t.number for t in pool.router.order] == [3, 5]


def test_a_retry_excluding_the_whole_first_tier_spills_to_the_next() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(2, 1))
    state, ticket, _, decision = pool.select(0.0, exclude=["t0-0", "t0-1"])
    assert (state.endpoint.id, decision.mode, decision.tier) == ("t1-0", SPILLOVER, 1)
    pool.cancel(state, ticket)
    with pytest.raises(NoEligibleEndpoints) as info:
        pool.select(0.0, exclude=["t0-0", "t0-1", "t1-0"])
    assert info.value.reasons[IneligibleReason.EXCLUDED] == 3


# -- zones ---------------------------------------------------------------------------------


def zoned(local: int, remote: int) -> list[poise.Endpoint]:
    return [poise.Endpoint(f"near-{i}", zone="a") for i in range(local)] + [
        poise.Endpoint(f"far-{i}", zone="b") for i in range(remote)
    ]


def test_the_local_zone_takes_all_traffic_while_healthy() -> None:
    pool = make_pool(poise.RoundRobin(), zoned(4, 4), routing=poise.Routing(local_zone="a"))
    assert {i[:4] for i in run(pool, 1000)} == {"near"}
    assert decisions(pool, 100) == {(HEALTHY, 0): 100}


def test_the_local_zone_spills_to_other_zones_by_the_same_rule() -> None:
    pool = make_pool(poise.RoundRobin(), zoned(10, 10), routing=poise.Routing(local_zone="a"))
    unhealthy(pool, *(f"near-{i}" for i in range(5)))  # 50% x 1.4 = 70% stays local
    seen = decisions(pool, 100_000)
    assert seen[SPILLOVER, 0] / 100_000 == pytest.approx(0.3, abs=0.01)
    assert tier_shares(pool) == {0: 1.0}  # the tier itself is healthy: no tier spill


def test_without_a_local_endpoint_other_zones_are_healthy() -> None:
    pool = make_pool(poise.RoundRobin(), zoned(0, 3), routing=poise.Routing(local_zone="a"))
    assert decisions(pool, 10) == {(HEALTHY, 0): 10}


# -- decisions, counters, snapshots --------------------------------------------------------


def test_rerouted_selections_are_counted_on_the_endpoint_that_took_them() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(2, 1), panic=poise.Panic(threshold=0.6))
    decisions(pool, 10)
    unhealthy(pool, "t0-0", "t0-1")
    decisions(pool, 5)  # all spill to t1-0
    spilled = pool.members["t1-0"].mode_selections
    assert spilled[MODE_INDEX[SPILLOVER]] == 5
    unhealthy(pool, "t1-0")  # nothing healthy: panic in tier 0
    decisions(pool, 4)
    panicked = sum(pool.members[i].mode_selections[MODE_INDEX[PANIC]] for i in ("t0-0", "t0-1"))
    assert panicked == 4
    assert all(s.mode_selections[MODE_INDEX[HEALTHY]] == 0 for s in pool.members.values())  # derived


@pytest.mark.anyio
async def test_permits_carry_their_decision_and_the_snapshot_shows_tiers() -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery(tiered(2, 1)), policy=poise.RoundRobin(), clock=FakeClock(), seed=1)
    async with lb:
        async with lb.acquire() as permit:
            assert permit.decision == poise.Decision(HEALTHY, 0)
            assert not permit.probe
        lb.set_status("t0-0", AdminStatus.FORCED_UNHEALTHY)
        lb.set_status("t0-1", AdminStatus.FORCED_UNHEALTHY)
        async with lb.acquire() as permit:
            assert permit.decision == poise.Decision(SPILLOVER, 1)
            assert "spillover" in repr(permit)
        assert lb.statistics().pool.selections == {
            HEALTHY: 1,
            SPILLOVER: 1,
            PANIC: 0,
            DecisionMode.DEGRADED: 0,
            DecisionMode.LIMITED: 0,
        }
        snap = lb.snapshot()
        assert [(t.tier, t.endpoints, t.healthy, t.share, t.panicking) for t in snap.tiers] == [
            (0, 2, 0, 0.0, False),
            (1, 1, 1, 1.0, False),
        ]


# -- panic ---------------------------------------------------------------------------------


def test_panic_is_off_by_default_so_a_dead_single_dependency_fails_fast() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(1))
    eject(pool, "t0-0")
    with pytest.raises(NoEligibleEndpoints) as info:
        pool.select(0.0)
    assert info.value.reasons[IneligibleReason.OPEN] == 1


def test_use_all_panic_spreads_over_ejected_endpoints_of_the_scope() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(5), panic=poise.Panic(threshold=0.5))
    for i in range(3):  # 2 of 5 healthy: 40% < 50%, and 56% combined < 100%
        eject(pool, f"t0-{i}")
    assert pool.router.tiers[0].panicking
    seen = decisions(pool, 500)
    assert seen == {(PANIC, 0): 500}
    assert run(pool, 500).keys() == {f"t0-{i}" for i in range(5)}


def test_a_panic_permit_on_an_open_circuit_is_counted_but_cannot_close_it() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(2), panic=poise.Panic(threshold=0.6))
    eject(pool, "t0-0")
    circuit = pool.members["t0-0"].circuit
    epoch = circuit.epoch
    successes = pool.members["t0-0"].successes
    for _ in range(20):
        state, ticket, now, decision = pool.select(0.0)
        assert decision.mode is PANIC
        if state.endpoint.id == "t0-0":
            assert type(ticket) is PanicTicket
            assert ticket.epoch == epoch
            assert not ticket.probe
        pool.succeed(state, ticket, 0.0, now)
    assert circuit.state is CircuitState.OPEN
    assert circuit.epoch == epoch
    assert pool.members["t0-0"].successes == successes + 10
    assert pool.members["t0-0"].stale == 0


def test_a_failed_panic_call_does_not_escalate_an_open_circuit() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(1), panic=poise.Panic())
    eject(pool, "t0-0")
    circuit = pool.members["t0-0"].circuit
    before = (circuit.state, circuit.epoch, circuit.level, circuit.reopen_at)
    state, ticket, now, decision = pool.select(0.0)
    assert decision.mode is PANIC
    pool.complete(state, ticket, poise.Fault.PERMANENT, now)
    assert (circuit.state, circuit.epoch, circuit.level, circuit.reopen_at) == before


def test_a_panic_pick_of_a_half_open_endpoint_is_a_real_probe() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(1), panic=poise.Panic())
    eject(pool, "t0-0")
    reopen_at = pool.members["t0-0"].circuit.reopen_at
    assert reopen_at is not None
    state, ticket, now, _decision = pool.select(reopen_at)
    assert ticket.probe
    assert type(ticket) is not PanicTicket
    pool.succeed(state, ticket, reopen_at, now)
    assert state.circuit.state is CircuitState.CLOSED


@pytest.mark.parametrize("status", [AdminStatus.DRAINING, AdminStatus.DISABLED])
def test_panic_never_revives_draining_or_disabled_endpoints(status: AdminStatus) -> None:
    pool = make_pool(poise.RoundRobin(), tiered(6), panic=poise.Panic(threshold=1.0))
    pool.set_admin("t0-0", status)
    pool.set_admin("t0-1", status)
    eject(pool, "t0-2", fault=poise.Fault.PERMANENT)
    for i in (3, 4):
        eject(pool, f"t0-{i}")
    assert pool.router.tiers[0].panicking
    picked = run(pool, 2000)
    assert picked.keys() == {"t0-3", "t0-4", "t0-5"}
    for i in (3, 4, 5):
        pool.set_admin(f"t0-{i}", AdminStatus.DISABLED)
    with pytest.raises(NoEligibleEndpoints) as info:
        pool.select(0.0)
    reasons = info.value.reasons
    assert (reasons[IneligibleReason.DISABLED], reasons[IneligibleReason.PERMANENT]) == (
        5 if status is AdminStatus.DISABLED else 3,
        1,
    )


def test_panic_uses_actively_unhealthy_endpoints_but_never_unready_ones() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(4), panic=poise.Panic(threshold=1.0))
    members = pool.members
    pool.set_health(members["t0-0"], IneligibleReason.UNHEALTHY)
    pool.set_readiness(members["t0-1"], IneligibleReason.QUARANTINED)
    pool.set_readiness(members["t0-2"], IneligibleReason.NOT_READY)
    assert pool.router.tiers[0].panicking
    assert run(pool, 400).keys() == {"t0-0", "t0-3"}


def test_panic_is_not_considered_while_combined_health_is_full() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(10, 10), panic=poise.Panic(threshold=0.5))
    unhealthy(pool, *(f"t0-{i}" for i in range(7)))  # T0 at 30%, but T1 covers the rest
    assert not pool.router.tiers[0].panicking
    assert set(decisions(pool, 2000)) == {(HEALTHY, 0), (SPILLOVER, 1)}


def test_panic_with_no_health_anywhere_uses_the_first_tier() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(2, 2), panic=poise.Panic())
    unhealthy(pool, "t0-0", "t0-1", "t1-0", "t1-1")
    assert decisions(pool, 100) == {(PANIC, 0): 100}
    assert run(pool, 100).keys() == {"t0-0", "t0-1"}


def test_fail_closed_panic_refuses_the_panicking_tier_with_reasons() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(5), panic=poise.Panic(threshold=0.5, mode=poise.PanicMode.FAIL_CLOSED))
    for i in range(3):
        eject(pool, f"t0-{i}")
    with pytest.raises(NoEligibleEndpoints) as info:
        pool.select(0.0)
    reasons = info.value.reasons
    assert reasons[IneligibleReason.OPEN] == 3
    assert reasons[IneligibleReason.PANIC] == 2
    assert sum(reasons.values()) == info.value.total == 5


def test_fail_closed_panic_refuses_each_panicking_tier_and_ends_with_combined_health() -> None:
    pool = make_pool(
        poise.RoundRobin(), tiered(10, 10), panic=poise.Panic(threshold=0.5, mode=poise.PanicMode.FAIL_CLOSED)
    )
    unhealthy(pool, *(f"t0-{i}" for i in range(7)), *(f"t1-{i}" for i in range(9)))
    # T0 30% (x 1.4 = 42%), T1 10% (14%): 56% combined, both tiers panicking.
    with pytest.raises(NoEligibleEndpoints) as info:
        pool.select(0.0)
    reasons = info.value.reasons
    assert reasons[IneligibleReason.UNHEALTHY] == 16
    refused_tier = 0 if reasons[IneligibleReason.PANIC] == 3 else 1
    assert reasons[IneligibleReason.PANIC] == (3 if refused_tier == 0 else 1)
    assert reasons[IneligibleReason.SCOPE] == (1 if refused_tier == 0 else 3)
    for i in range(9):  # T1 recovers: combined health is full again, so no panic
        pool.set_admin(f"t1-{i}", AdminStatus.AUTO)
    assert not pool.router.tiers[0].panicking
    assert set(decisions(pool, 2000)) == {(HEALTHY, 0), (SPILLOVER, 1)}


def test_the_panic_hook_reports_start_and_end_per_tier() -> None:
    events: list[tuple[int, bool]] = []
    shares: list[float] = []

    def hook(tier: int, *, started: bool, healthy_share: float) -> None:
        events.append((tier, started))
        shares.append(healthy_share)

    pool = make_pool(poise.RoundRobin(), tiered(4), panic=poise.Panic(threshold=0.5), on_panic=hook)
    eject(pool, "t0-0")
    eject(pool, "t0-1")
    assert events == []  # 50% is not under 50%
    eject(pool, "t0-2")
    assert events == [(0, True)]
    pool.reset_circuit(pool.members["t0-2"], 0.0)
    assert events == [(0, True), (0, False)]
    assert shares == [0.25, 0.5]
    eject(pool, "t0-2")
    pool.apply(0.0, removed=[f"t0-{i}" for i in range(4)])
    assert events == [(0, True), (0, False), (0, True), (0, False)]


@pytest.mark.anyio
async def test_panic_through_the_balancer() -> None:
    clock = FakeClock()
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint("only")]),
        circuit=poise.CircuitPolicy(consecutive_failures=1, minimum_volume=1),
        panic=poise.Panic(),
        clock=clock,
    )
    seen: list[poise.BalancerEvent] = []
    lb.add_observer(seen.append)
    async with lb:
        with pytest.raises(OSError):
            async with lb.acquire():
                raise OSError("down")
        assert lb.snapshot()["only"].state is CircuitState.OPEN
        async with lb.acquire() as permit:
            assert permit.decision == poise.Decision(PANIC, 0)
            assert not permit.probe
        snap = lb.snapshot()
        assert snap["only"].state is CircuitState.OPEN
        assert snap.tiers[0].panicking
        assert snap["only"].counters.selections[PANIC] == 1
        stats = lb.statistics().pool
        assert (stats.selections[PANIC], stats.panics) == (1, 1)
        lb.set_status("only", AdminStatus.DRAINING)  # no capacity left: the tier stops panicking
    panics = [e for e in seen if isinstance(e, poise.PanicStarted | poise.PanicEnded)]
    assert [(type(e), e.tier, e.healthy_share) for e in panics] == [
        (poise.PanicStarted, 0, 0.0),
        (poise.PanicEnded, 0, 0.0),
    ]


# -- reasons ---------------------------------------------------------------------------------


def test_no_eligible_endpoints_counts_every_endpoint_under_one_reason() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(7))
    pool.set_admin("t0-0", AdminStatus.DRAINING)
    pool.set_admin("t0-1", AdminStatus.DISABLED)
    pool.set_admin("t0-2", AdminStatus.FORCED_UNHEALTHY)
    eject(pool, "t0-3")
    eject(pool, "t0-4", fault=poise.Fault.PERMANENT)
    with pytest.raises(NoEligibleEndpoints) as info:
        pool.select(0.0, exclude=["t0-5", "t0-6"])
    reasons = {r: n for r, n in info.value.reasons.items() if n}
    assert reasons == {
        IneligibleReason.DRAINING: 1,
        IneligibleReason.DISABLED: 1,
        IneligibleReason.UNHEALTHY: 1,
        IneligibleReason.OPEN: 1,
        IneligibleReason.PERMANENT: 1,
        IneligibleReason.EXCLUDED: 2,
    }


@pytest.mark.parametrize(
    ("make", "knob"),
    [
        (lambda: poise.Panic(threshold=0.0), "Panic.threshold"),
        (lambda: poise.Panic(threshold=1.5), "Panic.threshold"),
        (lambda: poise.Panic(mode="use_all"), "Panic.mode"),  # type: ignore[arg-type]
        (lambda: poise.Routing(overprovisioning_factor=0.9), "Routing.overprovisioning_factor"),
        (lambda: poise.Routing(local_zone=""), "Routing.local_zone"),
        (lambda: poise.Routing(max_total_weight=2**60), "Routing.max_total_weight"),
        (lambda: poise.LoadBalancer(poise.StaticDiscovery([]), panic=0.5), "panic"),  # type: ignore[arg-type]
        (lambda: poise.LoadBalancer(poise.StaticDiscovery([]), routing=1.4), "routing"),  # type: ignore[arg-type]
    ],
)
def test_routing_and_panic_knobs_are_validated(make: Callable[[], object], knob: str) -> None:
    with pytest.raises(poise.ConfigError) as info:
        make()
    assert info.value.knob == knob


def test_every_tier_share_sums_to_the_whole() -> None:
    pool = make_pool(poise.RoundRobin(), tiered(3, 5, 7))
    unhealthy(pool, "t0-0", "t0-1", "t1-0", "t1-1", "t1-2")
    assert sum(pool.router.shares.values()) == TRAFFIC_UNITS
    counts = shares(run(pool, 10))
    assert sum(counts.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("policy", [poise.PowerOfTwoChoices(), poise.PeakEwma()], ids=lambda p: type(p).__name__)
def test_a_load_aware_panic_pick_reads_the_endpoints_own_loads(policy: poise.Policy) -> None:
    # A panic scope's loads are not tracked by the hot path: its picker reads the states.
    pool = make_pool(policy, tiered(2), panic=poise.Panic())
    eject(pool, "t0-0")
    eject(pool, "t0-1")
    panic_scope = pool.router.tiers[0].panic
    assert panic_scope is not None
    assert not panic_scope.tracked
    busy, _, _, decision = pool.select(0.0)
    assert decision.mode is PANIC
    for _ in range(20):  # two candidates: a two-choice pick compares both, every time
        state, ticket, now, decision = pool.select(0.0)
        assert decision.mode is PANIC
        assert state is not busy
        pool.succeed(state, ticket, 0.0, now)
