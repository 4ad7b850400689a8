"""The live status page (``poise_py.contrib.status``): the ASGI app, its JSON, hypercorn on both backends."""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
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


async def test_status_json_shows_what_each_backend_reported_about_its_load(clock: FakeClock) -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a"), poise.Endpoint("b")]), clock=clock)
    app = StatusApp(lb)
    async with lb:
        async with lb.acquire(exclude=["b"]) as permit:
            permit.report_load(poise.LoadReport(cpu_utilization=0.9, application_utilization=0.4, qps=20.0, eps=2.0))
        clock.advance(1.5)
        data = await _status(app)
    a, b = data["balancers"][0]["endpoints"]
    assert a["load"] == {"utilization": 0.4, "qps": 20.0, "eps": 2.0, "weight": 40.0, "reported_ago": 1.5}
    assert b["load"] is None
    assert a["quota"] is None


async def test_status_json_shows_what_each_provider_said_is_left_of_its_quota(clock: FakeClock) -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a"), poise.Endpoint("b")]), clock=clock)
    app = StatusApp(lb)
    async with lb:
        async with lb.acquire(exclude=["b"]) as permit:
            permit.report_quota(poise.Quota(requests_remaining=0, requests_reset=30.0))
        async with lb.acquire(exclude=["a"]) as permit:
            permit.report_quota(poise.Quota(requests_limit=100, requests_remaining=42))
        clock.advance(10.0)
        data = await _status(app)
    a, b = data["balancers"][0]["endpoints"]
    assert a["quota"] == {"remaining": 0, "resets_in": 20.0}
    assert a["ineligible"] == "quota"
    assert b["quota"] == {"remaining": 42, "resets_in": None}


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


async def test_an_event_type_has_the_same_keys_whether_its_time_is_known_or_not(clock: FakeClock) -> None:
    lb = static_lb("a", "b", clock=clock)
    app = StatusApp(lb)
    async with lb:
        lb.acquire(exclude=["b"]).fail(poise.Fault.FATAL)  # OPEN: ejected until a time
        lb.acquire(exclude=["a"]).fail(poise.Fault.PERMANENT)  # BLOCKED: ejected until nothing
        events = (await _status(app))["balancers"][0]["events"]
    ejected = [e["fields"] for e in events if e["type"] == "EndpointEjected"]
    assert len(ejected) == 2
    assert ejected[0].keys() == ejected[1].keys()
    assert "until_in" in ejected[0]
    assert "until" not in ejected[0]
    assert None in (ejected[0]["until_in"], ejected[1]["until_in"])


async def test_an_address_json_cannot_hold_as_a_number_or_text_is_shown_without_failing_the_page(
    clock: FakeClock,
) -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no")

    eps = [poise.Endpoint("a", address=("h", 10**5000)), poise.Endpoint("b", address=Unprintable())]
    lb = poise.LoadBalancer(poise.StaticDiscovery(eps), clock=clock)
    app = StatusApp(lb)
    async with lb:
        data = await _status(app)
    addresses = [e["address"] for e in data["balancers"][0]["endpoints"]]
    assert addresses == [["h", "an int of 16610 bits"], "<Unprintable>"]


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


@pytest.mark.parametrize("host", ["", "  ", 5, None])
@pytest.mark.backends("asyncio")
async def test_serve_refuses_a_host_it_cannot_listen_on_by_name(host: Any) -> None:
    app = StatusApp(static_lb("a"))
    with pytest.raises(poise.ConfigError) as info:
        await serve(app, 0, host=host)
    assert info.value.knob == "host"


@pytest.mark.real_clock
async def test_serve_on_every_interface_starts_and_answers_on_the_loopback(clock: FakeClock) -> None:
    lb = static_lb("a", clock=clock)
    app = StatusApp(lb)
    async with lb, anyio.create_task_group() as tg:
        with anyio.fail_after(10):
            port = await tg.start(functools.partial(serve, app, 0, host="0.0.0.0"))  # noqa: S104 - the test's point
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/status.json")).status_code == 200
        tg.cancel_scope.cancel()


async def test_headline_rows_are_served_at_the_top_of_status_json(clock: FakeClock) -> None:
    lb = static_lb("a", clock=clock)
    figures = [("poise_py", "99.8% ok"), ("naive round robin", "91.2% ok")]
    app = StatusApp(lb, headline=lambda: figures)
    data = await _status(app)
    assert data["headline"] == [
        {"label": "poise_py", "text": "99.8% ok"},
        {"label": "naive round robin", "text": "91.2% ok"},
    ]
    figures.append(("calls", "12"))  # called on every fetch
    assert (await _status(app))["headline"][-1] == {"label": "calls", "text": "12"}


async def test_no_headline_gives_an_empty_list(clock: FakeClock) -> None:
    assert (await _status(StatusApp(static_lb("a", clock=clock))))["headline"] == []


@pytest.mark.parametrize("bad", ["rows", 3, [("a", "b")]])
def test_a_headline_that_is_not_callable_is_refused_naming_headline(bad: object, clock: FakeClock) -> None:
    with pytest.raises(poise.ConfigError, match="headline"):
        StatusApp(static_lb("a", clock=clock), headline=bad)


@pytest.mark.parametrize(
    "headline",
    [
        lambda: 1 / 0,
        lambda: "not rows",
        lambda: [("label only",)],
        lambda: [("label", 3)],
    ],
)
async def test_a_failing_headline_shows_nothing_and_is_logged_once(
    headline: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = StatusApp(static_lb("a", clock=clock), headline=headline)
    for _ in range(3):
        data = await _status(app)
        assert data["headline"] == []
        assert data["balancers"][0]["name"] == "balancer"  # the rest of the page is served
    failures = [r for r in caplog.records if "headline" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].name == "poise_py.contrib.status"


async def test_headline_text_is_redacted_and_bounded(clock: FakeClock) -> None:
    app = StatusApp(static_lb("a", clock=clock), headline=lambda: [("db", "https://u:pw@db/?token=t" + "x" * 900)])
    (row,) = (await _status(app))["headline"]
    assert "pw" not in row["text"]
    assert row["text"].startswith("https://***@db/?token=***")
    assert len(row["text"]) < 600


# -- the per-endpoint figures, the history, the schema --------------------------------------


async def _calls(lb: poise.LoadBalancer, clock: FakeClock, endpoint: str, seconds: float, n: int, fault: Any) -> None:
    """``n`` calls to ``endpoint`` that each take ``seconds`` on ``clock`` and end with ``fault`` (None: success)."""
    others = [e.id for e in lb.snapshot().endpoints if e.id != endpoint]
    for _ in range(n):
        permit = lb.acquire(exclude=others)
        async with permit:
            clock.advance(seconds)
            if fault is not None:
                permit.fail(fault)


async def test_each_endpoint_shows_its_last_minutes_success_rate_rate_and_latency(clock: FakeClock) -> None:
    lb = static_lb("a", "b", clock=clock)
    app = StatusApp(lb)
    async with lb:
        await _calls(lb, clock, "a", 0.010, 9, None)
        await _calls(lb, clock, "a", 0.500, 1, poise.Fault.TRANSIENT)
        await _calls(lb, clock, "b", 0.002, 4, None)
        data = await _status(app)
    a, b = data["balancers"][0]["endpoints"]
    assert a["last_minute"]["calls"] == 10
    assert a["last_minute"]["success_rate"] == 0.9
    assert a["last_minute"]["p50"] == pytest.approx(0.010, rel=0.045)
    assert a["last_minute"]["p99"] == pytest.approx(0.500, rel=0.045)
    assert b["last_minute"] == {
        "calls": 4,
        "successes": 4,
        "faults": 0,
        "rate": 4.0,  # less than a second watched: over one second
        "success_rate": 1.0,
        "p50": pytest.approx(0.002, rel=0.045),
        "p99": pytest.approx(0.002, rel=0.045),
    }
    total = data["balancers"][0]["last_minute"]
    assert (total["calls"], total["successes"], total["faults"]) == (14, 13, 1)


async def test_the_figures_leave_the_window_a_minute_after_the_calls(clock: FakeClock) -> None:
    lb = static_lb("a", clock=clock)
    app = StatusApp(lb)
    async with lb:
        await _calls(lb, clock, "a", 0.010, 3, None)
        assert (await _status(app))["balancers"][0]["endpoints"][0]["last_minute"]["calls"] == 3
        clock.advance(61.0)
        later = (await _status(app))["balancers"][0]["endpoints"][0]["last_minute"]
    assert later["calls"] == 0
    assert later["success_rate"] is None
    assert later["p99"] is None


async def test_history_holds_five_minutes_of_rate_p99_and_circuit_state_per_endpoint(clock: FakeClock) -> None:
    lb = static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=clock)
    app = StatusApp(lb, poll_interval=2.0)
    async with lb:
        clock.advance(1000.0 - clock.now % 2 - 0.5)  # 1999.5: 1.5 s into the step from 1998
        await _status(app)  # sees both closed
        clock.advance(2.0)
        await _calls(lb, clock, "b", 0.25, 1, poise.Fault.FATAL)  # opens b's circuit at 2001.75
        clock.advance(4.0)
        data = await _status(app)  # at 2005.75: the step from 2004 has not ended
    step = data["balancers"][0]["history_step"]
    a, b = (e["history"] for e in data["balancers"][0]["endpoints"])
    assert step == 2.0
    assert len(b["rate"]) == len(b["p99"]) == len(b["state"]) == 149
    assert b["rate"][-3:] == [0.0, 0.5, 0.0]  # one call in a two-second step
    assert b["p99"][-2] == pytest.approx(0.25, rel=0.045)
    assert b["state"][-3:] == ["closed", "open", "open"]
    assert a["state"][-1] == "closed"
    assert b["start_at"] == pytest.approx(data["generated_at"] - (2005.75 - 1706.0), abs=0.01)  # 150 steps back
    assert b["start_at_iso"].endswith("Z")


async def test_in_flight_shows_against_the_lower_of_limit_and_cap(clock: FakeClock) -> None:
    discovery = poise.StaticDiscovery([poise.Endpoint("a", metadata={"max_in_flight": 3}), poise.Endpoint("b")])
    lb = poise.LoadBalancer(discovery, clock=clock)
    app = StatusApp(lb)
    async with lb, lb.acquire(exclude=["b"]):
        a, b = (await _status(app))["balancers"][0]["endpoints"]
    assert (a["inflight"], a["inflight_cap"]) == (1, 3)
    assert b["inflight_cap"] is None


async def test_repeated_degradation_events_are_one_line_with_a_count(clock: FakeClock) -> None:
    lb = static_lb("a", "b", clock=clock)
    app = StatusApp(lb)
    observe = app._observers["balancer"]
    for i in range(5):  # what the balancer sends as b flaps
        observe(poise.EndpointDegraded(at=clock.now + i, endpoint_id="b", cause=None))
        observe(poise.EndpointDegradationEnded(at=clock.now + i + 0.5, endpoint_id="b", ejected=False))
    clock.advance(10.0)
    async with lb:
        events = (await _status(app))["balancers"][0]["events"]
    (line,) = [e for e in events if e["endpoint"] == "b"]
    assert line["type"] == "EndpointDegradationEnded"
    assert line["endpoint"] == "b"
    assert line["count"] == 10
    assert line["types"] == {"EndpointDegraded": 5, "EndpointDegradationEnded": 5}
    assert line["ago"] == pytest.approx(5.5)
    assert line["first_ago"] == pytest.approx(10.0)
    assert line["first_at"] == pytest.approx(line["at"] - 4.5, abs=0.01)


async def test_status_json_has_a_schema_version_and_iso_times_beside_unix_times(clock: FakeClock) -> None:
    lb = static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=clock)
    app = StatusApp(lb)
    async with lb:
        await _calls(lb, clock, "b", 0.1, 1, poise.Fault.FATAL)
        data = await _status(app)
    assert data["schema"] == 2
    assert data["poll_interval"] == 1.0

    def same_moment(unix: float, iso: str) -> None:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", iso)
        parsed = datetime.fromisoformat(iso.replace("Z", "+00:00"))
        assert parsed.tzinfo is not None
        assert parsed.timestamp() == pytest.approx(unix, abs=0.0006)  # the same moment, to the millisecond

    same_moment(data["generated_at"], data["generated_at_iso"])
    balancer = data["balancers"][0]
    same_moment(data["generated_at"], balancer["taken_at_iso"])
    for event in balancer["events"]:
        same_moment(event["at"], event["at_iso"])
        same_moment(event["first_at"], event["first_at_iso"])
    for e in balancer["endpoints"]:
        same_moment(e["history"]["start_at"], e["history"]["start_at_iso"])


def _numbers_are_numbers(value: Any, path: str = "") -> None:
    """No number in ``value`` is a display string ("1.2 s", "50%", "3 ms")."""
    if isinstance(value, str):
        assert not re.fullmatch(r"-?[\d.]+ ?(s|ms|%|µs|/s)", value), f"{path} is a display string: {value!r}"
    elif isinstance(value, dict):
        for k, v in value.items():
            _numbers_are_numbers(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _numbers_are_numbers(v, f"{path}[{i}]")


async def test_every_field_of_status_json_is_a_value_not_a_display_string(clock: FakeClock) -> None:
    lb = static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=clock)
    app = StatusApp(lb)
    async with lb:
        await _calls(lb, clock, "a", 0.123456789, 3, None)
        await _calls(lb, clock, "b", 0.1, 1, poise.Fault.TRANSIENT)
        data = await _status(app)
    _numbers_are_numbers(data)
    assert not re.search(r"\d\.\d{7,}", json.dumps(data)), "latencies to the microsecond, others to 4 places"


async def test_close_removes_the_call_observer_too(clock: FakeClock) -> None:
    lb = static_lb("a", clock=clock)
    app = StatusApp(lb)
    app.close()
    async with lb:
        await _calls(lb, clock, "a", 0.01, 3, None)
        data = await _status(app)
    assert data["balancers"][0]["endpoints"][0]["last_minute"]["calls"] == 0
    assert lb._call_observers == ()


async def test_the_favicon_is_an_svg_served_by_the_app_and_linked_from_the_page(clock: FakeClock) -> None:
    app = StatusApp(static_lb("a", clock=clock))
    status, headers, body = await _get(app, "/favicon.svg")
    assert status == 200
    assert headers[b"content-type"] == b"image/svg+xml"
    assert body.startswith(b"<svg")
    page = (await _get(app, "/"))[2].decode()
    assert '<link rel="icon" type="image/svg+xml" href="favicon.svg">' in page


async def test_the_legend_explains_every_column_and_every_out_reason(clock: FakeClock) -> None:
    from poise_py.contrib.status import COLUMNS, OUT_REASONS

    page = (await _get(StatusApp(static_lb("a", clock=clock)), "/"))[2].decode()
    for name, help_text in COLUMNS:
        assert f"<dt>{name}</dt>" in page
        assert len(help_text) > 20
    assert set(OUT_REASONS) == set(poise.IneligibleReason)
    for reason in poise.IneligibleReason:
        assert f"<dt>out: {reason.value}</dt>" in page
    for word in ("epoch", "escalation", "stale", "out: probes_taken"):
        assert f"<dt>{word}</dt>" in page
