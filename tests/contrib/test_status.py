"""The live status page (``poise_py.contrib.status``): the ASGI app, its JSON, hypercorn on both backends."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import httpx
import pytest

import poise_py as poise
from poise_py.contrib.status import StatusApp, serve
from tests.support.clocks import TRIP_AT_ONCE, FakeClock, endpoints, static_lb

pytestmark = pytest.mark.anyio


SERVED_ON = ("127.0.0.1", 8080)
"""The address the direct calls say the app is served on (ASGI's ``scope["server"]``)."""


async def call_app(
    app: StatusApp,
    path: str = "/status.json",
    *,
    method: str = "GET",
    headers: Sequence[tuple[bytes, bytes]] = ((b"host", b"127.0.0.1:8080"),),
    server: tuple[str, int] | None = SERVED_ON,
    scheme: str = "http",
) -> tuple[int, dict[bytes, bytes], bytes]:
    """Call the ASGI app as a server listening on ``server`` would, with these request headers."""
    sent: list[Mapping[str, Any]] = []

    async def receive() -> Mapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Mapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "scheme": scheme,
        "method": method,
        "path": path,
        "headers": list(headers),
        "server": server,
    }
    await app(scope, receive, send)
    start, body = sent
    return start["status"], dict(start["headers"]), body["body"]


async def _get(
    app: StatusApp, path: str, method: str = "GET", *, host: bytes | None = b"127.0.0.1:8080"
) -> tuple[int, dict[bytes, bytes], bytes]:
    """Call the ASGI app directly, the way a server on 127.0.0.1:8080 would (``host``: the Host header)."""
    return await call_app(app, path, method=method, headers=[] if host is None else [(b"host", host)])


async def _status(app: StatusApp) -> dict[str, Any]:
    status, headers, body = await _get(app, "/status.json")
    assert status == 200
    assert headers[b"content-type"] == b"application/json"
    data: dict[str, Any] = json.loads(body)
    return data


async def test_status_json_has_every_endpoint_with_circuit_tier_zone_and_counters(clock: FakeClock) -> None:
    discovery = poise.StaticDiscovery(
        [poise.Endpoint("a", address="10.0.0.1:80", tier=0, zone="z1"), poise.Endpoint("b", tier=1)]
    )
    lb = poise.LoadBalancer(discovery, clock=clock)
    app = StatusApp({"payments": lb})
    async with lb:
        async with lb.acquire() as permit:
            inflight = await _status(app)
            permit.succeed()
        data = await _status(app)
    [inflight_b] = inflight["balancers"]
    assert sum(e["inflight"] for e in inflight_b["endpoints"]) == 1
    [b] = data["balancers"]
    assert b["name"] == "payments"
    assert [e["id"] for e in b["endpoints"]] == ["a", "b"]
    a = b["endpoints"][0]
    assert a["address"] == "10.0.0.1:80"
    assert (a["tier"], a["zone"], a["state"], a["epoch"], a["admin"]) == (0, "z1", "closed", 0, "auto")
    assert a["counters"]["successes"] == 1
    assert a["counters"]["faults"] == {"transient": 0, "suspect": 0, "fatal": 0, "permanent": 0, "caller": 0}
    assert b["pool"]["size"] == 2
    assert b["pool"]["successes"] == 1
    assert [t["tier"] for t in b["tiers"]] == [0, 1]


async def test_status_json_shows_each_endpoints_effective_weight_ramp_limit_and_cap(clock: FakeClock) -> None:
    publisher = poise.DiscoveryPublisher()
    lb = poise.LoadBalancer(
        publisher.subscribe(),
        max_in_flight=6,
        concurrency=poise.AdaptiveConcurrency(poise.Gradient2(initial_limit=5)),
        slow_start=poise.SlowStart(window=10.0),
        clock=clock,
    )
    app = StatusApp(lb)
    publisher.publish(poise.Snapshot(1, [poise.Endpoint("a", weight=2)]))
    async with lb:
        await lb.wait_ready()
        publisher.publish(poise.Delta(2, added=[poise.Endpoint("<b>", weight=4, metadata={"max_in_flight": 3})]))
        while "<b>" not in lb.snapshot():
            await anyio.sleep(0)
        clock.advance(2.5)
        data = await _status(app)
        publisher.close()
    [balancer] = data["balancers"]
    a, b = balancer["endpoints"]
    assert (a["weight"], a["effective_weight"], a["ramp_progress"]) == (2, 2.0, None)
    assert (a["concurrency_limit"], a["max_in_flight"]) == (5, 6)
    assert b["id"] == "<b>"  # text in JSON; the page sets it as text, never as markup
    assert (b["weight"], b["ramp_progress"], b["concurrency_limit"], b["max_in_flight"]) == (4, 0.25, 5, 3)
    assert b["effective_weight"] == pytest.approx(4 * 0.25)
    assert any(e["type"] == "SlowStartBegan" and e["endpoint"] == "<b>" for e in balancer["events"])


async def test_an_endpoint_the_ejection_guard_keeps_shows_as_degraded(clock: FakeClock) -> None:
    guarded = poise.CircuitPolicy(
        consecutive_failures=1, minimum_volume=1, max_ejection_percent=0.5, escalation=poise.Escalation(jitter=0.0)
    )
    lb = static_lb("a", "b", circuit=guarded, clock=clock)
    app = StatusApp(lb)
    async with lb:
        for excluded in ("b", "a"):  # a is ejected; b's trip is refused by the 50% guard
            with pytest.raises(OSError):
                async with lb.acquire(exclude=[excluded]):
                    raise OSError("reset")
        data = await _status(app)
    [b] = data["balancers"]
    assert {e["id"]: (e["state"], e["degraded"]) for e in b["endpoints"]} == {
        "a": ("open", False),
        "b": ("closed", True),
    }
    assert b["pool"]["degraded"] == 1


async def test_an_open_circuit_shows_its_escalation_and_the_time_left_in_its_window(clock: FakeClock) -> None:
    lb = static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=clock)
    app = StatusApp(lb)
    async with lb:
        permit = lb.acquire(exclude=["b"])
        async with permit:
            permit.fail(poise.Fault.SUSPECT)
        clock.advance(10.0)
        data = await _status(app)
    a = data["balancers"][0]["endpoints"][0]
    assert a["id"] == "a"
    assert a["state"] == "open"
    assert a["epoch"] == 1
    assert a["escalation_level"] == 1
    assert a["window_left"] == pytest.approx(20.0)
    assert a["ineligible"] == "open"
    assert a["counters"]["faults"]["suspect"] == 1
    assert a["counters"]["ejections"] == 1
    assert data["balancers"][0]["pool"]["ejected"] == 1


async def test_draining_shows_as_the_operator_status(clock: FakeClock) -> None:
    lb = static_lb("a", "b", clock=clock)
    app = StatusApp(lb)
    async with lb:
        lb.set_status("b", poise.AdminStatus.DRAINING)
        data = await _status(app)
    b = data["balancers"][0]["endpoints"][1]
    assert (b["admin"], b["ineligible"]) == ("draining", "draining")


async def test_last_events_are_newest_first_and_bounded(clock: FakeClock) -> None:
    lb = static_lb("a", "b", "c", circuit=TRIP_AT_ONCE, clock=clock)
    app = StatusApp(lb, events=2)
    async with lb:
        for victim in ("a", "b"):
            permit = lb.acquire(exclude=[e for e in "abc" if e != victim])
            async with permit:
                permit.fail(poise.Fault.FATAL)
        clock.advance(5.0)
        events = (await _status(app))["balancers"][0]["events"]
    assert len(events) == 2
    newest = events[0]
    assert newest["endpoint"] == "b"
    assert newest["ago"] == pytest.approx(5.0)
    assert "b" in json.dumps(events[0])
    assert all(e["endpoint"] in {"a", "b", None} for e in events)


async def test_times_are_unix_times_and_durations_never_readings_of_the_balancers_clock(clock: FakeClock) -> None:
    lb = static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=clock)
    app = StatusApp(lb)
    clock.advance(123_456.0)  # a monotonic clock's reading: meaningless outside the process
    async with lb:
        permit = lb.acquire(exclude=["b"])
        async with permit:
            permit.fail(poise.Fault.TRANSIENT, retry_after=30.0)
        clock.advance(4.0)
        before = time.time()
        data = await _status(app)
        after = time.time()
    assert before - 0.01 <= data["generated_at"] <= after + 0.01
    opened = next(e for e in data["balancers"][0]["events"] if e["type"] == "CircuitOpened")
    assert opened["ago"] == pytest.approx(4.0)
    assert opened["at"] == pytest.approx(data["generated_at"] - 4.0, abs=0.01)  # the wall clock's when
    assert opened["fields"]["reopen_in"] == pytest.approx(26.0)  # seconds, a number: the page words it
    assert not any(isinstance(v, str) and v.endswith(" s") for v in opened["fields"].values())
    window = data["balancers"][0]["endpoints"][0]["window_left"]
    assert window == pytest.approx(26.0)
    text = json.dumps(data)
    assert not re.search(r"\d\.\d{5,}", text), "numbers are rounded"


async def test_close_stops_collecting_events(clock: FakeClock) -> None:
    lb = static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=clock)
    app = StatusApp(lb)
    app.close()
    app.close()
    async with lb:
        permit = lb.acquire(exclude=["b"])
        async with permit:
            permit.fail(poise.Fault.FATAL)
        data = await _status(app)
    assert data["balancers"][0]["events"] == []
    assert data["balancers"][0]["endpoints"][0]["state"] == "open"


async def test_several_balancers_are_shown_in_order_by_name(clock: FakeClock) -> None:
    first = static_lb("a", clock=clock)
    second = static_lb("x", "y", clock=clock)
    app = StatusApp({"first": first, "second": second})
    async with first, second:
        data = await _status(app)
    assert [b["name"] for b in data["balancers"]] == ["first", "second"]
    assert [len(b["endpoints"]) for b in data["balancers"]] == [1, 2]


async def test_the_page_is_html_that_polls_status_json(clock: FakeClock) -> None:
    lb = static_lb("a", clock=clock)
    app = StatusApp(lb, title="orders </script>", poll_interval=0.5)
    status, headers, body = await _get(app, "/")
    page = body.decode()
    assert status == 200
    assert headers[b"content-type"].startswith(b"text/html")
    assert 'fetch("status.json"' in page
    assert "const POLL_MS = 500;" in page
    assert "orders </script>" not in page  # the title cannot end the script
    assert "orders \\u003c/script>" in page


async def test_unknown_paths_are_404_writes_are_405_and_head_has_no_body(clock: FakeClock) -> None:
    app = StatusApp(static_lb("a", clock=clock))
    assert (await _get(app, "/nope"))[0] == 404
    assert (await _get(app, "/favicon.ico"))[0] == 204  # a browser asks on every load: no icon, no 404
    status, headers, _ = await _get(app, "/status.json", method="POST")
    assert (status, headers[b"allow"]) == (405, b"GET, HEAD")
    status, headers, body = await _get(app, "/", method="HEAD")
    assert (status, body) == (200, b"")
    assert int(headers[b"content-length"]) > 0


async def test_lifespan_startup_and_shutdown_are_acknowledged(clock: FakeClock) -> None:
    app = StatusApp(static_lb("a", clock=clock))
    incoming = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[Mapping[str, Any]] = []

    async def receive() -> Mapping[str, Any]:
        return next(incoming)

    async def send(message: Mapping[str, Any]) -> None:
        sent.append(message)

    await app({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"balancers": {}}, "balancers"),
        ({"balancers": {"x": object()}}, "balancers"),
        ({"balancers": {"": None}}, "balancers"),
        ({"balancers": "lb"}, "balancers"),
        ({"events": 0}, "events"),
        ({"events": True}, "events"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"poll_interval": float("nan")}, "poll_interval"),
        ({"title": 3}, "title"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    options: dict[str, Any] = {"balancers": poise.LoadBalancer(poise.StaticDiscovery(endpoints("a")))}
    options.update(kwargs)
    balancers = options.pop("balancers")
    with pytest.raises(poise.ConfigError) as info:
        StatusApp(balancers, **options)
    assert info.value.knob == field


# The served tests talk to a real hypercorn over real sockets: Trio on its real clock here.
@pytest.mark.real_clock
async def test_hypercorn_serves_the_page_and_the_json_on_loopback(clock: FakeClock) -> None:
    lb = static_lb("a", "b", clock=clock)
    app = StatusApp(lb)
    async with lb, anyio.create_task_group() as tg:
        port = await tg.start(serve, app)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            page = await client.get("/")
            data = (await client.get("/status.json")).json()
        tg.cancel_scope.cancel()
    assert page.status_code == 200
    assert "<title>" in page.text
    assert [e["id"] for e in data["balancers"][0]["endpoints"]] == ["a", "b"]


@pytest.mark.parametrize("port", [-1, 70000, True, "80"])
@pytest.mark.backends("asyncio")
async def test_serve_refuses_a_bad_port(port: Any) -> None:
    app = StatusApp(static_lb("a"))
    with pytest.raises(poise.ConfigError) as info:
        await serve(app, port)
    assert info.value.knob == "port"
