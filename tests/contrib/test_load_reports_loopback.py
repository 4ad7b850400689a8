"""The balancer reads the load real servers report: hypercorn with OrcaMiddleware, grpc.aio with OrcaInterceptor.

Both on 127.0.0.1 with the real clock. The servers' applications set their utilization; the
balancer's snapshot must show what each endpoint's server said, and WeightedByLoad must weigh by it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, MutableMapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import grpc
import pytest
from grpc import aio

import poise_py as poise
from poise_py.contrib.grpc import BalancedChannel, ChannelFactory
from poise_py.contrib.httpx import balanced_client
from poise_py.contrib.orca import OrcaMiddleware, ServerMetrics
from poise_py.contrib.orca_grpc import OrcaInterceptor
from tests.contrib.test_orca import get, served
from tests.support.clocks import FakeClock

pytestmark = [pytest.mark.anyio, pytest.mark.real_clock]


async def hello(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


def reporting(utilization: float, qps: float) -> ServerMetrics:
    metrics = ServerMetrics()
    metrics.set_application_utilization(utilization)
    metrics.set_qps(qps)
    return metrics


async def test_the_transport_reads_what_a_hypercorn_app_with_the_middleware_reports(clock: FakeClock) -> None:
    async with AsyncExitStack() as stack:
        small = await stack.enter_async_context(served(OrcaMiddleware(hello, reporting(0.5, 100.0))))
        big = await stack.enter_async_context(served(OrcaMiddleware(hello, reporting(0.25, 300.0))))
        for port in (small, big):
            await get(port)  # listening
        endpoints = [
            poise.Endpoint("small", address=("127.0.0.1", small)),
            poise.Endpoint("big", address=("127.0.0.1", big)),
        ]
        # The balancer's own clock is injected: the weight update comes when the test moves it.
        lb = poise.LoadBalancer(
            poise.StaticDiscovery(endpoints), policy=poise.WeightedByLoad(blackout_period=0.0), clock=clock
        )
        async with lb, balanced_client(lb, "http://service") as client:
            with anyio.fail_after(20):
                for _ in range(4):  # before any weight: round robin, two calls each
                    assert (await client.get("/")).text == "ok"
                small_snap, big_snap = lb.snapshot()["small"], lb.snapshot()["big"]
                assert small_snap.load_report is not None
                assert small_snap.load_report.application_utilization == 0.5
                assert small_snap.load_weight == pytest.approx(200.0)  # 100 qps / 0.5
                assert big_snap.load_weight == pytest.approx(1200.0)  # 300 qps / 0.25
                clock.advance(1.0)  # the next weight update
                before = lb.snapshot()["big"].counters.successes
                for _ in range(70):
                    assert (await client.get("/")).text == "ok"
                after = lb.snapshot()["big"].counters.successes
        assert after - before == pytest.approx(60, abs=2)  # weights 1200 : 200


@asynccontextmanager
async def grpc_worker(metrics: ServerMetrics) -> AsyncIterator[int]:
    async def echo(request: bytes, context: Any) -> bytes:
        return b"echo:" + request

    handler = grpc.method_handlers_generic_handler("test.Load", {"Echo": grpc.unary_unary_rpc_method_handler(echo)})
    server = aio.server(interceptors=[OrcaInterceptor(metrics)])
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port
    finally:
        await server.stop(None)


@pytest.mark.backends("asyncio")  # grpc.aio: asyncio only
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.usefixtures("stale_grpc_events_dropped")
async def test_the_channel_reads_what_a_grpc_aio_server_with_the_interceptor_reports() -> None:
    async with grpc_worker(reporting(0.4, 80.0)) as port:
        channels = ChannelFactory()
        lb = poise.LoadBalancer(
            poise.StaticDiscovery([poise.Endpoint("w", address=("127.0.0.1", port))]),
            endpoint_factory=channels,
            endpoint_close=channels.close,
        )
        async with lb:
            with anyio.fail_after(20):
                while lb.snapshot()["w"].eligible_reason is not None:
                    await asyncio.sleep(0.01)
                channel = BalancedChannel(lb)
                echo = channel.unary_unary("/test.Load/Echo")
                assert await echo(b"x", timeout=10) == b"echo:x"
            snap = lb.snapshot()["w"]
            assert snap.load_report is not None
            assert snap.load_report.application_utilization == 0.4
            assert snap.load_report.qps == 80.0
            assert snap.load_weight == pytest.approx(200.0)
