"""OrcaInterceptor on a real grpc.aio server on 127.0.0.1, called by a grpc.aio client.

grpc.aio runs on asyncio only, so these run on asyncio with the real clock (the server is real).
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events
import pytest
from grpc import aio

import poise_py as poise
from poise_py import LoadReport, load_report_from_metadata
from poise_py.contrib.orca import ServerMetrics, call_metrics
from poise_py.contrib.orca_grpc import OrcaInterceptor

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.backends("asyncio"),  # grpc.aio: asyncio only
    pytest.mark.real_clock,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.usefixtures("stale_grpc_events_dropped"),
]


async def echo(request: bytes, context: aio.ServicerContext[bytes, bytes]) -> bytes:
    call_metrics().set_request_cost("bytes", len(request))
    call_metrics().set_named_metric("queue", 3)
    if request == b"abort":
        await context.abort(grpc.StatusCode.UNAVAILABLE, "draining", trailing_metadata=(("why", "drain"),))
    if request == b"status":
        context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
    context.set_trailing_metadata((("handler-said", "hello"),))
    return b"echo:" + request


async def count(request: bytes, context: aio.ServicerContext[bytes, bytes]) -> AsyncIterator[bytes]:
    call_metrics().set_cpu_utilization(0.9)
    for i in range(int(request)):
        yield str(i).encode()


async def total(requests: AsyncIterator[bytes], context: aio.ServicerContext[bytes, bytes]) -> bytes:
    n = sum([int(r) async for r in requests])
    call_metrics().set_named_metric("sum", n)
    return str(n).encode()


async def chat(requests: AsyncIterator[bytes], context: aio.ServicerContext[bytes, bytes]) -> AsyncIterator[bytes]:
    async for r in requests:
        yield b"re:" + r
    call_metrics().set_named_metric("chatted", 1)


def plain(request: bytes, context: Any) -> bytes:
    return request


def unary(channel: aio.Channel, path: str) -> aio.UnaryUnaryMultiCallable[bytes, bytes]:
    return channel.unary_unary(path)


def unary_stream(channel: aio.Channel, path: str) -> aio.UnaryStreamMultiCallable[bytes, bytes]:
    return channel.unary_stream(path)


def stream_unary(channel: aio.Channel, path: str) -> aio.StreamUnaryMultiCallable[bytes, bytes]:
    return channel.stream_unary(path)


def stream_stream(channel: aio.Channel, path: str) -> aio.StreamStreamMultiCallable[bytes, bytes]:
    return channel.stream_stream(path)


@asynccontextmanager
async def server(metrics: ServerMetrics) -> AsyncIterator[aio.Channel]:
    handler = grpc.method_handlers_generic_handler(
        "test.Orca",
        {
            "Echo": grpc.unary_unary_rpc_method_handler(echo),
            "Count": grpc.unary_stream_rpc_method_handler(count),
            "Total": grpc.stream_unary_rpc_method_handler(total),
            "Chat": grpc.stream_stream_rpc_method_handler(chat),
        },
    )
    srv = aio.server(interceptors=[OrcaInterceptor(metrics)])
    srv.add_generic_rpc_handlers((handler,))
    port = srv.add_insecure_port("127.0.0.1:0")
    await srv.start()
    try:
        async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        await srv.stop(None)


async def test_a_unary_call_ends_with_the_servers_and_the_calls_report_next_to_the_handlers_metadata() -> None:
    metrics = ServerMetrics()
    metrics.set_application_utilization(0.25)
    metrics.set_named_metric("queue", 1)
    async with server(metrics) as channel:
        call = unary(channel, "/test.Orca/Echo")(b"hello", timeout=10)
        assert await call == b"echo:hello"
        trailing = await call.trailing_metadata()
    assert ("handler-said", "hello") in list(trailing)
    report = load_report_from_metadata(trailing)
    assert report is not None
    assert report.application_utilization == 0.25
    assert report.request_cost == {"bytes": 5}
    assert report.named_metrics == {"queue": 3}  # the call's value wins
    assert 0.0 <= report.cpu_utilization <= (os.cpu_count() or 1)
    assert report.qps > 0
    assert report.eps == 0.0


async def test_streaming_calls_end_with_their_reports() -> None:
    async with server(ServerMetrics()) as channel:
        stream = unary_stream(channel, "/test.Orca/Count")(b"3", timeout=10)
        assert [r async for r in stream] == [b"0", b"1", b"2"]
        counted = load_report_from_metadata(await stream.trailing_metadata())

        async def numbers() -> AsyncIterator[bytes]:
            for n in (b"1", b"2", b"3"):
                yield n

        summed = stream_unary(channel, "/test.Orca/Total")(numbers(), timeout=10)
        assert await summed == b"6"
        total_report = load_report_from_metadata(await summed.trailing_metadata())

        chatting = stream_stream(channel, "/test.Orca/Chat")(numbers(), timeout=10)
        assert [r async for r in chatting] == [b"re:1", b"re:2", b"re:3"]
        chat_report = load_report_from_metadata(await chatting.trailing_metadata())
    assert counted is not None
    assert counted.cpu_utilization == 0.9
    assert total_report is not None
    assert total_report.named_metrics == {"sum": 6}
    assert chat_report is not None
    assert chat_report.named_metrics == {"chatted": 1}


async def test_a_non_ok_status_and_an_abort_count_as_errors() -> None:
    metrics = ServerMetrics()
    async with server(metrics) as channel:
        echo_call = unary(channel, "/test.Orca/Echo")
        status = echo_call(b"status", timeout=10)
        with pytest.raises(aio.AioRpcError) as exhausted:
            await status
        aborted = echo_call(b"abort", timeout=10)
        with pytest.raises(aio.AioRpcError) as unavailable:
            await aborted
        ok = echo_call(b"fine", timeout=10)
        await ok
        report = load_report_from_metadata(await ok.trailing_metadata())
    assert exhausted.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert load_report_from_metadata(exhausted.value.trailing_metadata()) is not None
    assert unavailable.value.code() is grpc.StatusCode.UNAVAILABLE
    assert ("why", "drain") in list(unavailable.value.trailing_metadata())
    assert report is not None
    qps, eps = metrics.rates()
    assert eps > 0
    assert qps == pytest.approx(1.5 * eps)  # three calls, two of them errors


async def test_a_report_the_handler_attached_itself_is_kept() -> None:
    own = LoadReport(cpu_utilization=0.11)

    async def reporting(request: bytes, context: aio.ServicerContext[bytes, bytes]) -> bytes:
        context.set_trailing_metadata((("endpoint-load-metrics", own.to_text()),))
        return request

    handler = grpc.method_handlers_generic_handler("test.Own", {"Do": grpc.unary_unary_rpc_method_handler(reporting)})
    srv = aio.server(interceptors=[OrcaInterceptor()])
    srv.add_generic_rpc_handlers((handler,))
    port = srv.add_insecure_port("127.0.0.1:0")
    await srv.start()
    try:
        async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = unary(channel, "/test.Own/Do")(b"x", timeout=10)
            await call
            trailing = await call.trailing_metadata()
    finally:
        await srv.stop(None)
    assert [key for key, _ in trailing] == ["endpoint-load-metrics"]
    assert load_report_from_metadata(trailing) == own


def raw_call(port: int, path: str) -> list[tuple[bytes, bytes]]:
    """One unary call over a plain HTTP/2 connection (h2): the trailers as sent on the wire."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        conn.send_headers(
            1,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", "127.0.0.1"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ],
        )
        conn.send_data(1, b"\x00\x00\x00\x00\x02hi", end_stream=True)
        sock.sendall(conn.data_to_send())
        trailers: list[tuple[bytes, bytes]] = []
        while True:
            data = sock.recv(65536)
            assert data, "the server closed the connection before the call ended"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.TrailersReceived):
                    trailers = [(bytes(k), bytes(v)) for k, v in event.headers]
                if isinstance(event, h2.events.StreamEnded):
                    return trailers
            sock.sendall(conn.data_to_send())


@pytest.mark.parametrize("form", ["TEXT", "JSON", "BIN", None])
async def test_on_the_wire_the_binary_trailer_and_the_readable_copy_carry_one_report(form: str | None) -> None:
    metrics = ServerMetrics()
    metrics.set_cpu_utilization(0.5)
    metrics.set_qps(20)
    handler = grpc.method_handlers_generic_handler("test.Orca", {"Echo": grpc.unary_unary_rpc_method_handler(echo)})
    srv = aio.server(interceptors=[OrcaInterceptor(metrics, form=form)])
    srv.add_generic_rpc_handlers((handler,))
    port = srv.add_insecure_port("127.0.0.1:0")
    await srv.start()
    try:
        trailers = dict(await asyncio.to_thread(raw_call, port, "/test.Orca/Echo"))
    finally:
        await srv.stop(None)
    expected = LoadReport(cpu_utilization=0.5, qps=20, request_cost={"bytes": 2}, named_metrics={"queue": 3})
    # on the wire a -bin value is base64; grpc hands the decoded bytes to the application
    assert LoadReport.parse(base64.b64decode(trailers[b"endpoint-load-metrics-bin"])) == expected
    if form is None:
        assert b"endpoint-load-metrics" not in trailers
    else:
        assert trailers[b"endpoint-load-metrics"].startswith(form.encode())
        assert load_report_from_metadata([("endpoint-load-metrics", trailers[b"endpoint-load-metrics"])]) == expected


async def test_the_interceptor_refuses_something_that_is_not_server_metrics() -> None:
    with pytest.raises(poise.ConfigError) as info:
        OrcaInterceptor(metrics=object())  # type: ignore[arg-type]
    assert info.value.knob == "metrics"
    with pytest.raises(poise.ConfigError) as info:
        OrcaInterceptor(form="XML")
    assert info.value.knob == "form"
