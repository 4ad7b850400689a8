"""The ORCA server side: ServerMetrics, call_metrics, the ASGI middleware (and hypercorn on loopback)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

import poise_py as poise
from poise_py import LoadReport, load_report_from_headers
from poise_py.contrib.orca import CallMetrics, OrcaMiddleware, ServerMetrics, call_metrics, recording

pytestmark = pytest.mark.anyio


class Ticks:
    """A wall clock and a CPU clock that move only when the test says."""

    def __init__(self) -> None:
        self.wall = 100.0
        self.cpu = 5.0

    def metrics(self, **kwargs: Any) -> ServerMetrics:
        return ServerMetrics(clock=lambda: self.wall, cpu_time=lambda: self.cpu, **kwargs)


def test_measured_cpu_is_process_cpu_time_over_wall_time_per_cpu() -> None:
    ticks = Ticks()
    metrics = ticks.metrics(cpu_count=4, window=10.0)
    assert metrics.measured_cpu_utilization() == 0.0  # no wall time has passed
    ticks.wall += 2.0
    ticks.cpu += 4.0  # two CPUs busy for two seconds, of four
    assert metrics.measured_cpu_utilization() == pytest.approx(0.5)
    assert metrics.report().cpu_utilization == pytest.approx(0.5)


def test_measured_cpu_forgets_what_is_older_than_the_window() -> None:
    ticks = Ticks()
    metrics = ticks.metrics(cpu_count=1, window=10.0)
    for _ in range(10):  # ten busy seconds
        ticks.wall += 1.0
        ticks.cpu += 1.0
        metrics.measured_cpu_utilization()
    for _ in range(20):  # then twenty idle ones
        ticks.wall += 1.0
        metrics.measured_cpu_utilization()
    assert metrics.measured_cpu_utilization() == 0.0


def test_qps_and_eps_are_counted_over_the_window() -> None:
    ticks = Ticks()
    metrics = ticks.metrics(window=10.0)
    for second in range(20):
        ticks.wall = 100.0 + second
        for _ in range(3):
            metrics.count()
        metrics.count(error=True)
    qps, eps = metrics.rates()
    assert qps == pytest.approx(4.0)
    assert eps == pytest.approx(1.0)
    ticks.wall += 30.0
    assert metrics.rates() == (0.0, 0.0)


def test_values_set_win_over_the_defaults_and_none_restores_them() -> None:
    ticks = Ticks()
    metrics = ticks.metrics()
    metrics.count()
    metrics.set_cpu_utilization(0.75)
    metrics.set_qps(40)
    metrics.set_application_utilization(0.6)
    metrics.set_mem_utilization(0.2)
    metrics.set_eps(0.5)
    metrics.set_utilization("gpu", 0.9)
    metrics.set_named_metric("queue", 12)
    report = metrics.report()
    assert report == LoadReport(
        cpu_utilization=0.75,
        qps=40,
        application_utilization=0.6,
        mem_utilization=0.2,
        eps=0.5,
        utilization={"gpu": 0.9},
        named_metrics={"queue": 12},
    )
    metrics.set_cpu_utilization(None)
    metrics.set_qps(None)
    metrics.set_named_metric("queue", None)
    report = metrics.report()
    assert report.cpu_utilization == 0.0  # measured again: no time has passed
    assert report.qps == metrics.rates()[0] > 0
    assert report.named_metrics == {}


def test_the_calls_values_win_over_the_servers() -> None:
    metrics = Ticks().metrics()
    metrics.set_cpu_utilization(0.2)
    metrics.set_named_metric("queue", 1)
    metrics.set_named_metric("shared", 2)
    call = CallMetrics()
    call.set_cpu_utilization(0.9)
    call.set_named_metric("queue", 7)
    call.set_request_cost("tokens", 1234)
    call.set_utilization("kv", 0.5)
    call.set_mem_utilization(0.1)
    call.set_application_utilization(0.3)
    call.set_qps(5)
    call.set_eps(1)
    report = metrics.report(call)
    assert report.cpu_utilization == 0.9
    assert report.named_metrics == {"queue": 7, "shared": 2}
    assert report.request_cost == {"tokens": 1234}
    assert report.utilization == {"kv": 0.5}
    assert (report.mem_utilization, report.application_utilization, report.qps, report.eps) == (0.1, 0.3, 5, 1)


@pytest.mark.parametrize(
    ("act", "knob"),
    [
        (lambda m: m.set_cpu_utilization(-1), "LoadReport.cpu_utilization"),
        (lambda m: m.set_qps(float("nan")), "LoadReport.qps"),
        (lambda m: m.set_utilization("gpu", -2.0), "LoadReport.utilization['gpu']"),
        (lambda m: m.set_named_metric("", 1), "LoadReport.named_metrics"),
    ],
)
def test_a_bad_value_names_the_field(act: Any, knob: str) -> None:
    metrics = Ticks().metrics()
    with pytest.raises(poise.ConfigError) as info:
        act(metrics)
    assert info.value.knob == knob
    assert metrics.report() == Ticks().metrics().report()


@pytest.mark.parametrize(
    ("kwargs", "knob"),
    [
        ({"window": 0}, "window"),
        ({"cpu_count": 0}, "cpu_count"),
        ({"clock": 3}, "clock"),
        ({"cpu_time": None}, "cpu_time"),
    ],
)
def test_bad_server_metrics_knobs_name_the_field(kwargs: dict[str, Any], knob: str) -> None:
    with pytest.raises(poise.ConfigError) as info:
        ServerMetrics(**kwargs)
    assert info.value.knob == knob


def test_call_metrics_outside_a_request_says_where_it_works() -> None:
    with pytest.raises(LookupError, match="OrcaMiddleware or OrcaInterceptor"):
        call_metrics()
    with recording() as call:
        assert call_metrics() is call
    with pytest.raises(LookupError):
        call_metrics()


# --- the middleware, called directly -----------------------------------------------------------


async def hello(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
    """An ASGI app: answers ``/fail`` with 503, ``/boom`` by raising, anything else with 200."""
    call_metrics().set_request_cost("rows", 3)
    if scope["path"] == "/boom":
        raise RuntimeError("boom")
    status = 503 if scope["path"] == "/fail" else 200
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hi"})


async def call(app: Any, path: str = "/", kind: str = "http") -> list[MutableMapping[str, Any]]:
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app({"type": kind, "path": path, "headers": []}, receive, send)
    return sent


@pytest.mark.parametrize("form", ["TEXT", "JSON", "BIN"])
async def test_the_middleware_adds_the_report_in_the_form_asked(form: str) -> None:
    metrics = Ticks().metrics()
    metrics.set_named_metric("queue", 4)
    app = OrcaMiddleware(hello, metrics=metrics, form=form)
    start, body = await call(app)
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"text/plain"
    assert headers[b"endpoint-load-metrics"].startswith(form.encode() + b" ")
    report = load_report_from_headers(start["headers"])
    assert report is not None
    assert report.named_metrics == {"queue": 4}
    assert report.request_cost == {"rows": 3}
    assert body["body"] == b"hi"


async def test_the_middleware_counts_5xx_and_exceptions_as_errors() -> None:
    ticks = Ticks()
    metrics = ticks.metrics(window=10.0)
    app = OrcaMiddleware(hello, metrics=metrics)
    await call(app, "/")
    await call(app, "/fail")
    with pytest.raises(RuntimeError):
        await call(app, "/boom")
    qps, eps = metrics.rates()  # within the first second: counts per second of the one second
    assert (qps, eps) == (3.0, 2.0)


async def test_the_middleware_keeps_a_report_the_app_sent_and_passes_other_traffic_through() -> None:
    own = LoadReport(cpu_utilization=0.5).to_text().encode()

    async def reporting(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await send({"type": f"{scope['type']}.seen"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"Endpoint-Load-Metrics", own)]})
        await send({"type": "http.response.body", "body": b""})

    app = OrcaMiddleware(reporting)
    [start, _] = await call(app)
    assert start["headers"] == [(b"Endpoint-Load-Metrics", own)]
    assert await call(app, kind="lifespan") == [{"type": "lifespan.seen"}]
    assert await call(app, kind="websocket") == [{"type": "websocket.seen"}]


async def test_a_name_text_cannot_carry_is_sent_as_json() -> None:
    metrics = Ticks().metrics()
    metrics.set_named_metric("queue depth", 2)
    [start, _] = await call(OrcaMiddleware(hello, metrics=metrics))
    assert dict(start["headers"])[b"endpoint-load-metrics"].startswith(b"JSON ")
    report = load_report_from_headers(start["headers"])
    assert report is not None
    assert report.named_metrics == {"queue depth": 2}


@pytest.mark.parametrize(("kwargs", "knob"), [({"form": "XML"}, "form"), ({"metrics": object()}, "metrics")])
def test_bad_middleware_arguments_name_the_field(kwargs: dict[str, Any], knob: str) -> None:
    with pytest.raises(poise.ConfigError) as info:
        OrcaMiddleware(hello, **kwargs)
    assert info.value.knob == knob


# --- hypercorn on loopback ---------------------------------------------------------------------


@asynccontextmanager
async def served(app: Any) -> AsyncIterator[int]:
    """``app`` served by a real hypercorn on 127.0.0.1 (Trio or asyncio); yields the port."""
    from hypercorn.config import Config

    if anyio.get_cancelled_exc_class().__module__.startswith("trio"):
        from hypercorn.trio import serve
    else:
        from hypercorn.asyncio import serve  # type: ignore[assignment]
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        fd = sock.detach()
    config = Config()
    config.bind = [f"fd://{fd}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("tests.orca")
    config.graceful_timeout = 1.0
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            await serve(app, config, shutdown_trigger=stop.wait)

        tg.start_soon(run)
        try:
            yield port
        finally:
            stop.set()


async def get(port: int, path: str = "/") -> httpx.Response:
    with anyio.fail_after(10):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            while True:
                try:
                    return await client.get(path)
                except httpx.ConnectError:
                    await anyio.sleep(0.01)


@pytest.mark.real_clock
async def test_hypercorn_with_the_middleware_reports_the_apps_load_to_an_httpx_client() -> None:
    metrics = ServerMetrics()
    metrics.set_application_utilization(0.42)
    metrics.set_utilization("gpu", 0.8)

    async def app(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        call_metrics().set_named_metric("queue", 9)
        call_metrics().set_request_cost("tokens", 120)
        status = 500 if scope["path"] == "/fail" else 200
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async with served(OrcaMiddleware(app, metrics=metrics)) as port:
        answers = [await get(port), await get(port, "/fail"), await get(port)]
    reports = [load_report_from_headers(answer.headers) for answer in answers]
    assert [answer.status_code for answer in answers] == [200, 500, 200]
    for report in reports:
        assert report is not None
        assert report.application_utilization == 0.42
        assert report.utilization == {"gpu": 0.8}
        assert report.named_metrics == {"queue": 9}
        assert report.request_cost == {"tokens": 120}
        assert 0.0 <= report.cpu_utilization <= (os.cpu_count() or 1)
    last = reports[-1]
    assert last is not None
    assert last.qps > 0
    assert last.eps > 0
    assert last.eps < last.qps
