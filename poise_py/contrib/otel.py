"""OpenTelemetry metrics for a balancer, by the semantic conventions (extra ``poise_py[otel]``).

::

    from poise_py.contrib.otel import instrument

    metrics = instrument(lb)  # uses the global MeterProvider, or pass meter_provider=
    ...
    metrics.close()  # stop reporting (instruments cannot be unregistered in OpenTelemetry)

Every call is one measurement of the ``poise.call.duration`` histogram (seconds) and
one of the ``poise.calls`` counter, both with the call's outcome (``success``, the fault
tier, ``cancelled``, or ``superseded``: a hedge's loser) and its endpoint (``poise.endpoint.id``, ``server.address``,
``server.port``): the balancer hands each ended permit to a call observer
(``lb.add_call_observer``). In-flight calls and pool sizes are observable
UpDownCounters, each endpoint's circuit state an observable gauge (1 for the state it is
in, 0 for the others), and its load control (docs/overload.md) three more: its effective
weight (its weight times its slow-start ramp factor and quota share), its adaptive concurrency limit and
its fixed cap (each reported only for an endpoint that has one); the remaining counters
are observable sums read from the balancer's saturating counters. Callbacks read through
the public ``lb.statistics()`` and ``lb.snapshot()``, which are pure reads, so a reader
thread (the Prometheus exporter's) may collect while the event loop runs. Events
(``lb.events()``: slow start, limit changes, ejections) are not exported here. Attributes stay bounded: one
``poise.endpoint.id`` per live endpoint, enum values elsewhere. Nothing here touches the
balancer's private state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs

from .._internal import missing_extra

try:
    from opentelemetry import metrics
    from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
except ModuleNotFoundError as _missing:  # pragma: no cover - exercised in a subprocess by the tests
    raise ModuleNotFoundError(missing_extra("poise_py.contrib.otel", "otel"), name=_missing.name) from None

from .. import (
    BalancerStatistics,
    CallEnded,
    CircuitState,
    ConfigError,
    Endpoint,
    EndpointSnapshot,
    LoadBalancer,
    PoolSnapshot,
    __version__,
)

__all__ = [
    "CIRCUIT_STATE",
    "CIRCUIT_STATES",
    "ENDPOINT",
    "FAULT",
    "MODE",
    "OUTCOME",
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "Instrumentation",
    "instrument",
    "server_attributes",
]

ENDPOINT = "poise.endpoint.id"
"""The attribute naming the endpoint."""
MODE = "poise.decision.mode"
"""The attribute naming the decision mode (healthy, spillover, panic)."""
FAULT = "poise.fault"
"""The attribute naming the fault tier (pool-wide fault counts)."""
OUTCOME = "poise.call.outcome"
"""The attribute naming a call's outcome: ``success``, a fault tier's value, ``cancelled`` or ``superseded``."""
CIRCUIT_STATE = "poise.circuit.state"
"""The attribute naming a circuit state on ``poise.circuit.status``."""
SERVER_ADDRESS = "server.address"
"""The semantic-convention attribute: the endpoint's host (name or IP)."""
SERVER_PORT = "server.port"
"""The semantic-convention attribute: the endpoint's port, when its address has one."""

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
"""The histogram's bucket advice: the semantic conventions' advice for request durations."""

CIRCUIT_STATES: tuple[tuple[str, Callable[[EndpointSnapshot], bool]], ...] = (
    ("closed", lambda e: e.state is CircuitState.CLOSED and not e.degraded),
    ("degraded", lambda e: e.state is CircuitState.CLOSED and e.degraded),
    ("open", lambda e: e.state is CircuitState.OPEN),
    ("half_open", lambda e: e.state is CircuitState.HALF_OPEN),
    ("blocked", lambda e: e.state is CircuitState.BLOCKED),
    ("retired", lambda e: e.state is CircuitState.RETIRED),
)
"""Each value of ``poise.circuit.state`` and whether an endpoint is in it: one line per state."""


def server_attributes(endpoint: Endpoint) -> dict[str, str | int]:
    """``server.address`` (and ``server.port`` if known) for ``endpoint.address``.

    Understands a ``(host, port)`` pair, a ``"host:port"`` or ``"host"`` string and a URL
    (``"https://10.0.0.7:8443"``; its scheme's default port when it names none); any
    other address yields no attributes.
    """
    address = endpoint.address
    if isinstance(address, tuple) and len(address) == 2:
        host, port = address
        if isinstance(host, str) and host and isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536:
            return {SERVER_ADDRESS: host, SERVER_PORT: port}
        return {}  # not a host and a port a socket could have
    if not isinstance(address, str) or not address:
        return {}
    scheme, sep, rest = address.partition("://")
    default_port = {"http": 80, "https": 443}.get(scheme.lower()) if sep else None
    authority = (rest if sep else address).split("/", 1)[0].rpartition("@")[2]
    if authority.startswith("["):  # [v6]:port
        host, _, tail = authority[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    elif authority.count(":") == 1:
        host, _, port_text = authority.partition(":")
    else:
        host, port_text = authority, ""
    if not host:
        return {}
    if port_text.isascii() and port_text.isdigit() and len(port_text) <= 5 and 0 < int(port_text) < 65536:
        return {SERVER_ADDRESS: host, SERVER_PORT: int(port_text)}
    return {SERVER_ADDRESS: host} if default_port is None else {SERVER_ADDRESS: host, SERVER_PORT: default_port}


def _endpoint_attributes(endpoint: Endpoint) -> dict[str, str | int]:
    return {ENDPOINT: endpoint.id, **server_attributes(endpoint)}


_Reader = Callable[[BalancerStatistics], Iterable[Observation]]


def _per_endpoint(field: str) -> _Reader:
    def read(stats: BalancerStatistics) -> Iterator[Observation]:
        for endpoint_id, counters in stats.endpoints.items():
            yield Observation(getattr(counters, field), {ENDPOINT: endpoint_id})

    return read


def _selections(stats: BalancerStatistics) -> Iterator[Observation]:
    for endpoint_id, counters in stats.endpoints.items():
        for mode, n in counters.selections.items():
            yield Observation(n, {ENDPOINT: endpoint_id, MODE: mode.value})


def _pool_selections(stats: BalancerStatistics) -> Iterator[Observation]:
    for mode, n in stats.pool.selections.items():
        yield Observation(n, {MODE: mode.value})


def _pool_faults(stats: BalancerStatistics) -> Iterator[Observation]:
    for fault, n in stats.pool.faults.items():
        yield Observation(n, {FAULT: fault.value})


def _discovery(stats: BalancerStatistics) -> Iterator[Observation]:
    yield Observation(stats.pool.discovery_applied, {"poise.discovery.result": "applied"})
    yield Observation(stats.pool.discovery_rejected, {"poise.discovery.result": "rejected"})


def _pool(field: str) -> _Reader:
    def read(stats: BalancerStatistics) -> Iterator[Observation]:
        yield Observation(getattr(stats.pool, field))

    return read


# (name, unit, description, reader) for each observable counter.
_COUNTERS: tuple[tuple[str, str, str, _Reader], ...] = (
    ("poise.selections", "{permit}", "Permits issued, by endpoint and decision mode.", _selections),
    (
        "poise.stale_results",
        "{result}",
        "Results dropped because their circuit epoch had passed, by endpoint.",
        _per_endpoint("stale"),
    ),
    ("poise.probes", "{permit}", "Half-open probe permits issued, by endpoint.", _per_endpoint("probes")),
    (
        "poise.ejections",
        "{ejection}",
        "Circuit openings with escalation, by endpoint.",
        _per_endpoint("ejections"),
    ),
    (
        "poise.pool.selections",
        "{permit}",
        "Permits issued pool-wide (departed endpoints included), by decision mode.",
        _pool_selections,
    ),
    ("poise.pool.faults", "{call}", "Failed calls pool-wide, by fault tier.", _pool_faults),
    ("poise.pool.ejections", "{ejection}", "Circuit openings pool-wide.", _pool("ejections")),
    ("poise.pool.stale_results", "{result}", "Stale results dropped pool-wide.", _pool("stale")),
    (
        "poise.selection_failures",
        "{call}",
        "acquire() calls that raised a SelectionError.",
        _pool("failed_selections"),
    ),
    (
        "poise.no_eligible_alerts",
        "{alert}",
        "Episodes of no eligible endpoints that lasted past the alert threshold.",
        _pool("no_eligible_alerts"),
    ),
    (
        "poise.discovery.updates",
        "{update}",
        "Discovery updates, by result (poise.discovery.result: applied or rejected).",
        _discovery,
    ),
    (
        "poise.coordination.fallbacks",
        "{fallback}",
        "Times the fleet coordinator was unreachable and the local circuit was used.",
        _pool("coordination_fallbacks"),
    ),
    ("poise.panics", "{episode}", "Panic-routing episodes started.", _pool("panics")),
    (
        "poise.denied_retries",
        "{retry}",
        "Retries skipped because the retry budget was spent.",
        _pool("retries_denied"),
    ),
    (
        "poise.readiness_failures",
        "{check}",
        "Endpoint readiness checks that failed.",
        _pool("readiness_failures"),
    ),
    ("poise.dropped_events", "{event}", "Events slow subscribers lost.", _pool("events_dropped")),
    ("poise.hedged_requests", "{request}", "Requests made with a hedge policy.", _pool("hedged_requests")),
    ("poise.hedges", "{hedge}", "Hedges sent (extra attempts while the first was in flight).", _pool("hedges_sent")),
    ("poise.winning_hedges", "{hedge}", "Hedges whose answer was the request's answer.", _pool("hedges_won")),
    ("poise.waits", "{caller}", "Callers that waited for an eligible endpoint.", _pool("waits")),
    (
        "poise.expired_waits",
        "{caller}",
        "Waiters whose wait ended before an endpoint was eligible.",
        _pool("waits_expired"),
    ),
    (
        "poise.suppressed_log_lines",
        "{line}",
        "Log lines held back by the rate limit.",
        _pool("log_lines_suppressed"),
    ),
)

_SnapshotReader = Callable[[PoolSnapshot], Iterable[Observation]]


def _active(snapshot: PoolSnapshot) -> Iterator[Observation]:
    for e in snapshot.endpoints:
        yield Observation(e.inflight, _endpoint_attributes(e.endpoint))


def _status(e: EndpointSnapshot) -> str:
    if e.state is not CircuitState.CLOSED:
        return "ejected"
    return "available" if e.eligible_reason is None else "unavailable"


def _endpoint_count(snapshot: PoolSnapshot) -> Iterator[Observation]:
    counts = dict.fromkeys(("available", "ejected", "unavailable"), 0)
    for e in snapshot.endpoints:
        counts[_status(e)] += 1
    for status, n in counts.items():
        yield Observation(n, {"poise.endpoint.status": status})


def _circuit_status(snapshot: PoolSnapshot) -> Iterator[Observation]:
    for e in snapshot.endpoints:
        base = _endpoint_attributes(e.endpoint)
        for state, holds in CIRCUIT_STATES:
            yield Observation(1 if holds(e) else 0, {**base, CIRCUIT_STATE: state})


def _effective_weight(snapshot: PoolSnapshot) -> Iterator[Observation]:
    for e in snapshot.endpoints:
        yield Observation(e.effective_weight, _endpoint_attributes(e.endpoint))


def _concurrency_limit(snapshot: PoolSnapshot) -> Iterator[Observation]:
    for e in snapshot.endpoints:
        if e.concurrency_limit is not None:
            yield Observation(e.concurrency_limit, _endpoint_attributes(e.endpoint))


def _concurrency_max(snapshot: PoolSnapshot) -> Iterator[Observation]:
    for e in snapshot.endpoints:
        if e.max_in_flight is not None:
            yield Observation(e.max_in_flight, _endpoint_attributes(e.endpoint))


def _reported_utilization(snapshot: PoolSnapshot) -> Iterator[Observation]:
    for e in snapshot.endpoints:
        report = e.load_report
        if report is not None:
            utilization = report.application_utilization or report.cpu_utilization
            yield Observation(utilization, _endpoint_attributes(e.endpoint))


def _load_weight(snapshot: PoolSnapshot) -> Iterator[Observation]:
    for e in snapshot.endpoints:
        if e.load_weight is not None:
            yield Observation(e.load_weight, _endpoint_attributes(e.endpoint))


def _quota_remaining(snapshot: PoolSnapshot) -> Iterator[Observation]:
    for e in snapshot.endpoints:
        if e.quota_remaining is not None:
            yield Observation(e.quota_remaining, _endpoint_attributes(e.endpoint))


# (name, unit, description, reader) for each observable UpDownCounter.
_UP_DOWN: tuple[tuple[str, str, str, _SnapshotReader], ...] = (
    ("poise.call.active", "{call}", "Calls in flight (permits issued and not yet ended), by endpoint.", _active),
    (
        "poise.endpoint.count",
        "{endpoint}",
        (
            "Endpoints in the pool by status: available (may take a permit now), ejected (circuit open or "
            "half-open), unavailable (draining, disabled, not ready, unhealthy...)."
        ),
        _endpoint_count,
    ),
)

# (name, unit, description, reader) for each observable gauge.
_GAUGES: tuple[tuple[str, str, str, _SnapshotReader], ...] = (
    (
        "poise.circuit.status",
        "1",
        "Each endpoint's circuit state: 1 for the state it is in (poise.circuit.state), 0 for the others.",
        _circuit_status,
    ),
    (
        "poise.endpoint.effective_weight",
        "1",
        "Each endpoint's weight times its slow-start factor and the share of its quota left: what policies give it.",
        _effective_weight,
    ),
    (
        "poise.endpoint.concurrency.limit",
        "{call}",
        "The calls in flight each endpoint's adaptive concurrency limit allows (endpoints with one).",
        _concurrency_limit,
    ),
    (
        "poise.endpoint.concurrency.max",
        "{call}",
        "Each endpoint's fixed concurrency cap, max_in_flight (endpoints with one).",
        _concurrency_max,
    ),
    (
        "poise.endpoint.load.utilization",
        "1",
        "The utilization each endpoint's backend last reported (ORCA: application, else CPU; endpoints that report).",
        _reported_utilization,
    ),
    (
        "poise.endpoint.load.weight",
        "1",
        "The weight each endpoint's load reports make (gRPC weighted round robin: qps / (utilization + eps/qps)).",
        _load_weight,
    ),
    (
        "poise.endpoint.quota.remaining",
        "{request}",
        "The requests each endpoint's provider said are left of its rate limit (0 while it rests on a spent quota).",
        _quota_remaining,
    ),
)


@attrs.define(eq=False)
class Instrumentation:
    """The instruments registered for one balancer; :meth:`close` stops their reports."""

    lb: LoadBalancer
    meter: Meter
    names: tuple[str, ...]
    _closed: bool = False
    _record: Callable[[CallEnded], None] | None = None

    def close(self) -> None:
        """Report nothing more (OpenTelemetry has no way to unregister an instrument)."""
        if self._closed:
            return
        if self._record is not None:
            self.lb.remove_call_observer(self._record)  # first: from another thread it raises, and nothing closed
        self._closed = True

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def _callback(self, reader: _Reader) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            if self._closed:
                return []
            return list(reader(self.lb.statistics()))

        return observe

    def _snapshot_callback(self, reader: _SnapshotReader) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            if self._closed:
                return []
            return list(reader(self.lb.snapshot()))

        return observe


def _recorder(meter: Meter) -> Callable[[CallEnded], None]:
    """The call observer feeding ``poise.call.duration`` and ``poise.calls``."""
    duration = meter.create_histogram(
        "poise.call.duration",
        unit="s",
        description="Duration of calls through the balancer, from acquire() to the reported outcome.",
        explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
    )
    calls = meter.create_counter(
        "poise.calls", unit="{call}", description="Calls through the balancer, by endpoint and outcome."
    )
    # (endpoint id, outcome) -> (the Endpoint they were built from, attributes); an update
    # that replaces the Endpoint (a new address) rebuilds them.
    cache: dict[tuple[str, str], tuple[Endpoint, Mapping[str, Any]]] = {}

    def record(ended: CallEnded) -> None:
        outcome = ended.outcome
        endpoint = ended.endpoint
        key = (endpoint.id, outcome)
        cached = cache.get(key)
        if cached is not None and cached[0] is endpoint:
            attributes = cached[1]
        else:
            if len(cache) >= 4096:  # endpoints come and go: forget the old ones now and then
                cache.clear()
            attributes = {**_endpoint_attributes(endpoint), OUTCOME: outcome}
            cache[key] = (endpoint, attributes)
        duration.record(ended.duration, attributes)
        calls.add(1, attributes)

    return record


def instrument(
    lb: LoadBalancer,
    *,
    meter_provider: MeterProvider | None = None,
    meter_name: str = "poise_py",
) -> Instrumentation:
    """Register ``lb``'s instruments: call duration and count, in-flight calls, pool sizes, circuits, load control.

    Args:
        lb: the balancer to observe.
        meter_provider: where to register; the global provider if None.
        meter_name: the instrumentation scope's name.

    Returns:
        The :class:`Instrumentation`; call ``close()`` to stop reporting.
    """
    if not isinstance(lb, LoadBalancer):  # checked before any instrument is registered
        raise ConfigError("lb", f"must be a poise.LoadBalancer, got {type(lb).__name__}")
    if meter_provider is not None and not callable(getattr(meter_provider, "get_meter", None)):
        raise ConfigError(
            "meter_provider", f"must be an OpenTelemetry MeterProvider, got {type(meter_provider).__name__}"
        )
    if not isinstance(meter_name, str) or not meter_name:
        raise ConfigError("meter_name", f"must be a non-empty string, got {meter_name!r:.80}")
    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    meter = provider.get_meter(meter_name, __version__)
    names = (
        "poise.call.duration",
        "poise.calls",
        *(name for name, *_ in _COUNTERS),
        *(name for name, *_ in _UP_DOWN),
        *(name for name, *_ in _GAUGES),
    )
    handle = Instrumentation(lb, meter, names)
    for name, unit, description, reader in _COUNTERS:
        meter.create_observable_counter(name, callbacks=[handle._callback(reader)], unit=unit, description=description)
    for name, unit, description, snapshot_reader in _UP_DOWN:
        meter.create_observable_up_down_counter(
            name, callbacks=[handle._snapshot_callback(snapshot_reader)], unit=unit, description=description
        )
    for name, unit, description, snapshot_reader in _GAUGES:
        meter.create_observable_gauge(
            name, callbacks=[handle._snapshot_callback(snapshot_reader)], unit=unit, description=description
        )
    record = _recorder(meter)
    handle._record = record
    lb.add_call_observer(record)
    return handle
