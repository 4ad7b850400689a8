"""Load control made visible: effective weight, slow-start progress, caps and adaptive limits.

What ``lb.snapshot()`` shows per endpoint, what ``lb.statistics()`` counts, and the rows
``bench/overhead.py`` prints for it (issue 36, "Visible").
"""

from __future__ import annotations

import contextlib
import io

import anyio
import pytest

import poise_py as poise
from bench import overhead
from tests.support.clocks import FakeClock

pytestmark = pytest.mark.anyio


async def _until_members(lb: poise.LoadBalancer, n: int) -> None:
    while len(lb.snapshot().endpoints) < n:
        await anyio.sleep(0)


async def test_without_load_knobs_every_endpoint_has_its_weight_and_no_ramp_cap_or_limit(clock: FakeClock) -> None:
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint("a", weight=3), poise.Endpoint("b", metadata={"max_in_flight": 2})]),
        clock=clock,
    )
    async with lb:
        a, b = lb.snapshot().endpoints
    assert (a.effective_weight, a.ramp_progress, a.max_in_flight, a.concurrency_limit) == (3.0, None, None, None)
    assert isinstance(a.effective_weight, float)
    assert (b.effective_weight, b.ramp_progress, b.concurrency_limit) == (1.0, None, None)


def test_an_endpoint_snapshot_built_without_the_load_fields_defaults_to_its_weight_and_none() -> None:
    counters = poise.EndpointCounters(
        issued=0,
        selections={},
        successes=0,
        faults={},
        cancellations=0,
        probes=0,
        stale=0,
        ejections=0,
        suppressed_ejections=0,
    )
    snap = poise.EndpointSnapshot(
        endpoint=poise.Endpoint("a", weight=5),
        state=poise.CircuitState.CLOSED,
        epoch=0,
        inflight=0,
        admin=poise.AdminStatus.AUTO,
        eligible_reason=None,
        reopen_at=None,
        consecutive_failures=0,
        escalation_level=0,
        counters=counters,
    )
    assert (snap.effective_weight, snap.ramp_progress, snap.max_in_flight, snap.concurrency_limit) == (
        5.0,
        None,
        None,
        None,
    )


async def test_a_joining_endpoint_shows_its_ramp_progress_and_effective_weight_until_the_ramp_ends(
    clock: FakeClock,
) -> None:
    publisher = poise.DiscoveryPublisher()
    lb = poise.LoadBalancer(
        publisher.subscribe(),
        slow_start=poise.SlowStart(window=10.0, min_weight=0.1),
        policy=poise.RoundRobin(),
        clock=clock,
    )
    publisher.publish(poise.Snapshot(1, [poise.Endpoint("a"), poise.Endpoint("b")]))
    async with lb:
        await lb.wait_ready()
        publisher.publish(poise.Delta(2, added=[poise.Endpoint("c", weight=4)]))
        await _until_members(lb, 3)
        joined = lb.snapshot()
        clock.advance(5.0)
        halfway = lb.snapshot()
        clock.advance(6.0)
        over = lb.snapshot()  # the window has passed; the ramp ends at c's next pick
        for _ in range(6):
            async with lb.acquire():
                pass
        done = lb.snapshot()
        publisher.close()
    assert joined["a"].ramp_progress is None  # the first members start together
    assert joined["a"].effective_weight == 1.0
    assert joined["c"].ramp_progress == 0.0
    assert joined["c"].effective_weight == pytest.approx(4 * 0.1)  # min_weight
    assert halfway["c"].ramp_progress == pytest.approx(0.5)
    assert halfway["c"].effective_weight == pytest.approx(4 * 0.5)  # aggression 1: linear
    assert over["c"].ramp_progress == 1.0
    assert over["c"].effective_weight == 4.0
    assert done["c"].ramp_progress is None
    assert done["c"].effective_weight == 4.0


async def test_the_snapshot_shows_each_endpoints_cap_from_its_metadata_or_the_balancer(clock: FakeClock) -> None:
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint("a", metadata={"max_in_flight": 2}), poise.Endpoint("b")]),
        max_in_flight=5,
        clock=clock,
    )
    async with lb:
        snap = lb.snapshot()
    assert (snap["a"].max_in_flight, snap["b"].max_in_flight) == (2, 5)
    assert (snap["a"].concurrency_limit, snap["b"].concurrency_limit) == (None, None)
    assert snap["a"].ramp_progress is None


async def test_the_snapshot_shows_the_adaptive_limit_as_it_learns_and_a_cap_beside_it(clock: FakeClock) -> None:
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint("a"), poise.Endpoint("b", metadata={"max_in_flight": 3})]),
        concurrency=poise.AdaptiveConcurrency(poise.AIMD(initial_limit=4)),
        clock=clock,
    )
    changes: list[poise.ConcurrencyLimitChanged] = []
    lb.add_observer(lambda e: changes.append(e) if isinstance(e, poise.ConcurrencyLimitChanged) else None)
    async with lb:
        before = lb.snapshot()
        for _ in range(20):
            held = [lb.acquire(exclude=["b"]) for _ in range(4)]
            clock.advance(0.01)
            for permit in held:
                permit.succeed()
        after = lb.snapshot()
    assert (before["a"].concurrency_limit, before["b"].concurrency_limit) == (4, 4)
    assert (before["a"].max_in_flight, before["b"].max_in_flight) == (None, 3)
    assert after["a"].concurrency_limit is not None
    assert after["a"].concurrency_limit > 4  # AIMD grew it: the limit was being used
    assert changes
    assert changes[-1].limit <= after["a"].concurrency_limit
    assert after["b"].concurrency_limit == 4  # b took no calls


async def test_statistics_count_calls_passed_over_a_full_endpoint_and_calls_shed_as_overloaded(
    clock: FakeClock,
) -> None:
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint("a"), poise.Endpoint("b", metadata={"max_in_flight": 3})]),
        policy=poise.RoundRobin(),
        max_in_flight=1,
        clock=clock,
    )
    async with lb:
        held = [lb.acquire() for _ in range(4)]  # the round robin turns to "a" again while it is full
        with pytest.raises(poise.Overloaded):
            lb.acquire()
        stats = lb.statistics()
        for permit in held:
            permit.succeed()
    limited = [p.endpoint.id for p in held if p.decision.mode is poise.DecisionMode.LIMITED]
    assert limited
    assert set(limited) == {"b"}  # counted where the call went
    assert stats.pool.failed_selections == 1  # the call shed as Overloaded
    assert stats.pool.selections[poise.DecisionMode.LIMITED] == len(limited)
    assert stats.endpoints["b"].selections[poise.DecisionMode.LIMITED] == len(limited)
    assert stats.endpoints["a"].selections[poise.DecisionMode.LIMITED] == 0


async def bench_rows(title: str, *, load: bool, calls: bool) -> list[str]:
    """The rows ``bench/overhead.py`` prints under the table whose title starts with ``title`` (a tiny run)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        await overhead.main(20, 2, "trio", windows=False, peers=False, load=load, calls=calls)
    lines = out.getvalue().splitlines()
    header = lines.index(next(line for line in lines if line.startswith(title)))
    return lines[header + 2 :]


@pytest.mark.backends("trio")
async def test_the_overhead_bench_prints_load_control_as_a_multiple_of_the_same_policy_off() -> None:
    rows = await bench_rows("load control, 10 eps", load=True, calls=False)
    assert len(rows) == len(overhead.POLICIES) * len(overhead.LOADS)
    for (policy, _), chunk in zip(overhead.POLICIES, [rows[:6], rows[6:]], strict=True):
        assert [row.split()[0] for row in chunk] == [policy] * len(overhead.LOADS)
        assert chunk[0].split()[-1] == "1.00"  # the baseline over itself
        assert "SlowStart() + Gradient2()" in chunk[-1]
        assert float(chunk[-1].split()[-1]) > 0


@pytest.mark.backends("trio")
async def test_the_overhead_bench_prints_lb_call_and_each_option_against_the_same_call_by_hand() -> None:
    rows = await bench_rows("lb.call on a no-op", load=False, calls=True)
    assert [row[:34].strip() for row in rows] == [name for name, _ in overhead.CALLS]
    assert rows[0].split()[-1] == "1.00"  # the call by hand over itself
    assert all(float(row.split()[-1]) > 0 for row in rows)
