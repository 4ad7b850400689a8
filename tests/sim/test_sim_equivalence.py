"""The simulator agrees with the product: one fault schedule, simulated and against real servers.

The same endpoints (healthy ones, one that aborts with the evict marker, one whose process
is gone, one that never answers...) are driven once through ``poise simulate``'s engine and
once through ``LoadBalancer.call`` against real servers on 127.0.0.1, with the same
classifier and circuit; both must eject the same endpoints.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import grpc
import grpc.aio
import httpx
import pytest

import poise_py as poise
from poise_py import sim
from tests.support.clocks import FakeClock
from tests.support.http_server import fault_servers

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.real_clock,
]  # the event loop waits on real sockets; the balancer's clock is fake

MARKER = ("wool-fault", "worker-internal")
DEADLINE = 0.2
CALLS = 80
CIRCUIT = poise.CircuitPolicy(max_ejection_percent=1.0)
EJECTED = {poise.CircuitState.OPEN, poise.CircuitState.HALF_OPEN, poise.CircuitState.BLOCKED}


def simulated_ejections(client: str, endpoints: str) -> set[str]:
    """The endpoints the simulator's round-robin configuration (CIRCUIT) ejects."""
    text = f"""
name = "equivalence"
seed = 3
[client]
{client}
[traffic]
rps = 10
duration = {CALLS / 10}
timeout = {DEADLINE}
attempts = 1
{endpoints}
[[configurations]]
name = "same"
policy = "round_robin"
circuit = {{ max_ejection_percent = 1.0 }}
"""
    import tomllib

    report = sim.run(sim.parse_scenario(tomllib.loads(text)))
    result = next(r for r in report.results if r.configuration == "same")
    return set(result.ejected)


def ejected_now(lb: poise.LoadBalancer) -> set[str]:
    return {e.endpoint.id for e in lb.snapshot().endpoints if e.state in EJECTED}


async def drive(lb: poise.LoadBalancer, call: Callable[[poise.Endpoint], Awaitable[Any]]) -> None:
    for _ in range(CALLS):
        try:
            await lb.call(call, attempts=1)
        except poise.NoEligibleEndpoints:
            break
        except Exception:  # noqa: S112 - every failure was classified and recorded by call()
            continue


def free_port() -> int:
    """A loopback port with nothing listening on it (a worker whose process is gone)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- gRPC ---------------------------------------------------------------------------------


async def _ok(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return b"ok"


async def _marked(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    await context.abort(grpc.StatusCode.INTERNAL, "evict me", trailing_metadata=(MARKER,))
    raise AssertionError("abort returns only by raising")


async def _unmarked(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    await context.abort(grpc.StatusCode.INTERNAL, "something broke")
    raise AssertionError("abort returns only by raising")


async def _hole(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


@asynccontextmanager
async def grpc_server(behaviour: Callable[..., Awaitable[bytes]]) -> AsyncIterator[int]:
    server = grpc.aio.server()
    handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(behaviour)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("sim.Worker", {"Call": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port
    finally:
        await server.stop(grace=None)


GRPC_ENDPOINTS = """
[[endpoints]]
id = "ok"
count = 3
[[endpoints]]
id = "marked"
phases = [{ start = 0, grpc = "INTERNAL", trailing = { "wool-fault" = "worker-internal" } }]
[[endpoints]]
id = "internal"
phases = [{ start = 0, grpc = "INTERNAL" }]
[[endpoints]]
id = "dead"
phases = [{ start = 0, refused = true }]
[[endpoints]]
id = "hole"
phases = [{ start = 0, timeout = true }]
"""


@pytest.mark.backends("asyncio")
@pytest.mark.usefixtures("stale_grpc_events_dropped")  # grpc.aio's events for closed loops
async def test_grpc_schedule_ejects_the_same_endpoints_simulated_and_real() -> None:
    # grpc.aio runs on asyncio only, so this test has no Trio run.
    client = 'protocol = "grpc"\nmarker = ["wool-fault", "worker-internal"]'
    # The simulator runs its own event loop: give it a thread.
    simulated = await anyio.to_thread.run_sync(simulated_ejections, client, GRPC_ENDPOINTS)
    behaviours = {"ok1": _ok, "ok2": _ok, "ok3": _ok, "marked": _marked, "internal": _unmarked, "hole": _hole}
    async with (
        grpc_server(behaviours["ok1"]) as p1,
        grpc_server(behaviours["ok2"]) as p2,
        grpc_server(behaviours["ok3"]) as p3,
        grpc_server(behaviours["marked"]) as p4,
        grpc_server(behaviours["internal"]) as p5,
        grpc_server(behaviours["hole"]) as p6,
    ):
        ports = {"ok1": p1, "ok2": p2, "ok3": p3, "marked": p4, "internal": p5, "dead": free_port(), "hole": p6}
        channels = {name: grpc.aio.insecure_channel(f"127.0.0.1:{port}") for name, port in ports.items()}
        try:

            async def call(endpoint: poise.Endpoint) -> bytes:
                method: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channels[endpoint.id].unary_unary(
                    "/sim.Worker/Call"
                )
                return await method(b"x", timeout=DEADLINE)

            lb = poise.LoadBalancer(
                poise.StaticDiscovery([poise.Endpoint(name) for name in ports]),
                policy=poise.RoundRobin(),
                circuit=CIRCUIT,
                classifier=poise.classify.grpc(marker=MARKER),
                clock=FakeClock(),
            )
            async with lb:
                await drive(lb, call)
                real = ejected_now(lb)
        finally:
            for channel in channels.values():
                await channel.close()
    assert real == {"marked", "internal", "dead", "hole"}  # sustained UNAVAILABLE / DEADLINE_EXCEEDED eject too
    assert not real & {"ok1", "ok2", "ok3"}
    assert simulated == real


# -- HTTP ---------------------------------------------------------------------------------

HTTP_ENDPOINTS = """
[[endpoints]]
id = "ok"
count = 3
[[endpoints]]
id = "broken"
phases = [{ start = 0, http = 500 }]
[[endpoints]]
id = "revoked"
phases = [{ start = 0, http = 401 }]
[[endpoints]]
id = "throttled"
phases = [{ start = 0, http = 429, retry_after = 7 }]
[[endpoints]]
id = "dead"
phases = [{ start = 0, refused = true }]
"""


async def test_http_schedule_ejects_the_same_endpoints_simulated_and_real() -> None:
    simulated = await anyio.to_thread.run_sync(simulated_ejections, 'protocol = "http"', HTTP_ENDPOINTS)
    faults = {"ok1": None, "ok2": None, "ok3": None, "broken": "500", "revoked": "401", "throttled": "429:7"}
    async with fault_servers(*faults) as servers, httpx.AsyncClient(timeout=None) as client:  # noqa: S113 - no timeouts are exercised
        for server in servers:
            server.fault = faults[server.name]
        addresses = {s.name: s.address for s in servers} | {"dead": ("127.0.0.1", free_port())}

        async def call(endpoint: poise.Endpoint) -> bytes:
            host, port = addresses[endpoint.id]
            response = await client.get(f"http://{host}:{port}/")
            response.raise_for_status()
            return response.content

        lb = poise.LoadBalancer(
            poise.StaticDiscovery([poise.Endpoint(name) for name in addresses]),
            policy=poise.RoundRobin(),
            circuit=CIRCUIT,
            classifier=poise.classify.http(),
            clock=FakeClock(),
        )
        async with lb:
            await drive(lb, call)
            real = ejected_now(lb)
    assert {"broken", "revoked", "throttled", "dead"} <= real
    assert not real & {"ok1", "ok2", "ok3"}
    assert simulated == real
