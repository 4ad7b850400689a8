"""BalancedChannel against real grpcio aio servers on 127.0.0.1 (generic handlers, no codegen).

grpc.aio runs on asyncio only, so these run on asyncio with the real clock (the servers
are real); the Trio test checks the clear error. Deadlines are short real timeouts: no
assertion depends on how long anything took.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest
from grpc import aio

import poise_py as poise
from poise_py import Fault
from poise_py.contrib.grpc import AsyncioOnlyError, BalancedChannel, ChannelFactory, GrpcEndpoint, endpoint_target
from tests.support.discovery import Tap

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.backends("asyncio"),  # grpc.aio: asyncio only
    pytest.mark.real_clock,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.usefixtures("stale_grpc_events_dropped"),  # grpc.aio's events for closed loops
]

MARKER = ("wool-fault", "worker-internal")
ECHO = "/test.Worker/Echo"
COUNT = "/test.Worker/Count"
SUM = "/test.Worker/Sum"
CHAT = "/test.Worker/Chat"


class Worker:
    """One gRPC worker with a switchable fault: "ok", "hang" (a black hole), "marked", "internal"."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.mode = "ok"
        self.calls = 0
        self.server: aio.Server | None = None
        self.port = 0
        self.stream_gate = asyncio.Event()

    async def echo(self, request: bytes, context: aio.ServicerContext[bytes, bytes]) -> bytes:
        self.calls += 1
        if self.mode == "hang":
            await asyncio.Event().wait()
        if self.mode == "marked":
            await context.abort(grpc.StatusCode.INTERNAL, "worker shutting down", trailing_metadata=(MARKER,))
        if self.mode == "internal":
            await context.abort(grpc.StatusCode.INTERNAL, "blip")
        if self.mode == "caller":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad request")
        return self.name.encode() + b":" + request

    async def count(self, request: bytes, context: aio.ServicerContext[bytes, bytes]) -> AsyncIterator[bytes]:
        self.calls += 1
        for i in range(int(request)):
            if self.mode == "cut" and i == 2:
                await self.stream_gate.wait()  # the test kills the server here
            yield f"{self.name}:{i}".encode()

    async def sum(self, requests: AsyncIterator[bytes], context: aio.ServicerContext[bytes, bytes]) -> bytes:
        total = 0
        async for r in requests:
            total += int(r)
        return f"{self.name}:{total}".encode()

    async def chat(
        self, requests: AsyncIterator[bytes], context: aio.ServicerContext[bytes, bytes]
    ) -> AsyncIterator[bytes]:
        async for r in requests:
            yield self.name.encode() + b":" + r

    async def start(self) -> None:
        handler = grpc.method_handlers_generic_handler(
            "test.Worker",
            {
                "Echo": grpc.unary_unary_rpc_method_handler(self.echo),
                "Count": grpc.unary_stream_rpc_method_handler(self.count),
                "Sum": grpc.stream_unary_rpc_method_handler(self.sum),
                "Chat": grpc.stream_stream_rpc_method_handler(self.chat),
            },
        )
        server = aio.server()
        server.add_generic_rpc_handlers((handler,))
        self.port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        await server.start()
        self.server = server

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(None)
            self.server = None


@asynccontextmanager
async def workers(*names: str) -> AsyncIterator[list[Worker]]:
    started = [Worker(name) for name in names]
    try:
        for w in started:
            await w.start()
        yield started
    finally:
        for w in started:
            await w.stop()


def balancer(ws: list[Worker], factory: ChannelFactory | None = None, **kwargs: Any) -> poise.LoadBalancer:
    channels = factory or ChannelFactory()
    kwargs.setdefault("policy", poise.RoundRobin())
    kwargs.setdefault("classifier", poise.classify.grpc(marker=MARKER))
    return poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint(w.name, address=("127.0.0.1", w.port)) for w in ws]),
        endpoint_factory=channels,
        endpoint_close=channels.close,
        **kwargs,
    )


async def all_ready(lb: poise.LoadBalancer) -> None:
    """Wait (on real sockets) until every endpoint's channel has passed its readiness check."""
    with anyio.fail_after(10):
        while any(e.eligible_reason is not None for e in lb.snapshot().endpoints):
            await asyncio.sleep(0.01)


async def two_calls(echo: Any, *, timeout: float) -> list[str]:
    """Call ``echo`` twice; the status names of the two outcomes, sorted."""
    codes = []
    for _ in range(2):
        try:
            await echo(b"x", timeout=timeout)
            codes.append("OK")
        except aio.AioRpcError as exc:
            codes.append(exc.code().name)
    return sorted(codes)


def faults(lb: poise.LoadBalancer, endpoint_id: str) -> dict[Fault, int]:
    return dict(lb.statistics().endpoints[endpoint_id].faults)


async def test_unary_calls_are_balanced_over_every_worker_through_a_stub_shaped_call() -> None:
    async with workers("a", "b", "c") as ws:
        lb = balancer(ws)
        async with lb:
            await all_ready(lb)
            channel = BalancedChannel(lb)
            # What a generated stub does in its __init__.
            echo = channel.unary_unary(
                ECHO, request_serializer=None, response_deserializer=None, _registered_method=True
            )
            replies = [await echo(f"r{i}".encode(), timeout=5.0) for i in range(6)]
            assert sorted(r.split(b":")[0] for r in replies) == [b"a", b"a", b"b", b"b", b"c", b"c"]
            stats = lb.statistics()
            assert all(stats.endpoints[w.name].successes == 2 for w in ws)
            assert stats.inflight == 0


class EchoStub:
    """What grpcio-tools generates for a service with one unary method (here with str messages)."""

    def __init__(self, channel: Any) -> None:
        self.Echo = channel.unary_unary(
            ECHO,
            request_serializer=str.encode,
            response_deserializer=bytes.decode,
            _registered_method=True,
        )


async def test_a_generated_style_stub_takes_the_balanced_channel_unchanged_serializers_included() -> None:
    async with workers("a") as ws:
        lb = balancer(ws)
        async with lb:
            await all_ready(lb)
            channel = BalancedChannel(lb)
            await channel.channel_ready()
            stub = EchoStub(channel)
            assert await stub.Echo("hello", timeout=5.0) == "a:hello"


async def test_a_dying_worker_is_refused_and_an_idempotent_call_is_retried_on_another() -> None:
    async with workers("a", "b") as ws:
        lb = balancer(ws, seed=1)
        async with lb:
            await all_ready(lb)
            await ws[0].stop()  # connection refused from now on
            channel = BalancedChannel(lb, idempotent={ECHO}, attempts=2)
            echo = channel.unary_unary(ECHO)
            replies = [await echo(b"x", timeout=5.0) for _ in range(4)]
            assert replies == [b"b:x"] * 4
            assert faults(lb, "a")[Fault.TRANSIENT] >= 1
            assert lb.statistics().endpoints["b"].successes == 4


async def test_a_spent_retry_budget_stops_the_retry_and_counts_it() -> None:
    async with workers("a", "b") as ws:
        lb = balancer(ws, retry_budget=poise.RetryBudget(percent=0.0, min_per_second=0.0))
        async with lb:
            await all_ready(lb)
            await ws[0].stop()
            await ws[1].stop()
            echo = BalancedChannel(lb, idempotent={ECHO}, attempts=3).unary_unary(ECHO)
            with pytest.raises(aio.AioRpcError) as caught:
                await echo(b"x", timeout=5.0)
            assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
            assert lb.retries_denied == 1
            stats = lb.statistics()
            assert sum(stats.endpoints[w.name].faults[Fault.TRANSIENT] for w in ws) == 1


async def test_when_no_other_endpoint_is_eligible_the_retry_ends_with_the_real_error() -> None:
    async with workers("a", "b") as ws:
        lb = balancer(ws)
        async with lb:
            await all_ready(lb)
            lb.set_status("b", poise.AdminStatus.DRAINING)
            await ws[0].stop()
            echo = BalancedChannel(lb, idempotent={ECHO}, attempts=3).unary_unary(ECHO)
            with pytest.raises(aio.AioRpcError) as caught:
                await echo(b"x", timeout=5.0)
            assert caught.value.code() is grpc.StatusCode.UNAVAILABLE


async def test_a_timeout_that_is_no_deadline_is_refused_before_anything_is_sent() -> None:
    async with workers("a", "b") as ws:
        lb = balancer(ws)
        async with lb:
            await all_ready(lb)
            echo = BalancedChannel(lb, idempotent={ECHO}, attempts=3, wait=30.0).unary_unary(ECHO)
            for timeout in (float("nan"), float("inf"), True, -1.0, "5"):
                with pytest.raises(poise.ConfigError) as caught:
                    await echo(b"x", timeout=timeout)  # type: ignore[arg-type]
                assert caught.value.knob == "timeout"
            assert [w.calls for w in ws] == [0, 0]
            assert sum(sum(faults(lb, w.name).values()) for w in ws) == 0  # nobody was blamed


def test_a_methods_idempotent_flag_is_a_bool() -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))
    for flag in ("no", 1, "false"):
        with pytest.raises(poise.ConfigError) as caught:
            BalancedChannel(lb).unary_unary(ECHO, idempotent=flag)  # type: ignore[arg-type]
        assert caught.value.knob == "idempotent"


async def test_a_call_to_a_dead_worker_is_not_retried_unless_the_method_is_idempotent() -> None:
    async with workers("a", "b") as ws:
        lb = balancer(ws)
        async with lb:
            await all_ready(lb)
            await ws[0].stop()
            echo = BalancedChannel(lb).unary_unary(ECHO)
            assert await two_calls(echo, timeout=5.0) == ["OK", "UNAVAILABLE"]


async def test_a_black_hole_ends_at_the_call_deadline_as_a_transient_fault_with_no_retry_past_it() -> None:
    async with workers("hole", "b") as ws:
        ws[0].mode = "hang"
        lb = balancer(ws)
        async with lb:
            await all_ready(lb)
            echo = BalancedChannel(lb, idempotent={ECHO}, attempts=3).unary_unary(ECHO)
            # round robin: one call starts on each worker
            assert await two_calls(echo, timeout=0.3) == ["DEADLINE_EXCEEDED", "OK"]
            assert faults(lb, "hole")[Fault.TRANSIENT] == 1
            assert ws[1].calls == 1  # the deadline was spent: the hole's call was not retried on b
            assert lb.statistics().inflight == 0


async def test_a_marked_internal_ejects_the_worker_at_once_and_an_unmarked_one_is_a_strike() -> None:
    async with workers("marked", "blip", "ok") as ws:
        ws[0].mode = "marked"
        ws[1].mode = "internal"
        lb = balancer(ws, circuit=poise.CircuitPolicy(consecutive_failures=10))
        async with lb:
            await all_ready(lb)
            echo = BalancedChannel(lb, classifier=poise.classify.grpc(marker=MARKER)).unary_unary(ECHO)
            codes = set()
            for _ in range(4):  # round robin: every worker is called at least once
                try:
                    await echo(b"x", timeout=5.0)
                    codes.add("OK")
                except aio.AioRpcError as exc:
                    codes.add(exc.code().name)
            assert codes == {"INTERNAL", "OK"}
            snap = lb.snapshot()
            assert faults(lb, "marked")[Fault.FATAL] == 1
            assert snap["marked"].state is poise.CircuitState.OPEN
            assert faults(lb, "blip")[Fault.SUSPECT] >= 1
            assert snap["blip"].state is poise.CircuitState.CLOSED


async def test_a_caller_error_reaches_the_caller_and_is_never_retried() -> None:
    async with workers("a", "b") as ws:
        ws[0].mode = ws[1].mode = "caller"
        lb = balancer(ws)
        async with lb:
            await all_ready(lb)
            echo = BalancedChannel(lb, idempotent={ECHO}).unary_unary(ECHO)
            with pytest.raises(aio.AioRpcError) as caught:
                await echo(b"x", timeout=5.0)
            assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert ws[0].calls + ws[1].calls == 1


async def test_a_stream_holds_its_permit_until_it_ends_then_reports_success() -> None:
    async with workers("a") as ws:
        lb = balancer(ws)
        async with lb:
            await all_ready(lb)
            count = BalancedChannel(lb).unary_stream(COUNT)
            call = count(b"3", timeout=5.0)
            first = await call.read()
            assert first == b"a:0"
            assert lb.statistics().inflight == 1
            rest = [r async for r in call]
            assert rest == [b"a:1", b"a:2"]
            stats = lb.statistics()
            assert stats.inflight == 0
            assert stats.endpoints["a"].successes == 1


async def test_a_stream_cut_mid_way_fails_its_permit_with_the_transient_fault() -> None:
    async with workers("cut") as ws:
        ws[0].mode = "cut"
        lb = balancer(ws)
        async with lb:
            await all_ready(lb)
            call = BalancedChannel(lb).unary_stream(COUNT)(b"5", timeout=5.0)
            assert call.permit.endpoint.id == "cut"
            got = [await call.read(), await call.read()]
            assert got == [b"cut:0", b"cut:1"]
            assert lb.statistics().inflight == 1
            await ws[0].stop()  # the worker dies mid-stream
            with pytest.raises(aio.AioRpcError) as caught:
                async for _ in call:
                    pass
            assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
            assert faults(lb, "cut")[Fault.TRANSIENT] == 1
            assert lb.statistics().inflight == 0


async def test_a_cancelled_stream_ends_its_permit_as_a_cancellation() -> None:
    async with workers("a") as ws:
        lb = balancer(ws)
        async with lb:
            await all_ready(lb)
            call = BalancedChannel(lb).unary_stream(COUNT)(b"100", timeout=5.0)
            assert await call.read() == b"a:0"
            call.cancel()
            stats = lb.statistics()
            assert stats.inflight == 0
            assert stats.endpoints["a"].cancellations == 1
            assert sum(stats.endpoints["a"].faults.values()) == 0


async def test_stream_unary_and_stream_stream_calls_go_through_permits() -> None:
    async with workers("a") as ws:
        lb = balancer(ws)
        async with lb:
            await all_ready(lb)
            channel = BalancedChannel(lb)

            async def numbers() -> AsyncIterator[bytes]:
                for i in range(4):
                    yield str(i).encode()

            assert await channel.stream_unary(SUM)(numbers(), timeout=5.0) == b"a:6"
            chat = channel.stream_stream(CHAT)(timeout=5.0)
            await chat.write(b"hi")
            assert await chat.read() == b"a:hi"
            await chat.done_writing()
            assert [r async for r in chat] == []
            stats = lb.statistics()
            assert stats.endpoints["a"].successes == 2
            assert stats.inflight == 0


async def test_a_removed_endpoint_has_its_channel_closed_and_shutdown_closes_the_rest() -> None:
    async with workers("a", "b") as ws:
        closed: list[str] = []

        class Recording(ChannelFactory):
            async def close(self, resource: GrpcEndpoint) -> None:
                closed.append(resource.endpoint.id)
                await super().close(resource)

        channels = Recording()
        send, receive = anyio.create_memory_object_stream[poise.Update](4)
        tap = Tap(receive)
        lb = poise.LoadBalancer(
            tap, policy=poise.RoundRobin(), endpoint_factory=channels, endpoint_close=channels.close
        )
        endpoints = [poise.Endpoint(w.name, address=f"127.0.0.1:{w.port}") for w in ws]
        async with lb:
            await send.send(poise.Snapshot(1, endpoints))
            await tap.wait(1)
            await all_ready(lb)
            resources = {}
            for _ in range(2):
                async with lb.acquire() as permit:
                    resources[permit.endpoint.id] = permit.resource
            await send.send(poise.Delta(2, removed=["a"]))
            await tap.wait(2)
            assert closed == ["a"]
            assert resources["a"].channel.get_state() is grpc.ChannelConnectivity.SHUTDOWN
            assert await BalancedChannel(lb).unary_unary(ECHO)(b"x", timeout=5.0) == b"b:x"
        assert closed == ["a", "b"]
        assert resources["b"].channel.get_state() is grpc.ChannelConnectivity.SHUTDOWN
        send.close()
        receive.close()


async def test_an_endpoint_whose_channel_cannot_connect_is_quarantined_and_the_rest_serve() -> None:
    async with workers("a") as ws:
        dead = Worker("dead")
        await dead.start()
        dead_port = dead.port
        await dead.stop()
        lb = poise.LoadBalancer(
            poise.StaticDiscovery(
                [
                    poise.Endpoint("a", address=("127.0.0.1", ws[0].port)),
                    poise.Endpoint("dead", address=("127.0.0.1", dead_port)),
                ]
            ),
            endpoint_factory=ChannelFactory(),
            classifier=poise.classify.grpc(),
            readiness=poise.Readiness(timeout=5.0, cooldown=60.0),
        )
        async with lb:
            await lb.wait_ready(timeout=10)
            echo = BalancedChannel(lb).unary_unary(ECHO)
            with anyio.fail_after(10):  # waits on a real socket's refusal
                while not lb.readiness_failures:
                    await asyncio.sleep(0.01)
            assert lb.snapshot()["dead"].eligible_reason is not None
            assert [await echo(b"x", timeout=5.0) for _ in range(3)] == [b"a:x"] * 3


def test_endpoint_target_accepts_host_port_pairs_and_strings_and_names_a_bad_address() -> None:
    assert endpoint_target(poise.Endpoint("a", address=("127.0.0.1", 50051))) == "127.0.0.1:50051"
    assert endpoint_target(poise.Endpoint("a", address=("::1", 50051))) == "[::1]:50051"
    assert endpoint_target(poise.Endpoint("a", address="127.0.0.1:7")) == "127.0.0.1:7"
    with pytest.raises(poise.ConfigError) as caught:
        endpoint_target(poise.Endpoint("a"))
    assert caught.value.knob == "Endpoint.address"


def test_bad_channel_knobs_are_config_errors_naming_the_field() -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a", address="127.0.0.1:1")]))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"idempotent": "/a.B/C"}, "idempotent"),
        ({"idempotent": {"Echo"}}, "idempotent"),
        ({"attempts": 0}, "attempts"),
        ({"classifier": 3}, "classifier"),
        ({"key": 3}, "key"),
    ]
    for kwargs, field in cases:
        with pytest.raises(poise.ConfigError) as caught:
            BalancedChannel(lb, **kwargs)
        assert caught.value.knob == field
    with pytest.raises(poise.ConfigError) as caught:
        BalancedChannel(object())  # type: ignore[arg-type]
    assert caught.value.knob == "lb"


@pytest.mark.backends("trio")
async def test_on_trio_the_factory_and_every_call_raise_asyncio_only() -> None:
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint("a", address="127.0.0.1:1")]), endpoint_factory=ChannelFactory()
    )
    with pytest.raises(poise.EndpointFactoryError) as caught:
        async with lb:
            pass
    assert isinstance(caught.value.__cause__, AsyncioOnlyError)
    plain = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a", address="127.0.0.1:1")]))
    async with plain:
        with pytest.raises(AsyncioOnlyError, match="asyncio only"):
            await BalancedChannel(plain).unary_unary(ECHO)(b"x")
        with pytest.raises(AsyncioOnlyError):
            BalancedChannel(plain).unary_stream(COUNT)(b"x")


GRPC_ON_TRIO = """
import trio
import poise_py as poise
from poise_py.contrib.grpc import ChannelFactory

async def main():
    channels = ChannelFactory()
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint("w1", address="127.0.0.1:1")]),
        endpoint_factory=channels,
        endpoint_close=channels.close,
    )
    async with lb:
        pass

trio.run(main)
"""


def test_on_trio_async_with_lb_ends_in_one_line_saying_to_run_under_asyncio() -> None:
    done = subprocess.run(  # noqa: S603 - our interpreter, our script
        [sys.executable, "-c", GRPC_ON_TRIO],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).resolve().parents[2],  # this checkout
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("poise_py._errors.EndpointFactoryError: the endpoint factory failed for 'w1'; ")
    assert "nothing was applied (no pool was live yet): AsyncioOnlyError: " in last
    assert "previous pool" not in last  # there was none
    assert "Run this balancer under asyncio (anyio.run(..., backend='asyncio'))" in last
    assert last.endswith("in a worker thread (anyio.to_thread).")


def test_importing_without_grpcio_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['grpc'] = None\n"
        "try:\n"
        "    import poise_py.contrib.grpc\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc)\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)  # noqa: S603
    assert (
        out.stdout.strip()
        == "poise_py.contrib.grpc needs: pip install 'poise_py[grpc]' (in a clone: pip install -e '.[grpc]')"
    )


# What the closed loop left behind, kept to the end of the run: their finalizers would
# schedule work on that loop.
LEFT_BEHIND: list[object] = []


def leave_a_call_behind_on_a_closed_loop() -> None:
    """Run a loop that starts a call with a short deadline and closes before the call ends."""

    async def started() -> None:
        hole = Worker("hole")
        hole.mode = "hang"
        await hole.start()
        channel = aio.insecure_channel(f"127.0.0.1:{hole.port}")
        echo: aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(ECHO)
        pending = echo(b"x", timeout=0.05)
        LEFT_BEHIND.extend((hole, channel, pending))
        await asyncio.sleep(0.01)  # the call is on the wire; its deadline is still ahead
        assert not pending.done()

    loop = asyncio.new_event_loop()
    LEFT_BEHIND.append(loop)
    try:
        loop.run_until_complete(started())
    finally:
        loop.close()  # grpc core still holds the call, and will complete it


async def test_an_event_grpc_completes_for_a_closed_loop_is_dropped_not_a_failure_of_this_test(
    stale_grpc_events_dropped: list[dict[str, Any]],
) -> None:
    # grpc.aio hands such an event back to its closed loop from whichever loop reads it; the
    # suite's guard (tests/support/grpc_loops.py) drops it. Without the guard this test fails
    # with "Event loop is closed"; once grpc stops doing this, the wait below fails instead.
    await anyio.to_thread.run_sync(leave_a_call_behind_on_a_closed_loop)
    async with workers("a") as ws:
        lb = balancer(ws)
        async with lb:
            await all_ready(lb)  # this loop now reads grpc's queue too
            with anyio.fail_after(10):
                while not stale_grpc_events_dropped:
                    await asyncio.sleep(0.01)
            assert await BalancedChannel(lb).unary_unary(ECHO)(b"x", timeout=5.0) == b"a:x"
    assert {type(c["exception"]) for c in stale_grpc_events_dropped} == {RuntimeError}


class OffsetClock:
    """The real clock plus an offset the test moves: the balancer's clock, not time.monotonic()."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


async def test_a_call_deadline_is_measured_on_the_balancers_clock() -> None:
    clock = OffsetClock()

    def classifier(exc: BaseException) -> poise.Fault | poise.Classification:
        clock.offset += 10.0  # the first attempt took ten seconds, as the balancer's clock tells
        return poise.classify.grpc(marker=MARKER)(exc)

    async with workers("a", "b") as ws:
        lb = balancer(ws, clock=clock)
        async with lb:
            await all_ready(lb)
            ws[0].mode = "internal"  # an unmarked INTERNAL: retried elsewhere while time is left
            channel = BalancedChannel(lb, idempotent={ECHO}, attempts=3, classifier=classifier)
            echo = channel.unary_unary(ECHO)
            # Round robin: one call starts on each worker. The deadline (5 s) passed on the
            # balancer's clock during a's attempt: no retry on b.
            assert await two_calls(echo, timeout=5.0) == ["INTERNAL", "OK"]
            assert ws[1].calls == 1
