"""PoiseTransport's hedged requests and bounded wait, against real HTTP servers on 127.0.0.1.

Real sockets, so these run on Trio and asyncio with the real clock. A hedge's delay is
real time (:data:`DELAY`, a tenth of a second); a slow server holds its answer until the
test releases it, so which endpoint answers first never depends on a race. The wait
tests read the balancer's injected :class:`~tests.support.clocks.FakeClock`: the test
moves it past a circuit's open window and fires the balancer's timer at that instant
(``lb._internals.run_timers``, the step its timer task takes), so nothing waits for real.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

import poise_py as poise
from poise_py import AdminStatus, CircuitState, Fault
from poise_py.contrib.httpx import IDEMPOTENT_METHODS, PoiseTransport, balanced_client
from tests.contrib.test_httpx import BASE, balancer, counters
from tests.support.clocks import TRIP_AT_ONCE, FakeClock
from tests.support.http_server import FaultServer, fault_servers

pytestmark = [pytest.mark.anyio, pytest.mark.real_clock]  # these tests wait on real sockets

DELAY = 0.1
"""The hedge delay (real seconds): far above a loopback round trip."""
HEDGE = poise.Hedge(delay=DELAY, max_extra_load=1.0)
"""A hedge every request may send (the default 2% allowance needs fifty requests per hedge)."""


def nothing_counted(lb: poise.LoadBalancer, endpoint_id: str) -> None:
    """``endpoint_id``'s counters are as if no request had been sent there."""
    c = counters(lb, endpoint_id)
    assert (c.successes, c.cancellations, sum(c.faults.values())) == (0, 0, 0)
    assert lb.snapshot()[endpoint_id].inflight == 0


async def started_on(lb: poise.LoadBalancer, first: FaultServer, other: FaultServer) -> None:
    """Wait until a request reached ``first`` (the only eligible endpoint), then let ``other`` serve too."""
    with anyio.fail_after(10):
        await first.arrived.wait()
    lb.set_status(other.name, AdminStatus.AUTO)


async def test_a_get_to_a_slow_endpoint_is_hedged_and_the_fast_answer_streams_to_the_caller() -> None:
    async with fault_servers("slow", "fast") as (slow, fast):
        slow.fault = "slow"
        lb = balancer([slow, fast])
        async with lb, balanced_client(lb, BASE, hedge=HEDGE) as client:
            lb.set_status("fast", AdminStatus.DISABLED)  # the first attempt goes to the slow one
            seen: dict[str, Any] = {}

            async def get() -> None:
                async with client.stream("GET", "/") as response:
                    seen["inflight"] = lb.snapshot()["fast"].inflight  # the winner's body holds its permit
                    seen["body"] = await response.aread()

            async with anyio.create_task_group() as tg:
                tg.start_soon(get)
                await started_on(lb, slow, fast)
            assert seen == {"inflight": 1, "body": b"fast:200"}
            state = lb._internals.hedging(HEDGE, ("httpx", "GET"))
            assert (state.requests, state.sent, state.won) == (1, 1, 1)
            assert (slow.hits, fast.hits) == (1, 1)
            nothing_counted(lb, "slow")  # the loser was cancelled as superseded
            assert counters(lb, "fast").successes == 1
            assert lb.snapshot()["fast"].inflight == 0
            pool = lb.statistics().pool
            assert (pool.hedged_requests, pool.hedges_sent, pool.hedges_won) == (1, 1, 1)


async def test_an_answer_within_the_delay_sends_no_hedge() -> None:
    async with fault_servers("a", "b") as servers:
        lb = balancer(servers)
        async with lb, balanced_client(lb, BASE, hedge=HEDGE) as client:
            for _ in range(4):
                assert (await client.get("/")).status_code == 200
            state = lb._internals.hedging(HEDGE, ("httpx", "GET"))
            assert (state.requests, state.sent, state.won) == (4, 0, 0)
            assert sum(s.hits for s in servers) == 4


async def chunks() -> AsyncIterator[bytes]:
    yield b"not "
    yield b"replayable"


@pytest.mark.parametrize(
    ("method", "body", "hedge_methods", "hedged"),
    [
        ("POST", b"once", IDEMPOTENT_METHODS, False),  # not idempotent: sent once by default
        ("POST", b"twice is fine", {"post", "GET"}, True),  # named: hedged (names are case-insensitive)
        ("PUT", None, IDEMPOTENT_METHODS, False),  # idempotent, but a streamed body cannot be sent again
        ("GET", b"", {"HEAD"}, False),  # hedge_methods replaces the default set
    ],
)
async def test_only_the_hedge_methods_with_a_replayable_body_are_hedged(
    method: str, body: bytes | None, hedge_methods: set[str], hedged: bool
) -> None:
    async with fault_servers("slow", "fast") as (slow, fast):
        slow.fault = "slow"
        lb = balancer([slow, fast])
        async with lb, balanced_client(lb, BASE, hedge=HEDGE, hedge_methods=hedge_methods) as client:
            lb.set_status("fast", AdminStatus.DISABLED)
            answers: list[httpx.Response] = []

            async def send() -> None:
                answers.append(await client.request(method, "/", content=chunks() if body is None else body))

            async with anyio.create_task_group() as tg:
                tg.start_soon(send)
                await started_on(lb, slow, fast)
                if not hedged:
                    await anyio.sleep(3 * DELAY)  # a hedge would have gone by now
                    assert fast.hits == 0
                    slow.release.set()
            (response,) = answers
            if hedged:
                assert response.text == "fast:200"
                assert lb.statistics().pool.hedges_won == 1
                nothing_counted(lb, "slow")
            else:
                assert response.text == "slow:200"
                assert fast.hits == 0
                assert lb.statistics().pool.hedged_requests == 0  # the request never took the hedged path
                assert counters(lb, "slow").successes == 1


async def test_a_hedged_request_whose_first_answer_fails_is_retried_at_once_on_another_endpoint() -> None:
    async with fault_servers("a", "b") as servers:
        servers[0].fault = "503"
        lb = balancer(servers)
        late = poise.Hedge(delay=30.0, max_extra_load=1.0)
        async with lb, balanced_client(lb, BASE, hedge=late) as client:
            for _ in range(2):  # whichever endpoint comes first, b answers, long before a hedge
                assert (await client.get("/")).text == "b:200"
            assert lb._internals.hedging(late, ("httpx", "GET")).sent == 0
            assert counters(lb, "a").faults[Fault.SUSPECT] == servers[0].hits >= 1


async def test_when_no_other_endpoint_is_eligible_a_hedged_request_ends_with_the_real_answer() -> None:
    # As without a hedge: a answers 503 and a retry is asked for, but b is disabled. The
    # caller gets the 503, still readable, never NoEligibleEndpoints.
    async with fault_servers("a", "b") as servers:
        servers[0].fault = "503"
        lb = balancer(servers)
        async with lb, balanced_client(lb, BASE, hedge=HEDGE) as client:
            lb.set_status("b", AdminStatus.DISABLED)
            response = await client.get("/")
            assert response.status_code == 503
            assert response.text == "a:503"
            assert [s.hits for s in servers] == [1, 0]
            servers[0].fault = "reset"  # a transport error: the error itself is the answer
            with pytest.raises(httpx.TransportError):
                await client.get("/")


async def test_a_caller_cancelling_a_hedged_request_cancels_every_attempt_and_counts_cancellations() -> None:
    async with fault_servers("a", "b") as servers:
        for server in servers:
            server.fault = "slow"
        lb = balancer(servers)
        async with lb, balanced_client(lb, BASE, hedge=HEDGE) as client:
            async with anyio.create_task_group() as tg:

                async def get() -> None:
                    await client.get("/")

                tg.start_soon(get)
                with anyio.fail_after(10):
                    while sum(s.hits for s in servers) < 2:  # the first attempt and its hedge
                        await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
            for server in servers:
                c = counters(lb, server.name)
                assert (c.successes, c.cancellations, sum(c.faults.values())) == (0, 1, 0)  # not superseded
                assert lb.snapshot()[server.name].inflight == 0


def waiting(clock: FakeClock, servers: list[FaultServer]) -> poise.LoadBalancer:
    """A balancer on ``clock`` whose circuits open on the first strike for 30 s exactly."""
    return balancer(servers, clock=clock, circuit=TRIP_AT_ONCE)


async def queued(lb: poise.LoadBalancer, n: int = 1) -> None:
    """Wait until ``n`` callers wait for an endpoint."""
    with anyio.fail_after(10):
        while lb.statistics().pool.waits < n:
            await anyio.sleep(0.001)


@pytest.mark.parametrize("hedge", [None, HEDGE])
async def test_with_wait_a_request_is_served_when_the_open_circuit_half_opens(
    clock: FakeClock, hedge: poise.Hedge | None
) -> None:
    async with fault_servers("a") as servers:
        servers[0].fault = "500"
        lb = waiting(clock, servers)
        async with lb, balanced_client(lb, BASE, wait=60.0, hedge=hedge) as client:
            assert (await client.get("/")).status_code == 500  # the circuit opens for 30 s
            assert lb.snapshot()["a"].state is CircuitState.OPEN
            servers[0].fault = None
            answers: list[httpx.Response] = []

            async def get() -> None:
                answers.append(await client.get("/"))

            async with anyio.create_task_group() as tg:
                tg.start_soon(get)
                await queued(lb)
                clock.advance(30.0)
                lb._internals.run_timers(clock.now)  # the timer's step at the instant the window ends
            assert [r.text for r in answers] == ["a:200"]
            snap = lb.snapshot()["a"]
            assert snap.state is CircuitState.CLOSED
            assert snap.counters.probes == 1
            pool = lb.statistics().pool
            assert (pool.waits, pool.waits_expired, pool.failed_selections) == (1, 0, 0)


async def test_a_request_whose_wait_ends_first_gets_no_eligible_endpoints_saying_when_to_come_back(
    clock: FakeClock,
) -> None:
    async with fault_servers("a") as servers:
        servers[0].fault = "500"
        lb = waiting(clock, servers)
        async with lb, balanced_client(lb, BASE, wait=10.0) as client:
            await client.get("/")
            failures: list[BaseException] = []

            async def get() -> None:
                try:
                    await client.get("/")
                except poise.NoEligibleEndpoints as exc:
                    failures.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(get)
                await queued(lb)
                clock.advance(10.0)
                lb._internals.run_timers(clock.now)
            (failure,) = failures
            assert isinstance(failure, poise.NoEligibleEndpoints)
            assert failure.retry_after == 1030.0  # when the circuit half-opens, on the balancer's clock
            assert servers[0].hits == 1
            assert lb.statistics().pool.waits_expired == 1


async def test_without_wait_a_request_to_an_open_circuit_fails_at_once(clock: FakeClock) -> None:
    async with fault_servers("a") as servers:
        servers[0].fault = "500"
        lb = waiting(clock, servers)
        async with lb, balanced_client(lb, BASE) as client:
            await client.get("/")
            with pytest.raises(poise.NoEligibleEndpoints):
                await client.get("/")
            assert lb.statistics().pool.waits == 0


@pytest.mark.parametrize(
    ("kwargs", "knob"),
    [
        ({"hedge": 0.05}, "hedge"),
        ({"hedge": "Hedge(delay=0.05)"}, "hedge"),
        ({"hedge_methods": "GET"}, "hedge_methods"),  # one bare string is not a collection of names
        ({"hedge_methods": {"GET", 3}}, "hedge_methods"),
        ({"hedge_methods": {"GET", ""}}, "hedge_methods"),
        ({"hedge_methods": {"GET PUT"}}, "hedge_methods"),
        ({"hedge_methods": None}, "hedge_methods"),
        ({"wait": -1.0}, "wait"),
        ({"wait": float("inf")}, "wait"),
        ({"wait": float("nan")}, "wait"),
        ({"wait": "5"}, "wait"),
    ],
)
def test_bad_hedge_and_wait_arguments_are_config_errors_naming_them(kwargs: dict[str, Any], knob: str) -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))
    with pytest.raises(poise.ConfigError) as caught:
        PoiseTransport(lb, host="api", **kwargs)
    assert caught.value.knob == knob
    with pytest.raises(poise.ConfigError) as caught:
        balanced_client(lb, BASE, **kwargs)
    assert caught.value.knob == knob


def test_good_hedge_and_wait_arguments_are_taken() -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))
    PoiseTransport(lb, host="api", hedge=poise.Hedge.quantile(0.95), hedge_methods=(), wait=0)
    PoiseTransport(lb, host="api", hedge=HEDGE, hedge_methods=["GET", "M-SEARCH"], wait=2.5)
