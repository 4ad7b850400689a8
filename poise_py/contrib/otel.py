"""OpenTelemetry metrics for a balancer (extra ``poise_py[otel]``: the OpenTelemetry API only).

::

    from poise_py.contrib.otel import instrument

    metrics = instrument(lb)  # uses the global MeterProvider, or pass meter_provider=
    ...
    metrics.close()  # stop reporting (instruments cannot be unregistered in OpenTelemetry)

Every instrument is *observable*: nothing is recorded on the hot path. When the SDK's
reader collects, the callbacks read the balancer's saturating counters
(``lb.statistics()`` without side effects, so a reader thread may collect) and report
them as cumulative sums. Attributes stay bounded: ``poise.endpoint.id`` takes one value
per live endpoint (a departed endpoint's counts move to the pool-wide instruments),
``poise.decision.mode`` and ``poise.fault`` take the values of their enums.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import attrs
from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation

from .._balancer import LoadBalancer
from .._statistics import BalancerStatistics
from .._version import VERSION

__all__ = ["ENDPOINT", "FAULT", "MODE", "Instrumentation", "instrument"]

ENDPOINT = "poise.endpoint.id"
"""The attribute naming the endpoint."""
MODE = "poise.decision.mode"
"""The attribute naming the decision mode (healthy, spillover, panic)."""
FAULT = "poise.fault"
"""The attribute naming the fault tier."""

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


def _faults(stats: BalancerStatistics) -> Iterator[Observation]:
    for endpoint_id, counters in stats.endpoints.items():
        for fault, n in counters.faults.items():
            yield Observation(n, {ENDPOINT: endpoint_id, FAULT: fault.value})


def _pool_selections(stats: BalancerStatistics) -> Iterator[Observation]:
    for mode, n in stats.pool.selections.items():
        yield Observation(n, {MODE: mode.value})


def _pool_faults(stats: BalancerStatistics) -> Iterator[Observation]:
    for fault, n in stats.pool.faults.items():
        yield Observation(n, {FAULT: fault.value})


def _pool(field: str) -> _Reader:
    def read(stats: BalancerStatistics) -> Iterator[Observation]:
        yield Observation(getattr(stats.pool, field))

    return read


def _gauge(field: str) -> _Reader:
    def read(stats: BalancerStatistics) -> Iterator[Observation]:
        yield Observation(getattr(stats, field))

    return read


# (name, unit, description, reader) for each observable counter.
_COUNTERS: tuple[tuple[str, str, str, _Reader], ...] = (
    ("poise.selections", "{permit}", "Permits issued, by endpoint and decision mode.", _selections),
    ("poise.successes", "{call}", "Calls reported successful, by endpoint.", _per_endpoint("successes")),
    ("poise.faults", "{call}", "Calls that failed, by endpoint and fault tier.", _faults),
    (
        "poise.cancellations",
        "{permit}",
        "Permits that ended without an outcome, by endpoint.",
        _per_endpoint("cancellations"),
    ),
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
    ("poise.discovery.applied", "{update}", "Discovery updates applied.", _pool("discovery_applied")),
    ("poise.discovery.rejected", "{update}", "Discovery updates rejected.", _pool("discovery_rejected")),
    (
        "poise.coordination.fallbacks",
        "{fallback}",
        "Times the fleet coordinator was unreachable and the local circuit was used.",
        _pool("coordination_fallbacks"),
    ),
    ("poise.panics", "{episode}", "Panic-routing episodes started.", _pool("panics")),
    (
        "poise.retries_denied",
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
    ("poise.events_dropped", "{event}", "Events slow subscribers lost.", _pool("events_dropped")),
    (
        "poise.log_lines_suppressed",
        "{line}",
        "Log lines held back by the rate limit.",
        _pool("log_lines_suppressed"),
    ),
)

# (name, unit, description, reader) for each observable gauge.
_GAUGES: tuple[tuple[str, str, str, _Reader], ...] = (
    ("poise.endpoints", "{endpoint}", "Endpoints in the pool.", _gauge("size")),
    (
        "poise.endpoints.available",
        "{endpoint}",
        "Endpoints that could take a permit now.",
        _gauge("available"),
    ),
    (
        "poise.endpoints.ejected",
        "{endpoint}",
        "Endpoints whose circuit is open or half-open.",
        _gauge("ejected"),
    ),
    ("poise.inflight", "{permit}", "Permits issued and not yet ended.", _gauge("inflight")),
)


@attrs.define(eq=False)
class Instrumentation:
    """The instruments registered for one balancer; :meth:`close` stops their reports."""

    lb: LoadBalancer
    meter: Meter
    names: tuple[str, ...]
    _closed: bool = False

    def close(self) -> None:
        """Report nothing more (OpenTelemetry has no way to unregister an instrument)."""
        self._closed = True

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def _callback(self, reader: _Reader) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            if self._closed:
                return []
            return list(reader(self.lb._read_statistics()))

        return observe


def instrument(
    lb: LoadBalancer,
    *,
    meter_provider: MeterProvider | None = None,
    meter_name: str = "poise_py",
) -> Instrumentation:
    """Register observable instruments reporting ``lb``'s counters.

    Args:
        lb: the balancer to observe.
        meter_provider: where to register; the global provider if None.
        meter_name: the instrumentation scope's name.

    Returns:
        The :class:`Instrumentation`; call ``close()`` to stop reporting.
    """
    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    meter = provider.get_meter(meter_name, VERSION)
    names = tuple(name for name, *_ in _COUNTERS) + tuple(name for name, *_ in _GAUGES)
    handle = Instrumentation(lb, meter, names)
    for name, unit, description, reader in _COUNTERS:
        meter.create_observable_counter(name, callbacks=[handle._callback(reader)], unit=unit, description=description)
    for name, unit, description, reader in _GAUGES:
        meter.create_observable_gauge(name, callbacks=[handle._callback(reader)], unit=unit, description=description)
    return handle
