"""A live status page for running balancers: a plain ASGI app (no web framework needed).

::

    from poise_py.contrib.status import StatusApp, serve

    app = StatusApp({"payments": lb})          # or StatusApp(lb) for one balancer
    async with lb, anyio.create_task_group() as tg:
        await tg.start(serve, app, 8080)      # http://127.0.0.1:8080/ (needs hypercorn)
        ...

``GET /`` is an HTML page that polls ``GET /status.json`` and redraws itself; the JSON has,
for each balancer, every endpoint's circuit state, epoch, in-flight count, escalation level,
time left in its open window, counters, tier and zone, operator status and eligibility,
active health, and the last events. Any ASGI server can run the app (hypercorn, uvicorn on
asyncio); :func:`serve` runs it with hypercorn on Trio or asyncio (extra ``poise_py[status]``).

The app reads only the balancers' public API (``snapshot()``, ``statistics()``, an observer
for events) and never changes them. Mount it on loopback or behind your own access control:
it shows endpoint addresses.
"""

from __future__ import annotations

import enum
import json
import logging
import math
import socket
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import attrs
from anyio.abc import TaskStatus

from .._balancer import LoadBalancer
from .._errors import ConfigError
from .._events import BalancerEvent
from .._extras import require
from .._knobs import check_count, check_duration
from .._snapshot import EndpointSnapshot
from .._statistics import BalancerStatistics

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]

DEFAULT_EVENTS = 20


def _jsonable(value: Any) -> Any:
    """A JSON value for an event field, a counter map or an address."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, Mapping):
        return {str(_jsonable(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, tuple | list | frozenset | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    return str(value)


_EVENT_TIMES = {"reopen_at": "reopens", "until": "until", "since": "since"}
"""Event fields that are readings of the balancer clock, shown relative to the snapshot."""


def _event_json(event: BalancerEvent, now: float) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for f in attrs.fields(type(event)):
        value = getattr(event, f.name)
        if f.name == "at":
            continue
        if f.name in _EVENT_TIMES and isinstance(value, float):
            left = value - now
            fields[_EVENT_TIMES[f.name]] = f"in {left:.1f} s" if left >= 0 else f"{-left:.1f} s ago"
        else:
            fields[f.name] = _jsonable(value)
    return {
        "type": type(event).__name__,
        "at": _jsonable(event.at),
        "ago": _jsonable(max(0.0, now - event.at)),
        "endpoint": fields.pop("endpoint_id", None),
        "fields": fields,
    }


def _endpoint_json(e: EndpointSnapshot, now: float) -> dict[str, Any]:
    c = e.counters
    health = e.health
    return {
        "id": e.id,
        "address": _jsonable(e.endpoint.address),
        "tier": e.endpoint.tier,
        "zone": e.endpoint.zone,
        "weight": e.endpoint.weight,
        "state": e.state.value,
        "degraded": e.degraded,
        "epoch": e.epoch,
        "inflight": e.inflight,
        "admin": e.admin.value,
        "ineligible": None if e.eligible_reason is None else e.eligible_reason.value,
        "escalation_level": e.escalation_level,
        "consecutive_failures": e.consecutive_failures,
        "window_left": None if e.reopen_at is None else _jsonable(max(0.0, e.reopen_at - now)),
        "health": None
        if health is None
        else {
            "status": health.status.value,
            "consecutive_passes": health.consecutive_passes,
            "consecutive_failures": health.consecutive_failures,
        },
        "counters": {
            "issued": c.issued,
            "successes": c.successes,
            "faults": _jsonable(c.faults),
            "cancellations": c.cancellations,
            "probes": c.probes,
            "stale": c.stale,
            "ejections": c.ejections,
            "suppressed_ejections": c.suppressed_ejections,
            "selections": _jsonable(c.selections),
        },
    }


def _pool_json(stats: BalancerStatistics) -> dict[str, Any]:
    p = stats.pool
    return {
        "size": stats.size,
        "available": stats.available,
        "ejected": stats.ejected,
        "degraded": stats.degraded,
        "inflight": stats.inflight,
        "issued": p.issued,
        "successes": p.successes,
        "faults": _jsonable(p.faults),
        "failed_selections": p.failed_selections,
        "ejections": p.ejections,
        "suppressed_ejections": p.suppressed_ejections,
        "probes": p.probes,
        "retries_denied": p.retries_denied,
        "panics": p.panics,
        "events_dropped": p.events_dropped,
    }


def _balancers(value: Any) -> dict[str, LoadBalancer]:
    if isinstance(value, LoadBalancer):
        return {"balancer": value}
    if not isinstance(value, Mapping) or not value:
        raise ConfigError(
            "balancers", f"must be a LoadBalancer or a non-empty mapping name -> LoadBalancer, got {value!r}"
        )
    out: dict[str, LoadBalancer] = {}
    for name, lb in value.items():
        if not isinstance(name, str) or not name:
            raise ConfigError("balancers", f"names must be non-empty strings, got {name!r}")
        if not isinstance(lb, LoadBalancer):
            raise ConfigError("balancers", f"{name!r} must be a LoadBalancer, got {lb!r}")
        out[name] = lb
    return out


def _events_kept(value: Any) -> int:
    return check_count("events", value)


def _poll_interval(value: Any) -> float:
    return check_duration("poll_interval", value)


@attrs.define(eq=False)
class StatusApp:
    """An ASGI app: ``/`` a self-updating HTML page, ``/status.json`` the same data as JSON.

    Building the app subscribes an observer to each balancer to keep its last ``events``
    events; :meth:`close` unsubscribes. The app may be built before the balancers start.

    Attributes:
        balancers: one ``LoadBalancer``, or a mapping of display name -> ``LoadBalancer``
            (shown in that order; a single balancer is named ``"balancer"``).
        events: how many recent events to keep per balancer (default 20).
        title: the page's title.
        poll_interval: how often the page fetches ``/status.json``, in seconds (default 1).
    """

    balancers: dict[str, LoadBalancer] = attrs.field(converter=_balancers)
    events: int = attrs.field(default=DEFAULT_EVENTS, kw_only=True, converter=_events_kept)
    title: str = attrs.field(default="poise_py status", kw_only=True)
    poll_interval: float = attrs.field(default=1.0, kw_only=True, converter=_poll_interval)
    _recent: dict[str, deque[BalancerEvent]] = attrs.field(init=False, factory=dict)
    _observers: dict[str, Callable[[BalancerEvent], None]] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.title, str):
            raise ConfigError("title", f"must be a string, got {self.title!r}")
        for name, lb in self.balancers.items():
            recent: deque[BalancerEvent] = deque(maxlen=self.events)
            self._recent[name] = recent
            self._observers[name] = recent.append
            lb.add_observer(recent.append)

    def close(self) -> None:
        """Stop collecting events (idempotent); the page keeps showing snapshots."""
        for name, observer in self._observers.items():
            self.balancers[name].remove_observer(observer)
        self._observers.clear()

    def status(self) -> dict[str, Any]:
        """What ``/status.json`` serves: every balancer's pool, endpoints and recent events."""
        out = []
        for name, lb in self.balancers.items():
            snap = lb.snapshot()
            now = snap.taken_at
            out.append(
                {
                    "name": name,
                    "running": lb.running,
                    "taken_at": _jsonable(now),
                    "pool": _pool_json(lb.statistics()),
                    "tiers": [
                        {
                            "tier": t.tier,
                            "endpoints": t.endpoints,
                            "healthy": t.healthy,
                            "share": _jsonable(t.share),
                            "panicking": t.panicking,
                        }
                        for t in snap.tiers
                    ],
                    "endpoints": [_endpoint_json(e, now) for e in snap.endpoints],
                    "events": [_event_json(ev, now) for ev in reversed(self._recent[name])],
                }
            )
        return {"title": self.title, "balancers": out}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point (HTTP and lifespan scopes)."""
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        method = scope.get("method", "GET")
        path = scope.get("path", "/")
        if path not in {"/", "/index.html", "/status.json"}:
            await _respond(send, 404, "text/plain; charset=utf-8", b"not found\n", method)
        elif method not in {"GET", "HEAD"}:
            await _respond(send, 405, "text/plain; charset=utf-8", b"method not allowed\n", method, allow=True)
        elif path == "/status.json":
            body = json.dumps(self.status(), allow_nan=False).encode()
            await _respond(send, 200, "application/json", body, method)
        else:
            await _respond(send, 200, "text/html; charset=utf-8", self._page(), method)

    def _page(self) -> bytes:
        title = json.dumps(self.title).replace("<", "\\u003c")
        return (
            _PAGE.replace("__TITLE_JSON__", title)
            .replace("__POLL_MS__", str(round(self.poll_interval * 1000)))
            .encode()
        )


async def _respond(send: Send, status: int, kind: str, body: bytes, method: str, *, allow: bool = False) -> None:
    headers = [
        (b"content-type", kind.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if allow:
        headers.append((b"allow", b"GET, HEAD"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})


async def serve(
    app: StatusApp,
    port: int = 0,
    *,
    host: str = "127.0.0.1",
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` with hypercorn on ``host:port`` until cancelled (Trio or asyncio).

    ``port=0`` picks a free port; ``await task_group.start(serve, app)`` returns the port
    once the socket listens. Needs the extra ``poise_py[status]`` (hypercorn).
    """
    require("poise_py.contrib.status", "status", ["hypercorn"])
    from hypercorn.config import Config  # noqa: PLC0415 - optional dependency

    check_count("port", port, minimum=0, maximum=65535)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        bound: int = sock.getsockname()[1]
        fd = sock.detach()  # hypercorn owns the bound socket from here and closes it
    config = Config()
    config.bind = [f"fd://{fd}"]
    config.errorlog = logging.getLogger("poise_py.contrib.status")
    config.accesslog = None
    config.graceful_timeout = 1.0
    on_trio = anyio.get_cancelled_exc_class().__module__.startswith("trio")
    run: Any  # hypercorn types the app as its own ASGI protocol; StatusApp is plain ASGI 3
    if on_trio:
        from hypercorn.trio import serve as run_trio  # noqa: PLC0415

        run = run_trio
    else:
        from hypercorn.asyncio import serve as run_asyncio  # noqa: PLC0415

        run = run_asyncio
    stop = anyio.Event()

    async def run_until_stopped() -> None:
        # Shielded so that cancelling serve() shuts hypercorn down gracefully (its connections
        # close within graceful_timeout) instead of cancelling it mid-request.
        with anyio.CancelScope(shield=True):
            await run(app, config, shutdown_trigger=stop.wait)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_until_stopped)
        try:
            await _listening(host, bound)
            task_status.started(bound)
            await anyio.sleep_forever()
        finally:
            stop.set()


async def _listening(host: str, port: int) -> None:
    """Return once ``host:port`` accepts connections (hypercorn listens on its own schedule)."""
    while True:
        try:
            stream = await anyio.connect_tcp(host, port)
        except OSError:
            await anyio.sleep(0.01)
            continue
        await stream.aclose()
        return


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>poise_py status</title>
<style>
 body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fafafa; }
 h1 { font-size: 1.3em; margin: 0 0 .2em; } h2 { font-size: 1.1em; margin: 1.4em 0 .4em; }
 .meta { color: #666; font-size: .9em; }
 table { border-collapse: collapse; background: #fff; margin-bottom: .6em; }
 th, td { padding: .25em .6em; border-bottom: 1px solid #e4e4e4; text-align: right; white-space: nowrap; }
 th { background: #f0f0f0; font-weight: 600; } td.l, th.l { text-align: left; }
 .st { font-weight: 600; border-radius: 3px; padding: .05em .45em; }
 .closed { background: #d7f5dc; color: #145c24; } .open { background: #fbd5d5; color: #8a1111; }
 .half_open { background: #fff1c2; color: #765600; } .blocked { background: #ecd7f7; color: #5d1780; }
 .retired { background: #e2e2e2; color: #555; }
 .warn { color: #8a1111; } .ok { color: #145c24; }
 ul.events { list-style: none; padding: 0; margin: 0; font-size: .9em; }
 ul.events li { padding: .1em 0; } ul.events .t { color: #666; display: inline-block; min-width: 5em; }
 #error { color: #8a1111; }
</style>
</head>
<body>
<h1 id="title"></h1>
<div class="meta">updated <span id="updated">never</span> <span id="error"></span></div>
<div id="balancers"></div>
<script>
"use strict";
const TITLE = __TITLE_JSON__;
const POLL_MS = __POLL_MS__;
document.title = TITLE;
document.getElementById("title").textContent = TITLE;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}
function secs(v) { return v === null || v === undefined ? "-" : v.toFixed(1) + " s"; }
function sum(map) { return Object.values(map || {}).reduce((a, b) => a + b, 0); }
function faults(map) {
  const parts = Object.entries(map || {}).filter(([, n]) => n > 0).map(([k, n]) => k + " " + n);
  return parts.length ? parts.join(", ") : "0";
}
function status(ep) {
  const parts = [];
  if (ep.degraded === true) parts.push("degraded");
  if (ep.admin !== "auto") parts.push(ep.admin);
  if (ep.health) parts.push("health " + ep.health.status);
  if (ep.ineligible && ep.ineligible !== ep.admin) parts.push("out: " + ep.ineligible);
  return parts.length ? parts.join(", ") : "in rotation";
}
const COLUMNS = ["endpoint", "address", "tier", "zone", "state", "status", "epoch", "in-flight",
  "escalation", "window left", "issued", "successes", "faults", "ejections", "probes", "stale"];

function endpointRow(b, ep) {
  const c = ep.counters;
  const row = el("tr", {"data-endpoint": ep.id},
    el("td", {"class": "l id"}, ep.id),
    el("td", {"class": "l"}, ep.address === null ? "-" : Array.isArray(ep.address) ? ep.address.join(":") : ep.address),
    el("td", {}, ep.tier),
    el("td", {"class": "l"}, ep.zone === null ? "-" : ep.zone),
    el("td", {"class": "l state"}, el("span", {"class": "st " + ep.state}, ep.state.replace("_", "-"))),
    el("td", {"class": "l status " + (ep.ineligible ? "warn" : "ok")}, status(ep)),
    el("td", {"class": "epoch"}, ep.epoch),
    el("td", {"class": "inflight"}, ep.inflight),
    el("td", {}, ep.escalation_level),
    el("td", {"class": "window"}, secs(ep.window_left)),
    el("td", {}, c.issued),
    el("td", {}, c.successes),
    el("td", {"class": "faults", "title": faults(c.faults)}, sum(c.faults)),
    el("td", {}, c.ejections),
    el("td", {}, c.probes),
    el("td", {}, c.stale));
  return row;
}

function balancerSection(b) {
  const p = b.pool;
  const head = el("tr", {}, ...COLUMNS.map((name, i) => el("th", {"class": i < 2 || name === "zone" ||
    name === "state" || name === "status" ? "l" : ""}, name)));
  const body = el("tbody", {}, ...b.endpoints.map(ep => endpointRow(b, ep)));
  const events = el("ul", {"class": "events"}, ...b.events.map(ev => {
    const detail = Object.entries(ev.fields).filter(([, v]) => v !== null && v !== "" &&
      !(Array.isArray(v) && v.length === 0)).map(([k, v]) => k + "=" + (typeof v === "object" ?
      JSON.stringify(v) : v)).join(" ");
    return el("li", {}, el("span", {"class": "t"}, secs(ev.ago) + " ago"), " ",
      el("b", {}, ev.type), ev.endpoint ? " " + ev.endpoint : "", detail ? "  " + detail : "");
  }));
  if (!b.events.length) events.append(el("li", {}, "no events yet"));
  return el("section", {"data-balancer": b.name},
    el("h2", {}, b.name + (b.running ? "" : " (not running)")),
    el("div", {"class": "meta"}, p.size + " endpoints, " + p.available + " available, " + p.ejected +
      " ejected, " + p.inflight + " in flight; " + p.successes + " successes, " + sum(p.faults) +
      " faults, " + p.failed_selections + " failed selections"),
    ...(b.tiers.length > 1 ? [el("div", {"class": "meta tiers"}, b.tiers.map(t => "tier " + t.tier + ": " +
      Math.round(t.share * 100) + "% of traffic, " + t.healthy + "/" + t.endpoints + " healthy" +
      (t.panicking ? " (panic)" : "")).join("; "))] : []),
    el("table", {}, el("thead", {}, head), body),
    el("div", {"class": "meta"}, "last events, newest first"), events);
}

async function poll() {
  try {
    const response = await fetch("status.json", {cache: "no-store"});
    if (!response.ok) throw new Error("HTTP " + response.status);
    const data = await response.json();
    document.getElementById("balancers").replaceChildren(...data.balancers.map(balancerSection));
    document.getElementById("updated").textContent = new Date().toLocaleTimeString();
    document.getElementById("error").textContent = "";
  } catch (err) {
    document.getElementById("error").textContent = "(cannot reach the balancer: " + err.message + ")";
  } finally {
    setTimeout(poll, POLL_MS);
  }
}
poll();
</script>
</body>
</html>
"""
