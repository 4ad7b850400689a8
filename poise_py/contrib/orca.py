"""The server side of ORCA load reports: tell the balancers in front of you how loaded you are.

::

    from poise_py.contrib.orca import OrcaMiddleware, ServerMetrics, call_metrics

    metrics = ServerMetrics()                      # CPU, qps and eps measured by default
    app = OrcaMiddleware(app, metrics=metrics)     # any ASGI app (Starlette, FastAPI, Quart...)
    metrics.set_named_metric("queue", len(queue))  # values the application knows better

    async def handler(request):
        call_metrics().set_request_cost("tokens", 1234)   # this answer's own report
        ...

Every HTTP response then carries ``endpoint-load-metrics: TEXT cpu_utilization=0.31,
rps_fractional=12.5, ...`` (``form="JSON"`` or ``"BIN"`` for the other forms), which
poise_py's clients, gRPC's weighted round robin and Envoy's client-side weighted round robin
read. For grpc.aio servers, :class:`poise_py.contrib.orca_grpc.OrcaInterceptor` attaches the
same report to each call's trailing metadata (``endpoint-load-metrics-bin``).

What a report holds, as gRPC's ``ServerMetricsRecorder`` and ``CallMetricsRecorder`` do it:

- :class:`ServerMetrics`, the process's recorder: values the application sets (each setter
  takes None to go back to the default), else the defaults: ``cpu_utilization`` is this
  process's own CPU time over the last ``window`` seconds of wall time, divided by
  ``os.cpu_count()`` (``time.process_time()`` deltas, no psutil), and ``qps`` / ``eps`` are
  the requests the middleware or interceptor answered over the window (errors: HTTP 5xx, or a
  gRPC status other than OK);
- :func:`call_metrics`, the one request's recorder (a context variable the middleware and
  interceptor set per request), whose values win over the server's.

No extra is needed for the ASGI middleware; the interceptor needs ``poise_py[grpc]``.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import attrs

from .. import ConfigError, LoadReport, LoadReportError
from .._internal import check_duration

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

FORMS = ("TEXT", "JSON", "BIN")
"""The forms of the ``endpoint-load-metrics`` header the middleware can send."""
HEADER = b"endpoint-load-metrics"
BUCKETS = 10
"""How many buckets the request counts of one window are kept in."""
_SCALARS = ("cpu_utilization", "mem_utilization", "application_utilization", "qps", "eps")


def _checked_scalar(field: str, value: float) -> float:
    """``value`` checked as :class:`~poise_py.LoadReport` checks its field (ConfigError naming it)."""
    fields: dict[str, Any] = {field: value}
    checked: float = getattr(LoadReport(**fields), field)
    return checked


def _put(field: str, metrics: dict[str, float], name: str, value: float | None) -> None:
    """Set (or, with None, remove) one entry of a map, checked as a report's map is."""
    if value is None:
        metrics.pop(name, None)
        return
    fields: dict[str, Any] = {field: {**metrics, name: value}}
    metrics[name] = getattr(LoadReport(**fields), field)[name]


@attrs.define(eq=False)
class CallMetrics:
    """One request's own load values (gRPC's ``CallMetricsRecorder``); get it from :func:`call_metrics`.

    Values set here win over the server's for the report sent with this request's answer:
    set them before the response starts (HTTP) or before the handler returns (gRPC). A bad
    value raises :class:`~poise_py.ConfigError` naming the field.
    """

    _scalars: dict[str, float] = attrs.field(init=False, factory=dict, repr=False)
    _maps: dict[str, dict[str, float]] = attrs.field(
        init=False, factory=lambda: {"utilization": {}, "request_cost": {}, "named_metrics": {}}, repr=False
    )

    def set_cpu_utilization(self, value: float) -> None:
        """Report this CPU utilization (a fraction of the CPU the backend has) with this answer."""
        self._scalars["cpu_utilization"] = _checked_scalar("cpu_utilization", value)

    def set_mem_utilization(self, value: float) -> None:
        """Report this memory utilization (a fraction) with this answer."""
        self._scalars["mem_utilization"] = _checked_scalar("mem_utilization", value)

    def set_application_utilization(self, value: float) -> None:
        """Report this application utilization with this answer."""
        self._scalars["application_utilization"] = _checked_scalar("application_utilization", value)

    def set_qps(self, value: float) -> None:
        """Report this many queries per second with this answer."""
        self._scalars["qps"] = _checked_scalar("qps", value)

    def set_eps(self, value: float) -> None:
        """Report this many errors per second with this answer."""
        self._scalars["eps"] = _checked_scalar("eps", value)

    def set_utilization(self, name: str, value: float) -> None:
        """Report a named resource's utilization (a fraction) with this answer."""
        _put("utilization", self._maps["utilization"], name, value)

    def set_request_cost(self, name: str, value: float) -> None:
        """Report what this request cost (``"tokens"``, ``"db_rows"``...), in the application's units."""
        _put("request_cost", self._maps["request_cost"], name, value)

    def set_named_metric(self, name: str, value: float) -> None:
        """Report any other application metric with this answer."""
        _put("named_metrics", self._maps["named_metrics"], name, value)


_CALL: contextvars.ContextVar[CallMetrics] = contextvars.ContextVar("poise_py_orca_call")


def call_metrics() -> CallMetrics:
    """The recorder of the request being served (set by the middleware or the interceptor).

    Raises:
        LookupError: called outside a request served through :class:`OrcaMiddleware` or
            :class:`~poise_py.contrib.orca_grpc.OrcaInterceptor`.
    """
    try:
        return _CALL.get()
    except LookupError:
        raise LookupError(
            "call_metrics() is only available while OrcaMiddleware or OrcaInterceptor serves a request"
        ) from None


@contextmanager
def recording() -> Iterator[CallMetrics]:
    """Serve one request: :func:`call_metrics` gives the recorder this yields until the block ends.

    The middleware and the interceptor use it; another server integration may too.
    """
    call = CallMetrics()
    token = _CALL.set(call)
    try:
        yield call
    finally:
        # An async generator handler may finish in another context than it began in (its
        # task's context is gone): then there is nothing left to restore.
        with contextlib.suppress(ValueError):
            _CALL.reset(token)


def _window(value: float) -> float:
    return check_duration("window", value)


@attrs.define(eq=False)
class ServerMetrics:
    """The process's load values (gRPC's ``ServerMetricsRecorder``), sent with every answer.

    Setters take a value, or None to go back to the default (measured CPU, counted qps and
    eps; nothing for the others). A bad value raises :class:`~poise_py.ConfigError` naming
    the field. Meant for the one event loop the server runs on.

    Attributes:
        window: seconds of recent history the measured CPU and the counted rates cover
            (default 10).
        clock: the wall clock the window is measured on (default ``time.monotonic``).
        cpu_time: this process's CPU seconds so far (default ``time.process_time``).
        cpu_count: the CPUs the process may use (default ``os.cpu_count()``, at least 1).
    """

    window: float = attrs.field(default=10.0, kw_only=True, converter=_window)
    clock: Callable[[], float] = attrs.field(default=time.monotonic, kw_only=True)
    cpu_time: Callable[[], float] = attrs.field(default=time.process_time, kw_only=True)
    cpu_count: int = attrs.field(factory=lambda: os.cpu_count() or 1, kw_only=True)
    _scalars: dict[str, float] = attrs.field(init=False, factory=dict, repr=False)
    _maps: dict[str, dict[str, float]] = attrs.field(
        init=False, factory=lambda: {"utilization": {}, "named_metrics": {}}, repr=False
    )
    _samples: deque[tuple[float, float]] = attrs.field(init=False, factory=deque, repr=False)
    _buckets: deque[list[int]] = attrs.field(init=False, factory=deque, repr=False)
    _started: float = attrs.field(init=False, default=0.0, repr=False)

    def __attrs_post_init__(self) -> None:
        if not callable(self.clock):
            raise ConfigError("clock", f"must be a function returning seconds, got {self.clock!r:.80}")
        if not callable(self.cpu_time):
            raise ConfigError("cpu_time", f"must be a function returning CPU seconds, got {self.cpu_time!r:.80}")
        if not isinstance(self.cpu_count, int) or isinstance(self.cpu_count, bool) or self.cpu_count < 1:
            raise ConfigError("cpu_count", f"must be an int >= 1, got {self.cpu_count!r:.80}")
        self._started = self.clock()
        self._samples.append((self._started, self.cpu_time()))

    def _set(self, field: str, value: float | None) -> None:
        if value is None:
            self._scalars.pop(field, None)
        else:
            self._scalars[field] = _checked_scalar(field, value)

    def set_cpu_utilization(self, value: float | None) -> None:
        """Report this CPU utilization instead of the measured one (None: measure again)."""
        self._set("cpu_utilization", value)

    def set_mem_utilization(self, value: float | None) -> None:
        """Report this memory utilization, a fraction (None: report none)."""
        self._set("mem_utilization", value)

    def set_application_utilization(self, value: float | None) -> None:
        """Report this application utilization (None: report none); gRPC's WRR prefers it to CPU."""
        self._set("application_utilization", value)

    def set_qps(self, value: float | None) -> None:
        """Report this many queries per second instead of the counted rate (None: count again)."""
        self._set("qps", value)

    def set_eps(self, value: float | None) -> None:
        """Report this many errors per second instead of the counted rate (None: count again)."""
        self._set("eps", value)

    def set_utilization(self, name: str, value: float | None) -> None:
        """Report a named resource's utilization, a fraction (None: stop reporting it)."""
        _put("utilization", self._maps["utilization"], name, value)

    def set_named_metric(self, name: str, value: float | None) -> None:
        """Report an application metric under ``name`` (None: stop reporting it)."""
        _put("named_metrics", self._maps["named_metrics"], name, value)

    def count(self, *, error: bool = False) -> None:
        """Count one answered request (``error``: a 5xx or a non-OK gRPC status) at the clock's time."""
        width = self.window / BUCKETS
        index = math.floor(self.clock() / width)
        buckets = self._buckets
        if buckets and buckets[-1][0] == index:
            bucket = buckets[-1]
            bucket[1] += 1
            bucket[2] += error
        else:
            buckets.append([index, 1, int(error)])
            while len(buckets) > BUCKETS:
                buckets.popleft()

    def rates(self) -> tuple[float, float]:
        """(queries, errors) per second counted over the last window (or since the start, if shorter)."""
        now = self.clock()
        width = self.window / BUCKETS
        first = math.floor(now / width) - BUCKETS + 1
        requests = errors = 0
        for index, n, failed in self._buckets:
            if index >= first:
                requests += n
                errors += failed
        span = max(min(self.window, now - self._started), width)
        return requests / span, errors / span

    def measured_cpu_utilization(self) -> float:
        """This process's CPU time over about the last window of wall time, per CPU it may use.

        1.0 means every CPU busy for the whole window; 0 when no wall time has passed yet.
        """
        now, cpu = self.clock(), self.cpu_time()
        samples = self._samples
        if now - samples[-1][0] >= self.window / BUCKETS:
            samples.append((now, cpu))
        while len(samples) > 1 and now - samples[1][0] >= self.window:
            samples.popleft()
        since, cpu_then = samples[0]
        elapsed = now - since
        if elapsed <= 0:
            return 0.0
        return max(0.0, (cpu - cpu_then) / elapsed / self.cpu_count)

    def report(self, call: CallMetrics | None = None) -> LoadReport:
        """The report to send now: the defaults, then the values set here, then ``call``'s."""
        scalars: dict[str, Any] = dict(self._scalars)
        if "cpu_utilization" not in scalars:
            scalars["cpu_utilization"] = self.measured_cpu_utilization()
        if "qps" not in scalars or "eps" not in scalars:
            qps, eps = self.rates()
            scalars.setdefault("qps", qps)
            scalars.setdefault("eps", eps)
        maps: dict[str, Any] = dict(self._maps)
        if call is not None:
            scalars.update(call._scalars)
            for name, values in call._maps.items():
                if values:
                    maps[name] = {**maps.get(name, {}), **values}
        try:
            return LoadReport(**scalars, **maps)
        except ConfigError:
            # The call's entries pushed a map past its bound: its own values still count.
            own: dict[str, Any] = call._maps if call is not None else {}
            return LoadReport(**scalars, **own)


def _form(value: str) -> str:
    if value not in FORMS:
        raise ConfigError("form", f"must be one of {', '.join(FORMS)}, got {value!r:.80}")
    return value


def _server_metrics(value: ServerMetrics | None) -> ServerMetrics:
    """``value``, or a new :class:`ServerMetrics` for None (ConfigError for anything else)."""
    if value is None:
        return ServerMetrics()
    if not isinstance(value, ServerMetrics):
        raise ConfigError("metrics", f"must be a ServerMetrics or None, got {type(value).__name__}")
    return value


@attrs.define(eq=False)
class OrcaMiddleware:
    """ASGI middleware: every HTTP response carries the ``endpoint-load-metrics`` header.

    Lifespan and websocket traffic pass through untouched. A response whose application
    already set the header keeps its own. Each response is counted for the default qps and
    eps (a 5xx, or an exception before the response started, is an error).

    Attributes:
        app: the ASGI application to wrap.
        metrics: the recorder to report from (default a new :class:`ServerMetrics`).
        form: the header's form, ``"TEXT"`` (default), ``"JSON"`` or ``"BIN"``. A TEXT report
            with a metric name TEXT cannot carry is sent as JSON.
    """

    app: ASGIApp
    metrics: ServerMetrics = attrs.field(default=None, converter=_server_metrics)
    form: str = attrs.field(default="TEXT", converter=_form)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection."""
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        started = False
        with recording() as call:

            async def send_with_report(message: MutableMapping[str, Any]) -> None:
                nonlocal started
                if message.get("type") == "http.response.start" and not started:
                    started = True
                    message = self._with_report(message, call)
                await send(message)

            try:
                await self.app(scope, receive, send_with_report)
            except BaseException:
                if not started:
                    self.metrics.count(error=True)
                raise

    def _with_report(self, message: MutableMapping[str, Any], call: CallMetrics) -> MutableMapping[str, Any]:
        status = message.get("status", 200)
        self.metrics.count(error=not isinstance(status, int) or status >= 500)
        headers = list(message.get("headers", ()))
        if any(bytes(name).lower() == HEADER for name, _ in headers):
            return message
        report = self.metrics.report(call)
        try:
            value = report.to_header(self.form)
        except LoadReportError:
            value = report.to_json()
        headers.append((HEADER, value.encode("latin-1")))
        return {**message, "headers": headers}
