"""``lb.call`` cuts the tail and paces itself: ``hedge=``, ``wait=``, ``backoff=`` and ``deadline=``.

Virtual time throughout (Trio's MockClock, asyncio's virtual loop): a delay asserted here is
the library's, never a real sleep.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable

import anyio
import pytest

import poise_py as poise
from poise_py import Fault

pytestmark = [pytest.mark.anyio, pytest.mark.virtual_asyncio]


def balancer(ids: list[str], **options: object) -> poise.LoadBalancer:
    return poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint(i) for i in ids]),
        policy=poise.RoundRobin(),
        circuit=poise.CircuitPolicy(max_ejection_percent=1.0),
        seed=7,
        **options,  # type: ignore[arg-type]
    )


def in_order(*seconds: float) -> Callable[[poise.Endpoint], Awaitable[str]]:
    """The n-th attempt (whichever endpoint it goes to) takes ``seconds[n]``."""
    made = iter(seconds)

    async def call(endpoint: poise.Endpoint) -> str:
        await anyio.sleep(next(made))
        return endpoint.id

    return call


def latencies(table: dict[str, float]) -> Callable[[poise.Endpoint], Awaitable[str]]:
    async def call(endpoint: poise.Endpoint) -> str:
        await anyio.sleep(table[endpoint.id])
        return endpoint.id

    return call


# -- hedging -----------------------------------------------------------------------------


async def test_a_hedge_to_another_endpoint_answers_first_and_the_loser_leaves_no_trace() -> None:
    lb = balancer(["a", "b"])
    async with lb:
        start = anyio.current_time()
        answer = await lb.call(in_order(2.0, 0.01), hedge=poise.Hedge(delay=0.05))
        took = anyio.current_time() - start
        stats = lb.statistics()
        loser = lb.snapshot()["b" if answer == "a" else "a"]
    assert took == pytest.approx(0.06)
    assert (loser.counters.successes, sum(loser.counters.faults.values()), loser.counters.cancellations) == (0, 0, 0)
    assert loser.inflight == 0
    assert stats.pool.issued == 1  # as if the loser had never been sent...
    assert (stats.pool.hedged_requests, stats.pool.hedges_sent, stats.pool.hedges_won) == (1, 1, 1)  # ...but this


async def test_no_hedge_when_the_first_answer_comes_within_the_delay() -> None:
    lb = balancer(["a", "b"])
    async with lb:
        await lb.call(latencies({"a": 0.01, "b": 0.01}), hedge=poise.Hedge(delay=0.05))
        stats = lb.statistics().pool
    assert (stats.hedged_requests, stats.hedges_sent, stats.issued) == (1, 0, 1)


async def test_the_first_attempt_wins_when_it_answers_before_the_hedge() -> None:
    lb = balancer(["a", "b"])
    async with lb:
        answer = await lb.call(in_order(0.08, 1.0), hedge=poise.Hedge(delay=0.05))
        stats = lb.statistics()
    assert (stats.pool.hedges_sent, stats.pool.hedges_won) == (1, 0)
    assert stats.pool.cancellations == 0
    assert stats.endpoints[answer].successes == 1


async def test_hedges_stay_within_max_extra_load() -> None:
    lb = balancer(["a", "b", "c"])
    async with lb:
        for _ in range(500):
            await lb.call(latencies({"a": 1.0, "b": 1.0, "c": 1.0}), hedge=poise.Hedge(delay=0.01, max_extra_load=0.02))
        stats = lb.statistics().pool
    assert stats.hedged_requests == 500
    assert stats.hedges_sent <= 1 + 0.02 * 500


async def test_max_attempts_bounds_the_attempts_in_flight() -> None:
    lb = balancer(["a", "b", "c", "d"])
    in_flight: list[int] = []
    now_in_flight = [0]

    async def call(endpoint: poise.Endpoint) -> str:
        now_in_flight[0] += 1
        in_flight.append(now_in_flight[0])
        try:
            await anyio.sleep(1.0)
        finally:
            now_in_flight[0] -= 1
        return endpoint.id

    async with lb:
        await lb.call(call, hedge=poise.Hedge(delay=0.1, max_attempts=3, max_extra_load=1.0), attempts=5)
        stats = lb.statistics().pool
    assert max(in_flight) == 3
    assert stats.hedges_sent == 2


async def test_a_quantile_delay_hedges_only_once_measured() -> None:
    lb = balancer(["a", "b"])
    hedge = poise.Hedge.quantile(0.9, min_samples=20, max_extra_load=1.0)
    async with lb:
        for i in range(29):  # each faster than every one before: none outlasts the measured p90
            await lb.call(in_order(0.02 - i * 0.0001), hedge=hedge)
        assert lb.statistics().pool.hedges_sent == 0
        start = anyio.current_time()
        await lb.call(in_order(5.0, 0.01), hedge=hedge)
        took = anyio.current_time() - start
        stats = lb.statistics().pool
    # The first 20 calls took 20.0 ms down to 18.1 ms: their p90 (nearest rank, the 18th) is 19.8 ms.
    assert took == pytest.approx(0.0198 + 0.01)
    assert stats.hedges_sent == 1


async def test_a_failed_attempt_is_replaced_at_once_while_the_hedge_runs() -> None:
    lb = balancer(["a", "b", "c"])
    tried: list[str] = []

    async def call(endpoint: poise.Endpoint) -> str:
        tried.append(endpoint.id)
        if len(tried) == 1:  # the first attempt fails after 100 ms
            await anyio.sleep(0.1)
            raise poise.FaultError(Fault.TRANSIENT)
        await anyio.sleep(1.0 if len(tried) == 2 else 0.01)  # the hedge is slow, the retry fast
        return endpoint.id

    async with lb:
        start = anyio.current_time()
        answer = await lb.call(call, hedge=poise.Hedge(delay=0.05, max_extra_load=1.0))
        took = anyio.current_time() - start
    assert sorted(tried) == ["a", "b", "c"]
    assert answer == tried[2]
    assert took == pytest.approx(0.11)


async def test_a_caller_fault_ends_the_hedged_request_at_once() -> None:
    lb = balancer(["a", "b"])

    made: list[str] = []

    async def call(endpoint: poise.Endpoint) -> str:
        made.append(endpoint.id)
        if len(made) == 2:
            raise poise.FaultError(Fault.CALLER, "bad request")
        await anyio.sleep(5.0)
        return endpoint.id

    async with lb:
        start = anyio.current_time()
        with pytest.raises(poise.FaultError, match="bad request"):
            await lb.call(call, hedge=poise.Hedge(delay=0.05, max_extra_load=1.0))
        assert anyio.current_time() - start == pytest.approx(0.05)
        assert lb.statistics().pool.cancellations == 0
        assert lb.statistics().inflight == 0


async def test_when_every_attempt_fails_the_last_error_is_raised_with_every_attempt() -> None:
    lb = balancer(["a", "b"])

    made: list[str] = []

    async def call(endpoint: poise.Endpoint) -> str:
        made.append(endpoint.id)
        await anyio.sleep(0.1 if len(made) == 1 else 0.2)
        raise ConnectionError(f"{endpoint.id} refused")

    async with lb:
        with pytest.raises(ConnectionError, match=f"{made[-1] if made else ''} refused") as raised:
            await lb.call(call, hedge=poise.Hedge(delay=0.05, max_extra_load=1.0), attempts=2)
    assert str(raised.value) == f"{made[1]} refused"  # the last to fail
    assert [a.endpoint_id for a in raised.value.poise_attempts] == made  # type: ignore[attr-defined]


async def test_cancelling_a_hedged_call_cancels_every_attempt() -> None:
    lb = balancer(["a", "b"])
    async with lb:
        with anyio.move_on_after(0.5):
            await lb.call(latencies({"a": 5.0, "b": 5.0}), hedge=poise.Hedge(delay=0.05, max_extra_load=1.0))
        stats = lb.statistics()
    assert stats.inflight == 0
    assert stats.pool.cancellations == 2  # the caller's cancellation: both permits say so
    assert sum(stats.pool.faults.values()) == 0


async def test_the_pools_hedge_counters_never_go_back_when_call_sites_are_forgotten() -> None:
    lb = balancer(["a", "b"])
    fast = latencies({"a": 0.0, "b": 0.0})
    async with lb:
        for _ in range(100):
            await lb.call(fast, hedge=poise.Hedge(delay=0.5))
        seen = []
        for i in range(300):  # more call sites than the balancer keeps: the oldest are forgotten
            await lb.call(fast, hedge=poise.Hedge(delay=1.0 + i / 1000))
            seen.append(lb.statistics().pool.hedged_requests)
    assert seen == sorted(seen)
    assert seen[-1] == 400


async def test_hedge_is_validated() -> None:
    lb = balancer(["a"])
    async with lb:
        with pytest.raises(poise.ConfigError, match="hedge"):
            await lb.call(latencies({"a": 0.0}), hedge=0.05)  # type: ignore[arg-type]
        for attempts in (0, -5, True, 1.0, "3", None):  # checked before the hedge's max_attempts is taken
            with pytest.raises(poise.ConfigError) as info:
                await lb.call(latencies({"a": 0.0}), attempts=attempts, hedge=poise.Hedge(delay=0.05))  # type: ignore[arg-type]
            assert info.value.knob == "attempts"
    for bad in ({"delay": -1}, {"delay": "1"}, {"delay": 0.1, "max_attempts": 1}, {"delay": 0.1, "max_extra_load": 2}):
        with pytest.raises(poise.ConfigError, match="Hedge"):
            poise.Hedge(**bad)
    with pytest.raises(poise.ConfigError, match=r"Quantile\.q"):
        poise.Hedge.quantile(95)


# -- waiting -----------------------------------------------------------------------------


async def test_call_waits_for_the_rate_limit_window_then_probes() -> None:
    lb = balancer(["provider"])
    async with lb:
        async with lb.acquire() as permit:
            permit.fail(Fault.TRANSIENT, retry_after=60)
        start = anyio.current_time()
        answer = await lb.call(latencies({"provider": 0.1}), wait=90)
        assert anyio.current_time() - start == pytest.approx(60.1)
        assert answer == "provider"
        with pytest.raises(poise.NoEligibleEndpoints):
            async with lb.acquire() as permit:
                permit.fail(Fault.TRANSIENT, retry_after=60)
            await lb.call(latencies({"provider": 0.1}), wait=10)


# -- backoff, pushback and the deadline --------------------------------------------------


async def test_backoff_waits_a_jittered_delay_under_each_ceiling() -> None:
    lb = balancer(["a", "b", "c"], retry_budget=poise.RetryBudget(min_per_second=100))
    starts: list[float] = []

    async def call(endpoint: poise.Endpoint) -> str:
        starts.append(anyio.current_time())
        raise ConnectionError("refused")

    async with lb:
        with pytest.raises(ConnectionError):
            await lb.call(call, backoff=poise.RetryBackoff(initial=1.0, multiplier=3.0, maximum=2.0))
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(gaps) == 2
    assert 0 <= gaps[0] <= 1.0
    assert 0 <= gaps[1] <= 2.0  # min(1 * 3, 2)
    assert gaps[0] > 0 or gaps[1] > 0  # jittered, not zero


async def test_a_server_pushback_sets_the_next_delay() -> None:
    lb = balancer(["a", "b"])
    starts: list[float] = []

    async def call(endpoint: poise.Endpoint) -> str:
        starts.append(anyio.current_time())
        if len(starts) == 1:
            raise poise.FaultError(Fault.TRANSIENT, retry_after=3.0)
        return endpoint.id

    async with lb:
        await lb.call(call, backoff=poise.RetryBackoff())
    assert starts[1] - starts[0] == pytest.approx(3.0)


async def test_a_pushback_past_the_deadline_ends_the_call_with_the_real_error() -> None:
    lb = balancer(["a", "b"])

    async def call(endpoint: poise.Endpoint) -> str:
        raise poise.FaultError(Fault.TRANSIENT, "slow down", retry_after=30.0)

    async with lb:
        start = anyio.current_time()
        with pytest.raises(poise.FaultError, match="slow down"):
            await lb.call(call, backoff=poise.RetryBackoff(), deadline=10)
        assert anyio.current_time() - start == pytest.approx(0.0)


async def test_the_deadline_bounds_the_whole_call_and_cancels_the_attempt_without_a_strike() -> None:
    lb = balancer(["a", "b"])
    async with lb:
        start = anyio.current_time()
        with pytest.raises(TimeoutError):
            await lb.call(latencies({"a": 100.0, "b": 100.0}), deadline=2.5)
        assert anyio.current_time() - start == pytest.approx(2.5)
        stats = lb.statistics().pool
    assert sum(stats.faults.values()) == 0
    assert stats.cancellations == 1


async def test_the_deadline_covers_hedges_and_waits() -> None:
    lb = balancer(["a", "b"])
    async with lb:
        start = anyio.current_time()
        with pytest.raises(TimeoutError):
            await lb.call(
                latencies({"a": 100.0, "b": 100.0}), hedge=poise.Hedge(delay=0.5, max_extra_load=1.0), deadline=2
            )
        assert anyio.current_time() - start == pytest.approx(2.0)
        assert lb.statistics().inflight == 0


async def test_backoff_and_deadline_are_validated() -> None:
    lb = balancer(["a"])
    async with lb:
        with pytest.raises(poise.ConfigError, match="backoff"):
            await lb.call(latencies({"a": 0.0}), backoff=1.0)  # type: ignore[arg-type]
        with pytest.raises(poise.ConfigError, match="deadline"):
            await lb.call(latencies({"a": 0.0}), deadline=-1)
        with pytest.raises(poise.ConfigError, match="wait"):
            await lb.call(latencies({"a": 0.0}), wait=-1)
    with pytest.raises(poise.ConfigError, match=r"RetryBackoff\.maximum"):
        poise.RetryBackoff(initial=2.0, maximum=1.0)
    with pytest.raises(poise.ConfigError, match=r"RetryBackoff\.multiplier"):
        poise.RetryBackoff(multiplier=0.5)


async def test_a_call_observer_sees_the_hedges_loser_as_superseded() -> None:
    lb = balancer(["a", "b"])
    ended: list[poise.CallEnded] = []
    lb.add_call_observer(ended.append)
    async with lb:
        await lb.call(in_order(2.0, 0.01), hedge=poise.Hedge(delay=0.05))
    assert sorted(e.outcome for e in ended) == ["success", "superseded"]
    loser = next(e for e in ended if e.outcome == "superseded")
    assert loser.cancelled
    assert loser.superseded
