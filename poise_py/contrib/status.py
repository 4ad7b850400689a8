"""A live status page for running balancers: a plain ASGI app (no web framework needed).

::

    from poise_py.contrib.status import StatusApp, serve

    app = StatusApp({"payments": lb})          # or StatusApp(lb) for one balancer
    async with lb, anyio.create_task_group() as tg:
        await tg.start(serve, app, 8080)      # http://127.0.0.1:8080/ (needs hypercorn)
        ...

``GET /`` is an HTML page that polls ``GET /status.json`` and redraws itself; the JSON has,
for each balancer, every endpoint's circuit state, epoch, in-flight count against its cap,
escalation level, time left in its open window, counters, tier and zone, operator status
and eligibility, active health, load control (effective weight, slow-start progress,
adaptive concurrency limit, fixed cap), its success rate, call rate and p50/p99 latency
over the last minute and five minutes of history (drawn as sparklines by the page's own
script), the balancer's own figures, and the last events, repeats coalesced into one line
with a count. ``headline=`` adds the application's own rows at the top. The page explains
every column (tooltips and a legend), filters its events in the browser, fits a 480 px
screen, and fetches nothing but its own JSON and icon. The JSON's layout is versioned
(``"schema"``, :data:`SCHEMA`) and documented in docs/status.md. Any ASGI server can run
the app (hypercorn, uvicorn on asyncio); :func:`serve` runs it with hypercorn on Trio or
asyncio (extra ``poise_py[status]``).

The app reads only the balancers' public API (``snapshot()``, ``statistics()``, an observer
for events, a call observer for the figures: :mod:`._status_history` says what it keeps)
and never changes them. Mount it on loopback or behind your own access control: it shows
endpoint addresses. It answers only requests whose ``Host`` it is served as (the
loopback names and its own address on its port, or ``allowed_hosts``; others get 421, so a
DNS-rebinding page cannot read it), sends ``nosniff``, a Content-Security-Policy that allows
nothing but the page's own script and style, and ``frame-ancestors 'none'``; every id,
address, zone and event text it shows is redacted and bounded (:mod:`poise_py._redact`).
"""

from __future__ import annotations

import base64
import enum
import hashlib
import html
import json
import logging
import math
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
import attrs
from anyio.abc import TaskStatus

from .. import (
    BalancerEvent,
    BalancerStatistics,
    CallEnded,
    CircuitClosed,
    CircuitHalfOpened,
    CircuitOpened,
    CircuitState,
    ConfigError,
    EndpointEjected,
    EndpointSnapshot,
    IneligibleReason,
    LoadBalancer,
)
from .._internal import RESOLUTION, SHOWN_TEXT, check_count, check_duration, require, shown
from ._status_events import Entry, EventLog
from ._status_history import CallRecorder, Point, Window

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
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):  # JSON's numbers: past 2**63 (or 4,300 digits) it is words, not a number
        return value if -(2**63) <= value < 2**63 else f"an int of {value.bit_length()} bits"
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
    try:
        if isinstance(value, BaseException):
            return f"{type(value).__name__}: {shown(str(value))}"
        return shown(str(value))
    except Exception:  # noqa: BLE001 - a value whose str() fails is shown by its type
        return f"<{type(value).__name__}>"


DIGITS = 4
"""Decimal places of a number in ``/status.json`` (a tenth of a millisecond for a time)."""

_EVENT_TIMES = {"reopen_at": "reopen_in", "until": "until_in", "since": "since_in"}
"""Event fields that are readings of the balancer clock: shown as seconds from the snapshot
(negative: that long before it), since the balancer's clock means nothing outside its process."""


SCHEMA = 2
"""The version of ``/status.json``'s layout (docs/status.md): raised when a field changes meaning
or goes away; new fields may appear without it."""

LATENCY_DIGITS = 6
"""Decimal places of a latency in ``/status.json``: seconds to the microsecond."""


def _iso(unix: float) -> str:
    """A Unix time as ISO 8601 in UTC, rounded to the millisecond: ``2026-12-05T05:16:29.123Z``."""
    seconds, millis = divmod(round(unix * 1000), 1000)
    return f"{datetime.fromtimestamp(seconds, tz=UTC):%Y-%m-%dT%H:%M:%S}.{millis:03d}Z"


def _latency(value: float | None) -> float | None:
    return None if value is None else round(value, LATENCY_DIGITS)


def _rate(value: float | None) -> float | None:
    return None if value is None else round(value, DIGITS)


def _event_json(entry: Entry, now: float, wall: float) -> dict[str, Any]:
    """One line of the event log: its newest event, and how many it stands for since when."""
    event = entry.last
    fields: dict[str, Any] = {}
    for f in attrs.fields(type(event)):
        value = getattr(event, f.name)
        if f.name == "at":
            continue
        if f.name in _EVENT_TIMES:  # renamed whatever the value: one event type, one set of keys
            fields[_EVENT_TIMES[f.name]] = None if value is None else _jsonable(value - now)
        else:
            fields[f.name] = _jsonable(value)
    at = wall - (now - event.at)
    first_at = wall - (now - entry.first_at)
    return {
        "type": type(event).__name__,
        "at": _jsonable(at),  # Unix time
        "at_iso": _iso(at),
        "ago": _jsonable(max(0.0, now - event.at)),
        "endpoint": fields.pop("endpoint_id", None),  # shown by _jsonable
        "fields": fields,
        "count": entry.count,
        "types": dict(entry.types),
        "first_at": _jsonable(first_at),
        "first_at_iso": _iso(first_at),
        "first_ago": _jsonable(max(0.0, now - entry.first_at)),
    }


def _window_json(w: Window) -> dict[str, Any]:
    return {
        "calls": w.calls,
        "successes": w.successes,
        "faults": w.faults,
        "rate": _rate(w.rate),
        "success_rate": _rate(w.success_rate),
        "p50": _latency(w.p50),
        "p99": _latency(w.p99),
    }


def _history_json(points: list[Point], now: float, wall: float) -> dict[str, Any]:
    start = wall - (now - points[0].start) if points else wall
    return {
        "start_at": _jsonable(start),
        "start_at_iso": _iso(start),
        "rate": [_rate(p.rate) for p in points],
        "p99": [_latency(p.p99) for p in points],
        "state": [None if p.state is None else p.state.value for p in points],
    }


def _inflight_cap(e: EndpointSnapshot) -> int | None:
    """The most permits the endpoint may have out now: the lower of its adaptive limit and fixed cap."""
    caps = [c for c in (e.concurrency_limit, e.max_in_flight) if c is not None]
    return min(caps) if caps else None


def _endpoint_json(e: EndpointSnapshot, now: float, wall: float, recorder: CallRecorder) -> dict[str, Any]:
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
        "inflight_cap": _inflight_cap(e),
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
        "load": _load_json(e, now),
        "quota": None
        if e.quota_remaining is None
        else {
            "remaining": e.quota_remaining,
            "resets_in": None if e.quota_resets_at is None else _jsonable(max(0.0, e.quota_resets_at - now)),
        },
        "last_minute": _window_json(recorder.window(now, e.id)),
        "history": _history_json(recorder.points(now, e.id), now, wall),
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


def _load_json(e: EndpointSnapshot, now: float) -> dict[str, Any] | None:
    """What its backend last said about its load (ORCA), or None before any report."""
    report = e.load_report
    if report is None or e.load_reported_at is None:
        return None
    return {
        "utilization": _jsonable(report.application_utilization or report.cpu_utilization),
        "qps": _jsonable(report.qps),
        "eps": _jsonable(report.eps),
        "weight": _jsonable(e.load_weight),
        "reported_ago": _jsonable(max(0.0, now - e.load_reported_at)),
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
    seconds = check_duration("poll_interval", value, minimum=RESOLUTION)
    if not MIN_POLL_INTERVAL <= seconds <= MAX_POLL_INTERVAL:
        raise ConfigError(
            "poll_interval",
            f"must be between {MIN_POLL_INTERVAL:g} s and {MAX_POLL_INTERVAL:g} s (a day), got {value!r}",
        )
    return seconds


def _headline(value: Any) -> Callable[[], Sequence[tuple[str, str]]] | None:
    if value is not None and not callable(value):
        raise ConfigError("headline", f"must be a callable returning (label, text) rows, or None, got {value!r:.80}")
    rows: Callable[[], Sequence[tuple[str, str]]] | None = value
    return rows


HEADLINE_ROWS = 20
"""The most ``headline`` rows shown (the rest are dropped)."""

_LOG = logging.getLogger("poise_py.contrib.status")
_LOG.addFilter(SHOWN_TEXT)  # the headline's exception, and hypercorn's errors, may quote outside text


def _headline_rows(rows: Any) -> list[dict[str, str]]:
    """``rows`` (what ``headline()`` returned) as JSON rows; TypeError if they are not (label, text) pairs."""
    if isinstance(rows, str | bytes) or not isinstance(rows, Iterable):
        raise TypeError(f"headline() must return a sequence of (label, text) pairs, got {rows!r:.80}")
    out = []
    for row in rows:
        if not (isinstance(row, tuple | list) and len(row) == 2 and all(isinstance(v, str) for v in row)):
            raise TypeError(f"each headline row must be a (label, text) pair of strings, got {row!r:.80}")
        out.append({"label": shown(row[0]), "text": shown(row[1])})
        if len(out) == HEADLINE_ROWS:
            break
    return out


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


_EVENT_STATES: dict[type[BalancerEvent], CircuitState] = {
    CircuitOpened: CircuitState.OPEN,
    CircuitHalfOpened: CircuitState.HALF_OPEN,
    CircuitClosed: CircuitState.CLOSED,
}
"""The circuit state each circuit event leaves its endpoint in (for the history's state strip)."""


def _event_observer(log: EventLog, recorder: CallRecorder) -> Callable[[BalancerEvent], None]:
    """The balancer observer of one balancer: keeps the event, and notes a circuit's new state."""

    def observe(event: BalancerEvent) -> None:
        log.add(event)
        state = _EVENT_STATES.get(type(event))
        if state is None and isinstance(event, EndpointEjected):
            state = event.state
        endpoint_id = getattr(event, "endpoint_id", None)
        if state is not None and isinstance(endpoint_id, str):
            recorder.note_state(event.at, endpoint_id, state)

    return observe


def _call_observer(recorder: CallRecorder, now: Callable[[], float]) -> Callable[[CallEnded], None]:
    """The call observer of one balancer: each ended permit into its endpoint's figures, at ``now()``."""

    def observe(ended: CallEnded) -> None:
        recorder.record(now(), ended)

    return observe


@attrs.define(eq=False)
class StatusApp:
    """An ASGI app: ``/`` a self-updating HTML page, ``/status.json`` the same data as JSON.

    Building the app subscribes an observer to each balancer to keep its last ``events``
    event lines, and a call observer for the per-endpoint figures (about 1.3 µs a call on
    top of the observer's own 2 µs, ``bench/status_page.py``); :meth:`close` unsubscribes
    both. Build it on the balancers' thread; it may be built before they start.
    It needs the extra ``poise_py[status]`` (hypercorn, which :func:`serve` runs it with):
    without it, building it raises ``ModuleNotFoundError`` saying so, in one line.

    Attributes:
        balancers: one ``LoadBalancer``, or a mapping of display name -> ``LoadBalancer``
            (shown in that order; a single balancer is named ``"balancer"``).
        events: how many event lines to keep per balancer, repeats of one kind about one
            endpoint coalesced into one line (default 20).
        title: the page's title.
        poll_interval: how often the page fetches ``/status.json``, in seconds (default 1,
            at least 0.1 and at most a day).
        allowed_hosts: the ``Host`` header values the app answers; any other gets 421.
            None (the default) answers ``127.0.0.1``, ``localhost``, ``[::1]`` and the
            address the request came in on, each with the port it came in on. Entries are
            ``"name"`` (any port), ``"name:port"``, ``"[ipv6]:port"``, or ``"*"`` (any
            host: only behind a proxy that checks the host itself).
        headline: a callable returning rows of ``(label, text)`` the application wants
            shown at the top of the page (and under ``"headline"`` in ``/status.json``),
            called on every fetch; or None. If it raises or returns something else, the
            page shows no headline and the problem is logged once.
    """

    balancers: dict[str, LoadBalancer] = attrs.field(converter=_balancers)
    events: int = attrs.field(default=DEFAULT_EVENTS, kw_only=True, converter=_events_kept)
    title: str = attrs.field(default="poise_py status", kw_only=True)
    poll_interval: float = attrs.field(default=1.0, kw_only=True, converter=_poll_interval)
    allowed_hosts: tuple[str, ...] | None = attrs.field(default=None, kw_only=True, converter=_allowed_hosts)
    headline: Callable[[], Sequence[tuple[str, str]]] | None = attrs.field(
        default=None, kw_only=True, converter=_headline
    )
    _headline_logged: bool = attrs.field(init=False, default=False)
    _recent: dict[str, EventLog] = attrs.field(init=False, factory=dict)
    _recorders: dict[str, CallRecorder] = attrs.field(init=False, factory=dict)
    _observers: dict[str, Callable[[BalancerEvent], None]] = attrs.field(init=False, factory=dict)
    _call_observers: dict[str, Callable[[CallEnded], None]] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.title, str):
            raise ConfigError("title", f"must be a string, got {self.title!r}")
        # Here, not only in serve(): serve() runs inside the caller's task group, whose
        # exception group would bury the one line under forty.
        require("poise_py.contrib.status", "status", ["hypercorn"])
        for name, lb in self.balancers.items():
            log = self._recent[name] = EventLog(self.events)
            recorder = self._recorders[name] = CallRecorder(self.poll_interval)
            self._observers[name] = _event_observer(log, recorder)
            self._call_observers[name] = _call_observer(recorder, lb._internals.now)
            lb.add_observer(self._observers[name])
            lb.add_call_observer(self._call_observers[name])

    def close(self) -> None:
        """Stop collecting events and call figures (idempotent); the page keeps showing snapshots."""
        for name, observer in self._observers.items():
            self.balancers[name].remove_observer(observer)
        for name, call_observer in self._call_observers.items():
            self.balancers[name].remove_call_observer(call_observer)
        self._observers.clear()
        self._call_observers.clear()

    def status(self) -> dict[str, Any]:
        """What ``/status.json`` serves: every balancer's pool, endpoints and recent events.

        ``generated_at`` and every event's ``at`` are Unix times (the wall clock), each with
        an ISO 8601 twin (``generated_at_iso``...); durations are seconds; ``taken_at`` is the
        balancer clock's own reading, for matching logs. The layout is docs/status.md's,
        version :data:`SCHEMA`.
        """
        out = []
        wall = time.time()
        for name, lb in self.balancers.items():
            snap = lb.snapshot()
            now = snap.taken_at
            recorder = self._recorders[name]
            recorder.observe(now)
            for e in snap.endpoints:
                recorder.note_state(now, e.id, e.state)
            recorder.forget(now, keep=[e.id for e in snap.endpoints])
            out.append(
                {
                    "name": name,
                    "running": lb.running,
                    "taken_at": _jsonable(now),
                    "taken_at_iso": _iso(wall),
                    "pool": _pool_json(lb.statistics()),
                    "last_minute": _window_json(recorder.total(now)),
                    "history_step": recorder.step,
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
                    "endpoints": [_endpoint_json(e, now, wall, recorder) for e in snap.endpoints],
                    "events": [_event_json(entry, now, wall) for entry in self._recent[name].newest_first()],
                }
            )
        return {
            "schema": SCHEMA,
            "title": self.title,
            "generated_at": round(wall, 3),
            "generated_at_iso": _iso(wall),
            "poll_interval": self.poll_interval,
            "headline": self._headline_json(),
            "balancers": out,
        }

    def _headline_json(self) -> list[dict[str, str]]:
        """The application's headline rows, or none if it has none or they cannot be read (logged once)."""
        if self.headline is None:
            return []
        try:
            return _headline_rows(self.headline())
        except Exception as exc:  # noqa: BLE001 - the application's callback must not break the page
            if not self._headline_logged:
                self._headline_logged = True
                _LOG.error(
                    "poise_py: the status page's headline callable failed; showing no headline",
                    exc_info=exc,
                )
            return []

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
        elif path == "/favicon.svg" and method in {"GET", "HEAD"}:
            await _respond(send, 200, "image/svg+xml", _FAVICON, method)
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
        columns = json.dumps([list(c) for c in COLUMNS]).replace("<", "\\u003c")
        script = (
            _SCRIPT.replace("__POLL_MS__", str(round(self.poll_interval * 1000)))
            .replace("__COLUMNS_JSON__", columns)
            .replace("__TITLE_JSON__", title)
        )
        policy = (
            f"default-src 'none'; script-src '{_sha256(script)}'; style-src '{_STYLE_HASH}'; "
            "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )
        page = _PAGE.replace("__STYLE__", _STYLE).replace("__LEGEND__", _LEGEND).replace("__SCRIPT__", script)
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
    if not isinstance(host, str) or not host.strip():
        every = "every interface: '0.0.0.0' or '::'"
        raise ConfigError("host", f"must be an address to listen on ({every}), got {host!r:.80}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        bound: int = sock.getsockname()[1]
        fd = sock.detach()  # hypercorn owns the bound socket from here and closes it
    config = Config()
    config.bind = [f"fd://{fd}"]
    config.errorlog = _LOG  # filtered: hypercorn's errors may quote a request
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
            await _listening(_LOOPBACK.get(host, host), bound)  # a wildcard listens on the loopback too
            task_status.started(bound)
            await anyio.sleep_forever()
        finally:
            stop.set()


_LOOPBACK = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104 - wildcards a caller may give, not ours


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


COLUMNS: tuple[tuple[str, str], ...] = (
    ("endpoint", "The endpoint's id, as discovery gave it."),
    (
        "address",
        "Where calls go: host:port or URL, as discovery gave it; credentials and secret query values read ***.",
    ),
    ("tier", "Its priority tier: 0 takes traffic first, later tiers when earlier ones are short of healthy endpoints."),
    ("zone", "Its zone (locality), or - without one."),
    (
        "state",
        (
            "Its circuit: closed (in use), open (ejected for a while), half-open (a few probes decide), "
            "blocked (a PERMANENT fault), retired (hit the hard cap on ejections)."
        ),
    ),
    (
        "status",
        (
            "In rotation, or why not: the operator's status, active health, or 'out:' and the reason it "
            "cannot take a permit now (see below)."
        ),
    ),
    ("success", "Successes over successes and faults in the last minute (cancellations are neither)."),
    ("calls/s", "Calls that ended per second over the last minute."),
    ("p50", "Median latency of the last minute's calls with an outcome (within 4.4 %)."),
    ("p99", "99th percentile latency of the last minute's calls with an outcome (within 4.4 %)."),
    (
        "last 5 min",
        (
            "Top line: calls/s; middle line: p99 latency (each scaled to its own maximum); "
            "bottom strip: the worst circuit state of each step (green closed, amber half-open, red open)."
        ),
    ),
    ("in-flight", "Permits issued and not yet ended, against the lower of its limit and cap when it has one."),
    (
        "epoch",
        (
            "Its circuit's epoch: a number that moves with every circuit move. A result is counted only in "
            "the epoch its permit was issued in; a late one is dropped (see stale)."
        ),
    ),
    ("weight", "The weight every policy gives it now: '1.6 of 4' while it ramps up in slow start."),
    ("slow start", "How far through its slow-start ramp it is, or - when it is not ramping."),
    ("limit", "The concurrency limit adaptive concurrency has learned for it, or - without one."),
    ("cap", "Its fixed concurrency cap (metadata max_in_flight), or - without one."),
    (
        "load",
        (
            "What its backend last reported about its own load (ORCA): utilization, and w, the weight "
            "WeightedByLoad makes of it (qps / (utilization + eps/qps)); - without a report."
        ),
    ),
    (
        "quota",
        (
            "What its provider's rate-limit headers said is left: requests left (at most that many calls "
            "are in flight to it), or 'spent' and the seconds until it resets; - when no answer said."
        ),
    ),
    (
        "escalation",
        (
            "Ejections in the current episode: each one makes the next open window longer; it decays "
            "while the circuit stays closed."
        ),
    ),
    ("window left", "Seconds until an open circuit half-opens and lets probes through."),
    ("issued", "Permits issued since it joined (counters saturate, never wrap)."),
    ("successes", "Calls reported as successes since it joined."),
    ("faults", "Calls reported as faults since it joined; hover for the count per fault tier."),
    ("ejections", "Times its circuit opened with escalation."),
    ("probes", "Half-open trial calls it was given."),
    (
        "stale",
        (
            "Results dropped because their circuit epoch had passed (a late answer from before the last "
            "circuit move) or the endpoint had left."
        ),
    ),
)
"""The endpoint table's columns and what each means: the header's tooltips and the page's legend."""

OUT_REASONS: dict[IneligibleReason, str] = {
    IneligibleReason.OPEN: "its circuit is open and its cool-down has not ended",
    IneligibleReason.PROBES_TAKEN: "its circuit is half-open and every probe slot is taken by a trial call",
    IneligibleReason.PERMANENT: "a PERMANENT fault blocked it until discovery or an operator changes it",
    IneligibleReason.RETIRED: "it hit the hard cap on ejections and waits for discovery to re-emit it",
    IneligibleReason.UNHEALTHY: "active health checks, or an operator, classify it unhealthy",
    IneligibleReason.UNCLASSIFIED: "active health has not classified it yet (admit_unknown=False)",
    IneligibleReason.DRAINING: "an operator set it draining: in-flight calls finish, no new ones",
    IneligibleReason.DISABLED: "an operator disabled it",
    IneligibleReason.QUARANTINED: "its readiness check failed and it is cooling down",
    IneligibleReason.NOT_READY: "it has just joined and its first readiness check has not passed yet",
    IneligibleReason.QUOTA: "its provider said its quota is spent: it rests, with no strike, until the quota resets",
    IneligibleReason.EXCLUDED: "the caller excluded it (usually as already tried)",
    IneligibleReason.SCOPE: "eligible, but routing keeps it out of the selected tier or zone",
    IneligibleReason.PANIC: "eligible, but its tier is panicking under PanicMode.FAIL_CLOSED",
}
"""What each ``out:`` reason in the status column means (the legend)."""


def _legend() -> str:
    """The page's legend: every column, every ``out:`` reason, the events' counts (static HTML)."""
    columns = "".join(f"<dt>{html.escape(name)}</dt><dd>{html.escape(text)}</dd>" for name, text in COLUMNS)
    reasons = "".join(
        f"<dt>out: {html.escape(r.value)}</dt><dd>{html.escape(text)}</dd>" for r, text in OUT_REASONS.items()
    )
    return (
        '<details class="legend"><summary>What the columns mean</summary>'
        f"<dl>{columns}</dl><h3>Why an endpoint is out of rotation</h3><dl>{reasons}</dl>"
        "<h3>Events</h3><p>Repeats of one kind of event about one endpoint (a degradation starting and "
        "ending, a circuit opening and closing) are one line: &times;N is how many, with when the first "
        "and the last happened; hover over a line for its exact time. Filter them by text or kind.</p>"
        "</details>"
    )


_STYLE = """
 body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fafafa; }
 h1 { font-size: 1.3em; margin: 0 0 .2em; } h2 { font-size: 1.1em; margin: 1.4em 0 .4em; }
 h1, h2, .meta, li, dd, dt { overflow-wrap: anywhere; } h3 { font-size: 1em; margin: .8em 0 .3em; }
 .meta { color: #666; font-size: .9em; }
 table { border-collapse: collapse; background: #fff; margin-bottom: .6em; font-size: .92em; }
 .scroll { overflow-x: auto; max-width: 100%; }
 th, td { padding: .25em .45em; border-bottom: 1px solid #e4e4e4; text-align: right; white-space: nowrap; }
 th { background: #f0f0f0; font-weight: 600; cursor: help; } td.l, th.l { text-align: left; }
 tbody td.id { position: sticky; left: 0; background: #fff; } thead th:first-child { position: sticky; left: 0; }
 td.address { white-space: normal; overflow-wrap: anywhere; min-width: 9em; max-width: 20em; text-align: left; }
 .st { font-weight: 600; border-radius: 3px; padding: .05em .45em; }
 .closed { background: #d7f5dc; color: #145c24; } .open { background: #fbd5d5; color: #8a1111; }
 .half_open { background: #fff1c2; color: #765600; } .blocked { background: #ecd7f7; color: #5d1780; }
 .retired { background: #e2e2e2; color: #555; }
 .warn { color: #8a1111; } .ok { color: #145c24; }
 ul.events { list-style: none; padding: 0; margin: 0; font-size: .9em; }
 ul.events li { padding: .1em 0; } ul.events .t { color: #666; display: inline-block; min-width: 5em; }
 ul.events .n { background: #eee; border-radius: 3px; padding: 0 .35em; margin-left: .3em; }
 #error { color: #8a1111; }
 #headline, .figs { margin: .6em 0; display: flex; flex-wrap: wrap; gap: .4em .8em; }
 .hl, .fig { background: #fff; border: 1px solid #ddd; border-radius: 4px; padding: .3em .7em; max-width: 100%;
   box-sizing: border-box; }
 .hlabel { color: #666; margin-right: .5em; } .htext { font-weight: 600; overflow-wrap: anywhere; }
 .fv { font-size: 1.2em; font-weight: 600; } .fl { color: #666; font-size: .85em; }
 .filters { margin: .8em 0; display: flex; flex-wrap: wrap; gap: .4em; align-items: center; }
 .filters input, .filters select { font: inherit; max-width: 100%; box-sizing: border-box; }
 .legend { margin: .6em 0; font-size: .9em; max-width: 60em; } .legend summary { cursor: pointer; }
 .legend dl { display: grid; grid-template-columns: minmax(6em, max-content) 1fr; gap: .15em .8em; margin: .3em 0; }
 .legend dt { font-weight: 600; } .legend dd { margin: 0; }
 svg.spark { display: block; } .spark path { fill: none; stroke-width: 1.3; }
 .spark .rate { stroke: #1f6fb5; } .spark .p99 { stroke: #d2691e; }
 .spark .s-closed { fill: #3ba55c; } .spark .s-half_open { fill: #e0a800; } .spark .s-open { fill: #d33; }
 .spark .s-blocked { fill: #8e44ad; } .spark .s-retired { fill: #999; }
 @media (max-width: 600px) { body { margin: .6em; } .legend dl { grid-template-columns: 1fr; } }
"""

_STYLE_HASH = _sha256(_STYLE)

_SCRIPT = """
"use strict";
const TITLE = __TITLE_JSON__;
const POLL_MS = __POLL_MS__;
const COLUMNS = __COLUMNS_JSON__;
const SVG_NS = "http://www.w3.org/2000/svg";
document.title = TITLE;
document.getElementById("title").textContent = TITLE;
let latest = null;
const scrolled = {};

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}
function none(v) { return v === null || v === undefined; }
function secs(v) { return none(v) ? "-" : v.toFixed(1) + " s"; }
function ago(v) {
  if (none(v)) return "-";
  if (v < 60) return v.toFixed(1) + " s";
  return v < 3600 ? (v / 60).toFixed(1) + " min" : (v / 3600).toFixed(1) + " h";
}
function pct(v) { return none(v) ? "-" : (Math.floor(v * 1000) / 10).toFixed(1) + "%"; }
function ms(v) {
  if (none(v)) return "-";
  if (v < 0.001) return Math.round(v * 1e6) + " \\u00b5s";
  return v < 1 ? (v * 1000).toPrecision(3) + " ms" : v.toFixed(2) + " s";
}
function perSec(v) { return none(v) ? "-" : (v >= 100 ? Math.round(v) : v.toFixed(1)) + "/s"; }
function sum(map) { return Object.values(map || {}).reduce((a, b) => a + b, 0); }
function faults(map) {
  const parts = Object.entries(map || {}).filter(([, n]) => n > 0).map(([k, n]) => k + " " + n);
  return parts.length ? parts.join(", ") : "0";
}
function address(a) {
  if (none(a)) return "-";
  if (Array.isArray(a) && a.length === 2 && typeof a[1] === "number") {
    const host = String(a[0]);
    return (host.includes(":") && !host.startsWith("[") ? "[" + host + "]" : host) + ":" + a[1];
  }
  if (Array.isArray(a)) return a.map(String).join(" ");
  return typeof a === "object" ? JSON.stringify(a) : String(a);
}
function status(ep) {
  const parts = [];
  if (ep.degraded === true) parts.push("degraded");
  if (ep.admin !== "auto") parts.push(ep.admin);
  if (ep.health) parts.push("health " + ep.health.status);
  if (ep.ineligible && ep.ineligible !== ep.admin) parts.push("out: " + ep.ineligible);
  return parts.length ? parts.join(", ") : "in rotation";
}
function count(v) { return none(v) ? "-" : v; }
function weight(ep) {
  const w = ep.effective_weight;
  if (none(w) || w === ep.weight) return ep.weight;
  return (Math.round(w * 100) / 100) + " of " + ep.weight;
}
function ramp(ep) { return none(ep.ramp_progress) ? "-" : Math.floor(ep.ramp_progress * 100) + "%"; }
function inflight(ep) { return none(ep.inflight_cap) ? String(ep.inflight) : ep.inflight + " / " + ep.inflight_cap; }

function spark(h) {
  const W = 120, H = 34, n = h.rate.length, dx = W / Math.max(n, 1);
  const node = svg("svg", {"class": "spark", "width": W, "height": H, "viewBox": "0 0 " + W + " " + H});
  const peak = values => Math.max(0, ...values.filter(v => !none(v)));
  function line(values, top, height, cls) {
    const max = peak(values);
    if (max <= 0) return;
    let d = "", pen = false;
    values.forEach((v, i) => {
      if (none(v)) { pen = false; return; }
      const x = (i + 0.5) * dx, y = top + height - (v / max) * height;
      d += (pen ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
      pen = true;
    });
    node.append(svg("path", {"d": d, "class": cls}));
  }
  line(h.rate, 1, 13, "rate");
  line(h.p99, 16, 11, "p99");
  h.state.forEach((s, i) => {
    if (s) node.append(svg("rect", {"x": (i * dx).toFixed(2), "y": H - 4, "width": (dx + 0.3).toFixed(2),
      "height": 4, "class": "s-" + s}));
  });
  node.prepend(svg("title", {}, "last 5 min: up to " + perSec(peak(h.rate)) + ", p99 up to " +
    ms(h.p99.some(v => !none(v)) ? peak(h.p99) : null) + "; strip: circuit state"));
  return node;
}

function load(l) {
  if (none(l)) return "-";
  const parts = [pct(l.utilization)];
  if (!none(l.weight)) parts.push("w " + (l.weight >= 100 ? l.weight.toFixed(0) : l.weight.toPrecision(3)));
  const text = el("span", {}, parts.join(" \u00b7 "));
  text.title = "reported " + secs(l.reported_ago) + " ago: " + perSec(l.qps) + ", errors " + perSec(l.eps);
  return text;
}

function quota(q) {
  if (none(q)) return "-";
  if (q.remaining > 0 || none(q.resets_in)) return String(q.remaining) + " left";
  return "spent, " + secs(q.resets_in);
}

function endpointRow(ep) {
  const c = ep.counters, m = ep.last_minute;
  const cells = {
    "endpoint": ["l id", ep.id],
    "address": ["address", address(ep.address)],
    "tier": ["tier", ep.tier],
    "zone": ["l zone", none(ep.zone) ? "-" : ep.zone],
    "state": ["l state", el("span", {"class": "st " + ep.state}, ep.state.replace("_", "-"))],
    "status": ["l status " + (ep.ineligible ? "warn" : "ok"), status(ep)],
    "success": ["success", pct(m.success_rate)],
    "calls/s": ["rate", perSec(m.rate)],
    "p50": ["p50", ms(m.p50)],
    "p99": ["p99", ms(m.p99)],
    "last 5 min": ["history", spark(ep.history)],
    "in-flight": ["inflight", inflight(ep)],
    "epoch": ["epoch", ep.epoch],
    "weight": ["weight", weight(ep)],
    "slow start": ["ramp", ramp(ep)],
    "limit": ["limit", count(ep.concurrency_limit)],
    "cap": ["cap", count(ep.max_in_flight)],
    "load": ["load", load(ep.load)],
    "quota": ["quota", quota(ep.quota)],
    "escalation": ["escalation", ep.escalation_level],
    "window left": ["window", secs(ep.window_left)],
    "issued": ["issued", c.issued],
    "successes": ["successes", c.successes],
    "faults": ["faults", sum(c.faults)],
    "ejections": ["ejections", c.ejections],
    "probes": ["probes", c.probes],
    "stale": ["stale", c.stale],
  };
  return el("tr", {"data-endpoint": ep.id}, ...COLUMNS.map(([name]) => {
    const [cls, value] = cells[name];
    const attrs = {"class": cls};
    if (name === "faults") attrs.title = faults(c.faults);
    if (name === "address" || name === "endpoint") attrs.title = value;
    return el("td", attrs, value);
  }));
}

function figures(b) {
  const m = b.last_minute, p = b.pool;
  const fig = (cls, value, label, help) => el("div", {"class": "fig " + cls, "title": help},
    el("div", {"class": "fv"}, value), el("div", {"class": "fl"}, label));
  return el("div", {"class": "figs"},
    fig("success", pct(m.success_rate), "success, last min", "Successes over successes and faults, last minute"),
    fig("rate", perSec(m.rate), "calls, last min", "Calls that ended per second, last minute"),
    fig("p99", ms(m.p99), "p99 latency", "99th percentile latency of the last minute's calls, every endpoint"),
    fig("p50", ms(m.p50), "p50 latency", "Median latency of the last minute's calls, every endpoint"),
    fig("available", p.available + " / " + p.size, "available", "Endpoints that can take a permit now, of all"),
    fig("ejected", p.ejected, "ejected", "Endpoints whose circuit is open (or blocked, or retired)"),
    fig("inflight", p.inflight, "in flight", "Permits issued and not yet ended, every endpoint"));
}

function eventShown(ev, text, kind) {
  if (kind && !(kind in ev.types)) return false;
  if (!text) return true;
  const words = [ev.type, ...Object.keys(ev.types), ev.endpoint || "", JSON.stringify(ev.fields)];
  return words.join(" ").toLowerCase().includes(text);
}
function eventLine(ev) {
  const detail = Object.entries(ev.fields).filter(([, v]) => v !== null && v !== "" &&
    !(Array.isArray(v) && v.length === 0)).map(([k, v]) => k.endsWith("_in") && typeof v === "number" ?
    k.slice(0, -3) + " " + (v >= 0 ? "in " + secs(v) : secs(-v) + " ago") :
    k + "=" + (typeof v === "object" ? JSON.stringify(v) : v)).join(" ");
  const kinds = Object.entries(ev.types).map(([k, n]) => k + " " + n).join(", ");
  const repeat = ev.count > 1 ? [el("span", {"class": "n", "title": kinds}, "\\u00d7" + ev.count),
    " first " + ago(ev.first_ago) + " ago"] : [];
  return el("li", {"title": ev.count > 1 ? ev.first_at_iso + " to " + ev.at_iso : ev.at_iso},
    el("span", {"class": "t"}, ago(ev.ago) + " ago"), " ", el("b", {}, ev.type),
    ev.endpoint ? " " + ev.endpoint : "", ...repeat, detail ? "  " + detail : "");
}

function balancerSection(b, text, kind) {
  const p = b.pool;
  const head = el("tr", {}, ...COLUMNS.map(([name, help]) => el("th", {"title": help, "class":
    ["endpoint", "zone", "state", "status", "address"].includes(name) ? "l" : ""}, name)));
  const body = el("tbody", {}, ...b.endpoints.map(endpointRow));
  const shown = b.events.filter(ev => eventShown(ev, text, kind));
  const events = el("ul", {"class": "events"}, ...shown.map(eventLine));
  if (!b.events.length) events.append(el("li", {}, "no events yet"));
  else if (!shown.length) events.append(el("li", {}, "no event matches the filter"));
  return el("section", {"data-balancer": b.name},
    el("h2", {}, b.name + (b.running ? "" : " (not running)")),
    figures(b),
    el("div", {"class": "meta"}, p.size + " endpoints, " + p.available + " available, " + p.ejected +
      " ejected, " + p.inflight + " in flight; " + p.successes + " successes, " + sum(p.faults) +
      " faults, " + p.failed_selections + " failed selections"),
    ...(b.tiers.length > 1 ? [el("div", {"class": "meta tiers"}, b.tiers.map(t => "tier " + t.tier + ": " +
      Math.round(t.share * 100) + "% of traffic, " + t.healthy + "/" + t.endpoints + " healthy" +
      (t.panicking ? " (panic)" : "")).join("; "))] : []),
    el("div", {"class": "scroll"}, el("table", {}, el("thead", {}, head), body)),
    el("div", {"class": "meta"}, "last events, newest first"), events);
}

function kinds(data) {
  const select = document.getElementById("kind");
  const seen = new Set([...select.options].map(o => o.value).filter(v => v));
  const all = new Set(data.balancers.flatMap(b => b.events.flatMap(ev => Object.keys(ev.types))));
  for (const k of [...all].sort()) if (!seen.has(k)) select.append(el("option", {"value": k}, k));
}

function render() {
  const data = latest;
  if (!data) return;
  const text = document.getElementById("filter").value.trim().toLowerCase();
  const kind = document.getElementById("kind").value;
  const rows = (data.headline || []).map(h => el("div", {"class": "hl"}, el("span", {"class": "hlabel"}, h.label),
    el("span", {"class": "htext"}, h.text)));
  document.getElementById("headline").replaceChildren(...rows);
  const box = document.getElementById("balancers");
  for (const s of box.querySelectorAll("section[data-balancer]")) {
    scrolled[s.getAttribute("data-balancer")] = s.querySelector(".scroll").scrollLeft;
  }
  box.replaceChildren(...data.balancers.map(b => balancerSection(b, text, kind)));
  for (const s of box.querySelectorAll("section[data-balancer]")) {
    s.querySelector(".scroll").scrollLeft = scrolled[s.getAttribute("data-balancer")] || 0;
  }
  kinds(data);
}

async function poll() {
  try {
    const response = await fetch("status.json", {cache: "no-store"});
    if (!response.ok) throw new Error("HTTP " + response.status);
    latest = await response.json();
    render();
    document.getElementById("updated").textContent = new Date().toLocaleTimeString();
    document.getElementById("error").textContent = "";
  } catch (err) {
    document.getElementById("error").textContent = "(cannot reach the balancer: " + err.message + ")";
  } finally {
    setTimeout(poll, POLL_MS);
  }
}
document.getElementById("filter").addEventListener("input", render);
document.getElementById("kind").addEventListener("change", render);
poll();
"""
"""The page's one script; ``__POLL_MS__``, ``__TITLE_JSON__`` and ``__COLUMNS_JSON__`` are filled in per app."""

_FAVICON = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    b'<rect width="16" height="16" rx="3" fill="#1f6fb5"/>'
    b'<path d="M2 11 L5 7 L8 9 L11 4 L14 6" fill="none" stroke="#fff" stroke-width="1.8"/>'
    b'<rect x="2" y="13" width="12" height="1.5" fill="#3ba55c"/></svg>'
)
"""The page's icon: a small chart, served by the app itself as ``/favicon.svg``."""

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>poise_py status</title>
<link rel="icon" type="image/svg+xml" href="favicon.svg">
<style>__STYLE__</style>
</head>
<body>
<h1 id="title"></h1>
<div class="meta">updated <span id="updated">never</span> <span id="error"></span></div>
<div id="headline"></div>
__LEGEND__
<div class="filters"><label for="filter">Filter events:</label>
<input id="filter" type="search" placeholder="filter by text"
 title="Show events whose type, endpoint or fields contain this text">
<select id="kind" title="Show one kind of event"><option value="">every kind</option></select></div>
<div id="balancers"></div>
<script>__SCRIPT__</script>
</body>
</html>
"""

_LEGEND = _legend()
