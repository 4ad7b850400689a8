"""BalancedChannel's hedged calls and bounded wait, against real grpcio aio servers on 127.0.0.1.

grpc.aio runs on asyncio only, so these run on asyncio with the real clock. A hedge's
delay is real time (:data:`DELAY`, a tenth of a second); the slow worker is a black hole
that never answers, so which endpoint answers first never depends on a race. The wait
tests read the balancer's injected :class:`~tests.support.clocks.FakeClock`: the test
moves it past a circuit's open window and fires the balancer's timer at that instant
(``lb._internals.run_timers``, the step its timer task takes), so nothing waits for real.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest
from grpc import aio

import poise_py as poise
from poise_py import AdminStatus, CircuitState
from poise_py.contrib.grpc import BalancedChannel
from tests.contrib.test_grpc import COUNT, ECHO, Worker, all_ready, balancer, workers
from tests.support.clocks import TRIP_AT_ONCE, FakeClock

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.backends("asyncio"),  # grpc.aio: asyncio only
    pytest.mark.real_clock,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.usefixtures("stale_grpc_events_dropped"),  # grpc.aio's events for closed loops
]

DELAY = 0.1
"""The hedge delay (real seconds): far above a loopback round trip."""
HEDGE = poise.Hedge(delay=DELAY, max_extra_load=1.0)
"""A hedge every call may send (the default 2% allowance needs fifty calls per hedge)."""
OTHER = "/test.Worker/Other"


def nothing_counted(lb: poise.LoadBalancer, endpoint_id: str) -> None:
    """``endpoint_id``'s counters are as if no call had been sent there."""
    c = lb.statistics().endpoints[endpoint_id]
    assert (c.successes, c.cancellations, sum(c.faults.values())) == (0, 0, 0)
    assert lb.snapshot()[endpoint_id].inflight == 0


async def until(condition: Any) -> None:
    """Wait (on real sockets) until ``condition()`` holds."""
    with anyio.fail_after(10):
        while not condition():
            await asyncio.sleep(0.005)


async def call_started_on_the_hole(
    lb: poise.LoadBalancer, echo: Any, hole: Worker, fast: Worker, *, timeout: float = 5.0
) -> bytes:
    """Call ``echo`` with only ``hole`` eligible, then let ``fast`` serve too; the reply."""
    lb.set_status(fast.name, AdminStatus.DISABLED)
    call = asyncio.ensure_future(echo(b"x", timeout=timeout))
    await until(lambda: hole.calls == 1)
    lb.set_status(fast.name, AdminStatus.AUTO)
    reply: bytes = await call
    return reply


@pytest.mark.parametrize("hedge", [HEDGE, {ECHO: HEDGE}])
async def test_a_call_to_a_black_hole_is_hedged_and_the_fast_reply_wins(hedge: Any) -> None:
    async with workers("hole", "fast") as (hole, fast):
        hole.mode = "hang"
        lb = balancer([hole, fast])
        async with lb:
            await all_ready(lb)
            echo = BalancedChannel(lb, hedge=hedge).unary_unary(ECHO)
            assert await call_started_on_the_hole(lb, echo, hole, fast) == b"fast:x"
            state = lb._internals.hedging(HEDGE, ECHO)
            assert (state.requests, state.sent, state.won) == (1, 1, 1)
            assert (hole.calls, fast.calls) == (1, 1)
            nothing_counted(lb, "hole")  # the loser was cancelled as superseded
            assert lb.statistics().endpoints["fast"].successes == 1
            stats = lb.statistics()
            assert (stats.pool.hedged_requests, stats.pool.hedges_sent, stats.pool.hedges_won) == (1, 1, 1)
            assert stats.inflight == 0


async def test_a_method_absent_from_the_hedge_mapping_is_not_hedged() -> None:
    async with workers("hole", "fast") as (hole, fast):
        hole.mode = "hang"
        lb = balancer([hole, fast])
        async with lb:
            await all_ready(lb)
            echo = BalancedChannel(lb, hedge={OTHER: HEDGE}).unary_unary(ECHO)
            with pytest.raises(aio.AioRpcError) as caught:  # a hedge would have gone after DELAY
                await call_started_on_the_hole(lb, echo, hole, fast, timeout=5 * DELAY)
            assert caught.value.code().name == "DEADLINE_EXCEEDED"
            assert fast.calls == 0
            assert lb.statistics().pool.hedged_requests == 0


async def test_a_hedged_call_is_answered_at_once_by_a_fast_worker_with_no_hedge() -> None:
    async with workers("a", "b") as ws:
        lb = balancer(ws)
        async with lb:
            await all_ready(lb)
            echo = BalancedChannel(lb, hedge=HEDGE).unary_unary(ECHO)
            assert sorted([await echo(b"x", timeout=5.0) for _ in range(4)]) == [b"a:x"] * 2 + [b"b:x"] * 2
            state = lb._internals.hedging(HEDGE, ECHO)
            assert (state.requests, state.sent, state.won) == (4, 0, 0)


async def test_a_streaming_call_is_never_hedged() -> None:
    async with workers("a") as ws:
        lb = balancer(ws)
        async with lb:
            await all_ready(lb)
            channel = BalancedChannel(lb, hedge=HEDGE)
            assert [r async for r in channel.unary_stream(COUNT)(b"2", timeout=5.0)] == [b"a:0", b"a:1"]
            assert lb.statistics().pool.hedged_requests == 0
            assert lb.statistics().endpoints["a"].successes == 1


async def test_a_failed_hedged_attempt_is_replaced_at_once_and_a_caller_error_ends_the_call() -> None:
    async with workers("blip", "ok") as (blip, ok):
        blip.mode = "internal"  # an unmarked INTERNAL: SUSPECT, retried
        lb = balancer([blip, ok])
        async with lb:
            await all_ready(lb)
            slow_hedge = poise.Hedge(delay=30.0, max_extra_load=1.0)
            echo = BalancedChannel(lb, hedge=slow_hedge).unary_unary(ECHO)  # not idempotent: the hedge retries
            assert [await echo(b"x", timeout=5.0) for _ in range(2)] == [b"ok:x"] * 2
            assert lb._internals.hedging(slow_hedge, ECHO).sent == 0
            blip.mode = ok.mode = "caller"
            with pytest.raises(aio.AioRpcError) as caught:
                await echo(b"x", timeout=5.0)
            assert caught.value.code().name == "INVALID_ARGUMENT"
            assert len(caught.value.poise_attempts) == 1  # type: ignore[attr-defined]


def waiting(clock: FakeClock, ws: list[Worker]) -> poise.LoadBalancer:
    """A balancer on ``clock`` whose circuits open on the first strike for 30 s exactly."""
    return balancer(ws, clock=clock, circuit=TRIP_AT_ONCE)


async def opened(lb: poise.LoadBalancer, echo: Any, worker: Worker) -> None:
    """One INTERNAL from ``worker`` opens its circuit; then it answers again."""
    worker.mode = "internal"
    with pytest.raises(aio.AioRpcError):
        await echo(b"x", timeout=5.0)
    assert lb.snapshot()[worker.name].state is CircuitState.OPEN
    worker.mode = "ok"


@pytest.mark.parametrize("hedge", [None, HEDGE])
async def test_with_wait_a_call_is_served_when_the_open_circuit_half_opens(clock: FakeClock, hedge: Any) -> None:
    async with workers("a") as ws:
        lb = waiting(clock, ws)
        async with lb:
            await all_ready(lb)
            echo = BalancedChannel(lb, wait=60.0, hedge=hedge).unary_unary(ECHO)
            await opened(lb, echo, ws[0])
            call = asyncio.ensure_future(echo(b"x"))
            await until(lambda: lb.statistics().pool.waits == 1)
            clock.advance(30.0)
            lb._internals.run_timers(clock.now)  # the timer's step at the instant the window ends
            assert await call == b"a:x"
            snap = lb.snapshot()["a"]
            assert snap.state is CircuitState.CLOSED
            assert snap.counters.probes == 1
            pool = lb.statistics().pool
            assert (pool.waits, pool.waits_expired, pool.failed_selections) == (1, 0, 0)


@pytest.mark.parametrize(("wait", "timeout"), [(10.0, None), (60.0, 10.0)])
async def test_a_call_whose_wait_or_deadline_ends_first_gets_no_eligible_endpoints(
    clock: FakeClock, wait: float, timeout: float | None
) -> None:
    async with workers("a") as ws:
        lb = waiting(clock, ws)
        async with lb:
            await all_ready(lb)
            echo = BalancedChannel(lb, wait=wait).unary_unary(ECHO)
            await opened(lb, echo, ws[0])
            call = asyncio.ensure_future(echo(b"x", timeout=timeout))
            await until(lambda: lb.statistics().pool.waits == 1)
            clock.advance(10.0)  # the wait ends here: the deadline bounds it too
            lb._internals.run_timers(clock.now)
            with pytest.raises(poise.NoEligibleEndpoints) as caught:
                await call
            assert caught.value.retry_after == 1030.0  # when the circuit half-opens, on the balancer's clock
            assert ws[0].calls == 1
            assert lb.statistics().pool.waits_expired == 1


async def test_without_wait_a_call_to_an_open_circuit_fails_at_once(clock: FakeClock) -> None:
    async with workers("a") as ws:
        lb = waiting(clock, ws)
        async with lb:
            await all_ready(lb)
            echo = BalancedChannel(lb).unary_unary(ECHO)
            await opened(lb, echo, ws[0])
            with pytest.raises(poise.NoEligibleEndpoints):
                await echo(b"x", timeout=5.0)
            assert lb.statistics().pool.waits == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"hedge": 0.05},
        {"hedge": "Hedge(delay=0.05)"},
        {"hedge": [HEDGE]},
        {"hedge": {"Echo": HEDGE}},  # not a full method name
        {"hedge": {ECHO: 0.05}},
        {"hedge": {ECHO: None}},
        {"wait": -1.0},
        {"wait": float("inf")},
        {"wait": "5"},
    ],
)
def test_bad_hedge_and_wait_arguments_are_config_errors_naming_them(kwargs: dict[str, Any]) -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a", address="127.0.0.1:1")]))
    with pytest.raises(poise.ConfigError) as caught:
        BalancedChannel(lb, **kwargs)
    assert caught.value.knob == next(iter(kwargs))


def test_good_hedge_and_wait_arguments_are_taken() -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a", address="127.0.0.1:1")]))
    BalancedChannel(lb, hedge=poise.Hedge.quantile(0.95), wait=0)
    BalancedChannel(lb, hedge={ECHO: HEDGE, OTHER: poise.Hedge(delay=0.2, max_attempts=3)}, wait=2.5)
    BalancedChannel(lb, hedge={})
