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
active health, load control (effective weight, slow-start progress, adaptive concurrency
limit, fixed cap), and the last events. Any ASGI server can run the app (hypercorn, uvicorn on
asyncio); :func:`serve` runs it with hypercorn on Trio or asyncio (extra ``poise_py[status]``).

The app reads only the balancers' public API (``snapshot()``, ``statistics()``, an observer
for events) and never changes them. Mount it on loopback or behind your own access control:
it shows endpoint addresses. It answers only requests whose ``Host`` it is served as (the
loopback names and its own address on its port, or ``allowed_hosts``; others get 421, so a
DNS-rebinding page cannot read it), sends ``nosniff``, a Content-Security-Policy that allows
nothing but the page's own script and style, and ``frame-ancestors 'none'``; every id,
address, zone and event text it shows is redacted and bounded (:mod:`poise_py._redact`).
"""

from __future__ import annotations

import base64
import enum
import hashlib
import json
import logging
import math
import re
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import anyio
import attrs
from anyio.abc import TaskStatus

from .. import BalancerEvent, BalancerStatistics, ConfigError, EndpointSnapshot, LoadBalancer
from .._internal import SHOWN_TEXT, check_count, check_duration, require, shown

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]

DEFAULT_EVENTS = 20
MIN_POLL_INTERVAL = 0.1
"""The page's fastest poll, in seconds: ten fetches a second per open tab."""
MAX_POLL_INTERVAL = 86_400.0
"""The page's slowest poll, one day (a browser fires a longer ``setTimeout`` at once)."""
ITEMS_SHOWN = 100
"""How many items of a list (the ids a discovery update added, say) an event shows."""
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
"""The host names the app answers by default, with the port it is served on."""


def _jsonable(value: Any) -> Any:
    """A JSON value for an event field, a counter map or an address; outside text is shown bounded."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, float):
        return round(value, DIGITS) if math.isfinite(value) else None
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, Mapping):
        return {str(_jsonable(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, tuple | list | frozenset | set):
        items = [_jsonable(v) for _, v in zip(range(ITEMS_SHOWN), value, strict=False)]
        if len(value) > ITEMS_SHOWN:
            items.append(f"… ({len(value)} items)")
        return items
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {shown(str(value))}"
    return shown(str(value))


DIGITS = 4
"""Decimal places of a number in ``/status.json`` (a tenth of a millisecond for a time)."""

_EVENT_TIMES = {"reopen_at": "reopen_in", "until": "until_in", "since": "since_in"}
"""Event fields that are readings of the balancer clock: shown as seconds from the snapshot
(negative: that long before it), since the balancer's clock means nothing outside its process."""


def _event_json(event: BalancerEvent, now: float, wall: float) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for f in attrs.fields(type(event)):
        value = getattr(event, f.name)
        if f.name == "at":
            continue
        if f.name in _EVENT_TIMES and isinstance(value, float):
            fields[_EVENT_TIMES[f.name]] = _jsonable(value - now)
        else:
            fields[f.name] = _jsonable(value)
    return {
        "type": type(event).__name__,
        "at": _jsonable(wall - (now - event.at)),  # Unix time
        "ago": _jsonable(max(0.0, now - event.at)),
        "endpoint": fields.pop("endpoint_id", None),  # shown by _jsonable
        "fields": fields,
    }


def _endpoint_json(e: EndpointSnapshot, now: float) -> dict[str, Any]:
    c = e.counters
    health = e.health
    return {
        "id": shown(e.id),
        "address": _jsonable(e.endpoint.address),
        "tier": e.endpoint.tier,
        "zone": _jsonable(e.endpoint.zone),
        "weight": e.endpoint.weight,
        "effective_weight": _jsonable(e.effective_weight),
        "ramp_progress": _jsonable(e.ramp_progress),
        "concurrency_limit": e.concurrency_limit,
        "max_in_flight": e.max_in_flight,
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
        "hedges_sent": p.hedges_sent,
        "hedges_won": p.hedges_won,
        "waits": p.waits,
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
    seconds = check_duration("poll_interval", value)
    if not MIN_POLL_INTERVAL <= seconds <= MAX_POLL_INTERVAL:
        raise ConfigError(
            "poll_interval",
            f"must be between {MIN_POLL_INTERVAL:g} s and {MAX_POLL_INTERVAL:g} s (a day), got {value!r}",
        )
    return seconds


_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(?::([0-9]{1,5}))?")
"""A ``Host`` header or an ``allowed_hosts`` entry: a name or an IPv6 address in brackets, and a port."""


def _host(text: str) -> tuple[str, int | None] | None:
    """``text`` as (name, port): lower case, no trailing dot; None if it is not a host."""
    match = _HOST.fullmatch(text.lower())
    if match is None:
        return None
    name, port = match.group(1).rstrip("."), match.group(2)
    if not name or (port is not None and int(port) > 65535):
        return None
    return name, None if port is None else int(port)


def _allowed_hosts(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigError("allowed_hosts", f"must be a list of host names (or None), got {value!r}")
    hosts = tuple(value)
    if not hosts:
        raise ConfigError("allowed_hosts", "must name at least one host; None answers the loopback names")
    for host in hosts:
        if not isinstance(host, str) or (host != "*" and _host(host) is None):
            raise ConfigError("allowed_hosts", f"{host!r} is not a host name, 'host:port', '[ipv6]:port' or '*'")
    return hosts


@attrs.define(eq=False)
class StatusApp:
    """An ASGI app: ``/`` a self-updating HTML page, ``/status.json`` the same data as JSON.

    Building the app subscribes an observer to each balancer to keep its last ``events``
    events; :meth:`close` unsubscribes. The app may be built before the balancers start.
    It needs the extra ``poise_py[status]`` (hypercorn, which :func:`serve` runs it with):
    without it, building it raises ``ModuleNotFoundError`` saying so, in one line.

    Attributes:
        balancers: one ``LoadBalancer``, or a mapping of display name -> ``LoadBalancer``
            (shown in that order; a single balancer is named ``"balancer"``).
        events: how many recent events to keep per balancer (default 20).
        title: the page's title.
        poll_interval: how often the page fetches ``/status.json``, in seconds (default 1,
            at least 0.1 and at most a day).
        allowed_hosts: the ``Host`` header values the app answers; any other gets 421.
            None (the default) answers ``127.0.0.1``, ``localhost``, ``[::1]`` and the
            address the request came in on, each with the port it came in on. Entries are
            ``"name"`` (any port), ``"name:port"``, ``"[ipv6]:port"``, or ``"*"`` (any
            host: only behind a proxy that checks the host itself).
    """

    balancers: dict[str, LoadBalancer] = attrs.field(converter=_balancers)
    events: int = attrs.field(default=DEFAULT_EVENTS, kw_only=True, converter=_events_kept)
    title: str = attrs.field(default="poise_py status", kw_only=True)
    poll_interval: float = attrs.field(default=1.0, kw_only=True, converter=_poll_interval)
    allowed_hosts: tuple[str, ...] | None = attrs.field(default=None, kw_only=True, converter=_allowed_hosts)
    _recent: dict[str, deque[BalancerEvent]] = attrs.field(init=False, factory=dict)
    _observers: dict[str, Callable[[BalancerEvent], None]] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.title, str):
            raise ConfigError("title", f"must be a string, got {self.title!r}")
        # Here, not only in serve(): serve() runs inside the caller's task group, whose
        # exception group would bury the one line under forty.
        require("poise_py.contrib.status", "status", ["hypercorn"])
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
        """What ``/status.json`` serves: every balancer's pool, endpoints and recent events.

        ``generated_at`` and every event's ``at`` are Unix times (the wall clock); durations
        are seconds; ``taken_at`` is the balancer clock's own reading, for matching logs.
        """
        out = []
        wall = time.time()
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
                    "events": [_event_json(ev, now, wall) for ev in reversed(self._recent[name])],
                }
            )
        return {"title": self.title, "generated_at": round(wall, 3), "balancers": out}

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
        if not self._answers(scope):
            await _respond(send, 421, "text/plain; charset=utf-8", b"misdirected request\n", method)
        elif path == "/favicon.ico" and method in {"GET", "HEAD"}:
            await _respond(send, 204, "image/x-icon", b"", method)  # no icon, and no 404 on every load
        elif path not in {"/", "/index.html", "/status.json"}:
            await _respond(send, 404, "text/plain; charset=utf-8", b"not found\n", method)
        elif method not in {"GET", "HEAD"}:
            await _respond(send, 405, "text/plain; charset=utf-8", b"method not allowed\n", method, allow=True)
        elif path == "/status.json":
            body = json.dumps(self.status(), allow_nan=False).encode()
            await _respond(send, 200, "application/json", body, method)
        else:
            page, policy = self._page()
            await _respond(send, 200, "text/html; charset=utf-8", page, method, policy=policy)

    def _answers(self, scope: Scope) -> bool:
        """True if a request of this ASGI ``scope`` names a host the app answers (one ``Host`` header)."""
        values = [v for k, v in scope.get("headers", ()) if k.lower() == b"host"]
        if len(values) != 1:
            return False  # none (HTTP/1.0), or two: which one would the browser have meant?
        try:
            host = _host(bytes(values[0]).decode("ascii"))
        except UnicodeDecodeError:
            return False
        if host is None:
            return False
        allowed = self.allowed_hosts
        if allowed is not None and "*" in allowed:
            return True
        name, port = host
        if port is None:
            port = 443 if scope.get("scheme") in {"https", "wss"} else 80
        if allowed is None:
            server = scope.get("server")
            names = set(LOOPBACK_HOSTS)
            if server is not None:
                address, served = server[0], server[1]
                text = str(address).lower()
                names.add(f"[{text}]" if ":" in text else text)
                if served is not None and port != served:
                    return False
            return name in names
        for entry in allowed:
            rule = _host(entry)
            if rule is not None and rule[0] == name and rule[1] in {None, port}:
                return True
        return False

    def _page(self) -> tuple[bytes, str]:
        """The page and its Content-Security-Policy, which allows its one script by hash."""
        title = json.dumps(self.title).replace("<", "\\u003c")
        script = _SCRIPT.replace("__POLL_MS__", str(round(self.poll_interval * 1000))).replace("__TITLE_JSON__", title)
        policy = (
            f"default-src 'none'; script-src '{_sha256(script)}'; style-src '{_STYLE_HASH}'; "
            "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )
        page = _PAGE.replace("__STYLE__", _STYLE).replace("__SCRIPT__", script)
        return page.encode(), policy


def _sha256(text: str) -> str:
    """A CSP source that allows exactly the inline element whose text is ``text``."""
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


_DATA_POLICY = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
"""The Content-Security-Policy of every response but the page: nothing may run or frame it."""


async def _respond(
    send: Send,
    status: int,
    kind: str,
    body: bytes,
    method: str,
    *,
    allow: bool = False,
    policy: str = _DATA_POLICY,
) -> None:
    headers = [
        (b"content-type", kind.encode()),
        *([] if status == 204 else [(b"content-length", str(len(body)).encode())]),  # RFC 9110: none on a 204
        (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"),
        (b"content-security-policy", policy.encode()),
        (b"x-frame-options", b"DENY"),
        (b"referrer-policy", b"no-referrer"),
        (b"cross-origin-resource-policy", b"same-origin"),
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
    config.errorlog.addFilter(SHOWN_TEXT)  # hypercorn's errors may quote a request
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


_STYLE = """
 body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fafafa; }
 h1 { font-size: 1.3em; margin: 0 0 .2em; } h2 { font-size: 1.1em; margin: 1.4em 0 .4em; }
 .meta { color: #666; font-size: .9em; }
 table { border-collapse: collapse; background: #fff; margin-bottom: .6em; }
 .scroll { overflow-x: auto; max-width: 100%; }
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
"""

_STYLE_HASH = _sha256(_STYLE)

_SCRIPT = """
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
function count(v) { return v === null || v === undefined ? "-" : v; }
function weight(ep) {
  const w = ep.effective_weight;
  if (w === null || w === undefined || w === ep.weight) return ep.weight;
  return (Math.round(w * 100) / 100) + " of " + ep.weight;
}
function ramp(ep) {
  const p = ep.ramp_progress;
  return p === null || p === undefined ? "-" : Math.floor(p * 100) + "%";
}
const COLUMNS = ["endpoint", "address", "tier", "zone", "state", "status", "epoch", "in-flight",
  "weight", "slow start", "limit", "cap", "escalation", "window left", "issued", "successes", "faults",
  "ejections", "probes", "stale"];

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
    el("td", {"class": "weight"}, weight(ep)),
    el("td", {"class": "ramp"}, ramp(ep)),
    el("td", {"class": "limit"}, count(ep.concurrency_limit)),
    el("td", {"class": "cap"}, count(ep.max_in_flight)),
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
      !(Array.isArray(v) && v.length === 0)).map(([k, v]) => k.endsWith("_in") && typeof v === "number" ?
      k.slice(0, -3) + " " + (v >= 0 ? "in " + secs(v) : secs(-v) + " ago") :
      k + "=" + (typeof v === "object" ? JSON.stringify(v) : v)).join(" ");
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
    el("div", {"class": "scroll"}, el("table", {}, el("thead", {}, head), body)),
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
"""
"""The page's one script; ``__POLL_MS__`` and ``__TITLE_JSON__`` are filled in per app."""

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>poise_py status</title>
<style>__STYLE__</style>
</head>
<body>
<h1 id="title"></h1>
<div class="meta">updated <span id="updated">never</span> <span id="error"></span></div>
<div id="balancers"></div>
<script>__SCRIPT__</script>
</body>
</html>
"""
