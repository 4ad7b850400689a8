"""OpenTelemetry metrics by the semantic conventions, read by the SDK's in-memory reader and scraped by Prometheus."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    NumberDataPoint,
    Sum,
)
from prometheus_client import CollectorRegistry, start_http_server

import poise_py as poise
from poise_py._core._record import count_selection
from poise_py._core._tally import SATURATED
from poise_py.contrib import otel
from poise_py.contrib.otel import (
    CIRCUIT_STATE,
    CIRCUIT_STATES,
    ENDPOINT,
    MODE,
    OUTCOME,
    SERVER_ADDRESS,
    SERVER_PORT,
    instrument,
    server_attributes,
)
from tests.support.clocks import TRIP_AT_ONCE, FakeClock

pytestmark = pytest.mark.anyio

Points = dict[str, list[tuple[dict[str, Any], Any]]]


def collect(reader: InMemoryMetricReader) -> dict[str, Metric]:
    data = reader.get_metrics_data()
    assert data is not None
    found: dict[str, Metric] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "poise_py"
            for metric in scope.metrics:
                found[metric.name] = metric
    return found


def points(reader: InMemoryMetricReader) -> Points:
    """Every data point the reader collected, by metric name: (attributes, value or histogram point)."""
    found: Points = {}
    for name, metric in collect(reader).items():
        found[name] = [
            (dict(p.attributes or {}), p.value if isinstance(p, NumberDataPoint) else p)
            for p in metric.data.data_points
        ]
    return found


def value(found: Points, name: str, **attributes: Any) -> Any:
    for attrs, v in found[name]:
        if attrs == attributes:
            return v
    raise AssertionError(f"no point {attributes} in {name}: {found[name]}")


def lb_at(*addresses: tuple[str, Any], clock: FakeClock | None, **kwargs: Any) -> poise.LoadBalancer:
    eps = [poise.Endpoint(i, address=a) for i, a in addresses]
    return poise.LoadBalancer(poise.StaticDiscovery(eps), clock=clock, **kwargs)


A = ("a", ("10.0.0.1", 8080))
B = ("b", "10.0.0.2:9090")


def call_attrs(endpoint_id: str, host: str, port: int, outcome: str) -> dict[str, Any]:
    return {ENDPOINT: endpoint_id, SERVER_ADDRESS: host, SERVER_PORT: port, OUTCOME: outcome}


async def test_every_call_is_one_duration_measurement_and_one_count_with_its_outcome_and_server(
    clock: FakeClock,
) -> None:
    reader = InMemoryMetricReader()
    async with lb_at(A, B, clock=clock, circuit=TRIP_AT_ONCE) as lb:
        # shutdown_on_exit=False: an atexit hook would keep every provider, and with it the balancer, alive
        instrument(lb, meter_provider=MeterProvider(metric_readers=[reader], shutdown_on_exit=False))
        for seconds in (0.5, 1.5):
            async with lb.acquire(exclude=["b"]):
                clock.advance(seconds)
        with pytest.raises(OSError):
            async with lb.acquire(exclude=["a"]):
                clock.advance(0.25)
                raise OSError("reset")
        permit = lb.acquire(exclude=["b"])
        clock.advance(3.0)
        permit.cancel()

        found = points(reader)
        success = value(found, "poise.call.duration", **call_attrs("a", "10.0.0.1", 8080, "success"))
        assert isinstance(success, HistogramDataPoint)
        assert success.count == 2
        assert success.sum == pytest.approx(2.0)
        suspect = value(found, "poise.call.duration", **call_attrs("b", "10.0.0.2", 9090, "suspect"))
        assert suspect.count == 1
        assert suspect.sum == pytest.approx(0.25)
        cancelled = value(found, "poise.call.duration", **call_attrs("a", "10.0.0.1", 8080, "cancelled"))
        assert cancelled.sum == pytest.approx(3.0)
        assert value(found, "poise.calls", **call_attrs("a", "10.0.0.1", 8080, "success")) == 2
        assert value(found, "poise.calls", **call_attrs("b", "10.0.0.2", 9090, "suspect")) == 1
        assert value(found, "poise.calls", **call_attrs("a", "10.0.0.1", 8080, "cancelled")) == 1
        assert list(success.explicit_bounds) == list(otel.DURATION_BUCKETS)


async def test_in_flight_calls_and_pool_sizes_are_up_down_counters(clock: FakeClock) -> None:
    reader = InMemoryMetricReader()
    async with lb_at(A, B, ("c", None), clock=clock, circuit=TRIP_AT_ONCE) as lb:
        instrument(lb, meter_provider=MeterProvider(metric_readers=[reader], shutdown_on_exit=False))
        held = [lb.acquire(exclude=["b", "c"]) for _ in range(2)]
        with pytest.raises(OSError):
            async with lb.acquire(exclude=["a", "c"]):
                raise OSError("reset")  # b's circuit opens
        lb.set_status("c", poise.AdminStatus.DRAINING)
        found = points(reader)
        assert value(found, "poise.call.active", **{ENDPOINT: "a", SERVER_ADDRESS: "10.0.0.1", SERVER_PORT: 8080}) == 2
        assert value(found, "poise.call.active", **{ENDPOINT: "b", SERVER_ADDRESS: "10.0.0.2", SERVER_PORT: 9090}) == 0
        assert value(found, "poise.call.active", **{ENDPOINT: "c"}) == 0  # no address: no server.* attributes
        assert value(found, "poise.endpoint.count", **{"poise.endpoint.status": "available"}) == 1
        assert value(found, "poise.endpoint.count", **{"poise.endpoint.status": "ejected"}) == 1
        assert value(found, "poise.endpoint.count", **{"poise.endpoint.status": "unavailable"}) == 1
        for permit in held:
            permit.succeed()
        found = points(reader)
        assert value(found, "poise.call.active", **{ENDPOINT: "a", SERVER_ADDRESS: "10.0.0.1", SERVER_PORT: 8080}) == 0


@pytest.mark.virtual_asyncio
async def test_circuit_status_is_one_for_each_endpoints_state_and_zero_for_the_others() -> None:
    reader = InMemoryMetricReader()
    async with lb_at(A, B, clock=None, circuit=TRIP_AT_ONCE) as lb:
        instrument(lb, meter_provider=MeterProvider(metric_readers=[reader], shutdown_on_exit=False))
        with pytest.raises(OSError):
            async with lb.acquire(exclude=["a"]):
                raise OSError("reset")
        found = points(reader)
        a = {ENDPOINT: "a", SERVER_ADDRESS: "10.0.0.1", SERVER_PORT: 8080}
        b = {ENDPOINT: "b", SERVER_ADDRESS: "10.0.0.2", SERVER_PORT: 9090}
        assert {
            s: value(found, "poise.circuit.status", **a, **{CIRCUIT_STATE: s}) for s in ("closed", "open", "half_open")
        } == {
            "closed": 1,
            "open": 0,
            "half_open": 0,
        }
        assert value(found, "poise.circuit.status", **b, **{CIRCUIT_STATE: "open"}) == 1
        await anyio.sleep(31)  # the balancer's timer half-opens b's circuit (virtual time)
        found = points(reader)
        assert value(found, "poise.circuit.status", **b, **{CIRCUIT_STATE: "half_open"}) == 1
        assert value(found, "poise.circuit.status", **b, **{CIRCUIT_STATE: "open"}) == 0


async def test_a_blocked_circuit_has_its_own_line(clock: FakeClock) -> None:
    reader = InMemoryMetricReader()
    async with lb_at(A, B, clock=clock) as lb:
        instrument(lb, meter_provider=MeterProvider(metric_readers=[reader], shutdown_on_exit=False))
        lb.acquire(exclude=["a"]).fail(poise.Fault.PERMANENT)
        found = points(reader)
        b = {ENDPOINT: "b", SERVER_ADDRESS: "10.0.0.2", SERVER_PORT: 9090}
        lines = {s: value(found, "poise.circuit.status", **b, **{CIRCUIT_STATE: s}) for s, _ in CIRCUIT_STATES}
        assert lines == {"closed": 0, "degraded": 0, "open": 0, "half_open": 0, "blocked": 1, "retired": 0}


async def test_closing_from_another_thread_refuses_and_a_close_on_the_loop_still_closes(clock: FakeClock) -> None:
    reader = InMemoryMetricReader()
    async with lb_at(A, clock=clock) as lb:
        handle = instrument(lb, meter_provider=MeterProvider(metric_readers=[reader], shutdown_on_exit=False))
        with pytest.raises(poise.WrongThread):
            await anyio.to_thread.run_sync(handle.close)
        assert not handle.closed
        handle.close()
        assert handle.closed
        async with lb.acquire():
            pass
        data = reader.get_metrics_data()
        names = {m.name for r in data.resource_metrics for sc in r.scope_metrics for m in sc.metrics} if data else set()
        assert "poise.calls" not in names  # the call observer went with the close


def test_instrument_refuses_what_is_not_a_balancer_before_registering_anything() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    for lb, knob in ((None, "lb"), ("lb", "lb")):
        with pytest.raises(poise.ConfigError) as info:
            instrument(lb, meter_provider=provider)  # type: ignore[arg-type]
        assert info.value.knob == knob
    balancer = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))
    with pytest.raises(poise.ConfigError) as info:
        instrument(balancer, meter_provider="x")  # type: ignore[arg-type]
    assert info.value.knob == "meter_provider"
    data = reader.get_metrics_data()
    assert data is None or not data.resource_metrics  # nothing registered


async def test_an_endpoint_the_ejection_guard_keeps_is_in_the_degraded_circuit_state(clock: FakeClock) -> None:
    guarded = poise.CircuitPolicy(
        consecutive_failures=1, minimum_volume=1, max_ejection_percent=0.5, escalation=poise.Escalation(jitter=0.0)
    )
    reader = InMemoryMetricReader()
    async with lb_at(A, B, clock=clock, circuit=guarded) as lb:
        instrument(lb, meter_provider=MeterProvider(metric_readers=[reader], shutdown_on_exit=False))
        for excluded in ("b", "a"):  # a is ejected; b's trip is refused by the 50% guard
            with pytest.raises(OSError):
                async with lb.acquire(exclude=[excluded]):
                    raise OSError("reset")
        found = points(reader)
        a = {ENDPOINT: "a", SERVER_ADDRESS: "10.0.0.1", SERVER_PORT: 8080}
        b = {ENDPOINT: "b", SERVER_ADDRESS: "10.0.0.2", SERVER_PORT: 9090}
        states = ("closed", "degraded", "open", "half_open")
        assert [value(found, "poise.circuit.status", **a, **{CIRCUIT_STATE: s}) for s in states] == [0, 0, 1, 0]
        assert [value(found, "poise.circuit.status", **b, **{CIRCUIT_STATE: s}) for s in states] == [0, 1, 0, 0]


# The semantic conventions' naming rules (docs/general/naming.md and docs/general/metrics.md):
# lowercase dot-separated namespaces with snake_case components; no `_total`; a counter whose
# unit is an annotation ({call}) is pluralized; an UpDownCounter is not; durations in seconds
# ("s"), counts in a curly-brace annotation (a gauge's too: a concurrency limit), ratios and states in "1".
NAME = re.compile(r"^poise(\.[a-z][a-z0-9]*(_[a-z0-9]+)*)+$")
ANNOTATION = re.compile(r"^\{[a-z][a-z_]*\}$")
NOT_PLURAL = {"active", "count", "status", "duration"}


def check_metric(metric: Metric) -> None:
    name, unit, data = metric.name, metric.unit, metric.data
    assert NAME.match(name), name
    assert len(name) <= 255
    assert "total" not in name.split(".")[-1].split("_"), name
    last = name.rsplit(".", 1)[-1].rsplit("_", 1)[-1]
    if isinstance(data, Histogram):
        assert last == "duration", name
        assert unit == "s", (name, unit)
    elif isinstance(data, Sum) and data.is_monotonic:
        assert ANNOTATION.match(unit or ""), (name, unit)
        assert last.endswith("s"), f"{name}: a counter of {unit} is pluralized"
        assert last not in NOT_PLURAL, name
    elif isinstance(data, Sum):
        assert ANNOTATION.match(unit or ""), (name, unit)
        assert last in NOT_PLURAL, f"{name}: an UpDownCounter is not pluralized"
    else:
        assert isinstance(data, Gauge)
        assert unit == "1" or ANNOTATION.match(unit or ""), (name, unit)
    for point in data.data_points:
        for key in point.attributes or {}:
            assert re.match(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$", key), (name, key)


async def test_every_instrument_follows_the_semantic_convention_naming_rules(clock: FakeClock) -> None:
    reader = InMemoryMetricReader()
    # With a cap and an adaptive limit, so that every instrument has something to report.
    limits = {"max_in_flight": 8, "concurrency": poise.AdaptiveConcurrency()}
    async with lb_at(A, B, clock=clock, **limits) as lb:
        metrics = instrument(lb, meter_provider=MeterProvider(metric_readers=[reader], shutdown_on_exit=False))
        async with lb.acquire() as permit:
            permit.report_load(poise.LoadReport(cpu_utilization=0.5, qps=10.0))
            permit.report_quota(poise.Quota(requests_remaining=5))
        found = collect(reader)
        assert set(metrics.names) == set(found)
        kinds = {
            name: type(m.data).__name__ + ("+" if getattr(m.data, "is_monotonic", False) else "")
            for name, m in found.items()
        }
        assert kinds["poise.call.duration"] == "Histogram"
        assert kinds["poise.calls"] == "Sum+"
        assert kinds["poise.call.active"] == "Sum"
        assert kinds["poise.endpoint.count"] == "Sum"
        assert kinds["poise.circuit.status"] == "Gauge"
        assert kinds["poise.endpoint.effective_weight"] == "Gauge"
        assert kinds["poise.endpoint.concurrency.limit"] == "Gauge"
        assert kinds["poise.endpoint.concurrency.max"] == "Gauge"
        assert kinds["poise.endpoint.load.utilization"] == "Gauge"
        assert kinds["poise.endpoint.load.weight"] == "Gauge"
        assert kinds["poise.endpoint.quota.remaining"] == "Gauge"
        for metric in found.values():
            check_metric(metric)
        point = found["poise.calls"].data.data_points[0]
        assert {SERVER_ADDRESS, SERVER_PORT, OUTCOME} <= set(point.attributes or {})


async def test_counters_report_selections_with_endpoint_and_mode_attributes(clock: FakeClock) -> None:
    reader = InMemoryMetricReader()
    async with lb_at(A, B, clock=clock, circuit=TRIP_AT_ONCE) as lb:
        metrics = instrument(lb, meter_provider=MeterProvider(metric_readers=[reader], shutdown_on_exit=False))
        for _ in range(3):
            async with lb.acquire(exclude=["b"]):
                pass
        with pytest.raises(OSError):
            async with lb.acquire(exclude=["a"]):
                raise OSError("boom")
        with pytest.raises(poise.NoEligibleEndpoints):
            lb.acquire(exclude=["a"])
        count_selection(lb._pool.members["a"], poise.DecisionMode.SPILLOVER)
        found = points(reader)
        assert value(found, "poise.selections", **{ENDPOINT: "a", MODE: "healthy"}) == 2
        assert value(found, "poise.selections", **{ENDPOINT: "a", MODE: "spillover"}) == 1
        assert value(found, "poise.ejections", **{ENDPOINT: "b"}) == 1
        assert value(found, "poise.pool.selections", **{MODE: "healthy"}) == 3
        assert value(found, "poise.pool.faults", **{"poise.fault": "suspect"}) == 1
        assert value(found, "poise.selection_failures") == 1
        assert value(found, "poise.discovery.updates", **{"poise.discovery.result": "applied"}) == 1

        metrics.close()
        async with lb.acquire(exclude=["b"]):
            pass
        assert metrics.closed
        after = reader.get_metrics_data()
        assert after is None or all(
            not m.data.data_points
            for r in after.resource_metrics
            for s in r.scope_metrics
            for m in s.metrics
            if m.name not in ("poise.call.duration", "poise.calls")
        )
        calls = points(reader).get("poise.calls", [])
        assert sum(v for a, v in calls if a[OUTCOME] == "success") == 3  # nothing recorded after close


async def test_reported_values_saturate_and_attributes_stay_bounded(clock: FakeClock) -> None:
    reader = InMemoryMetricReader()
    send, receive = anyio.create_memory_object_stream[poise.Update](10)
    lb = poise.LoadBalancer(receive, clock=clock)
    async with lb, send, receive:
        instrument(lb, meter_provider=MeterProvider(metric_readers=[reader], shutdown_on_exit=False))
        for revision in range(1, 21):  # 20 endpoints come and go, one live at a time
            await send.send(poise.Snapshot(revision, [poise.Endpoint(f"e{revision}")]))
            await anyio.wait_all_tasks_blocked()
            async with lb.acquire():
                pass
        found = points(reader)
        assert {a[ENDPOINT] for a, _ in found["poise.selections"]} == {"e20"}
        assert {a[ENDPOINT] for a, _ in found["poise.circuit.status"]} == {"e20"}
        assert value(found, "poise.pool.selections", **{MODE: "healthy"}) == 20
        lb._pool.members["e20"].probes = SATURATED
        found = points(reader)
        assert value(found, "poise.probes", **{ENDPOINT: "e20"}) == SATURATED


def test_server_attributes_read_pairs_host_port_strings_and_urls() -> None:
    def attrs(address: Any) -> dict[str, Any]:
        return server_attributes(poise.Endpoint("x", address=address))

    assert attrs(("10.0.0.1", 80)) == {SERVER_ADDRESS: "10.0.0.1", SERVER_PORT: 80}
    assert attrs("db.internal:5432") == {SERVER_ADDRESS: "db.internal", SERVER_PORT: 5432}
    assert attrs("db.internal") == {SERVER_ADDRESS: "db.internal"}
    assert attrs("[::1]:8443") == {SERVER_ADDRESS: "::1", SERVER_PORT: 8443}
    assert attrs("https://api.example.com/v1") == {SERVER_ADDRESS: "api.example.com", SERVER_PORT: 443}
    assert attrs("http://10.0.0.3:8080") == {SERVER_ADDRESS: "10.0.0.3", SERVER_PORT: 8080}
    assert attrs(None) == {}
    assert attrs(("h", "p")) == {}
    assert attrs(("h", -1)) == {}
    assert attrs(("h", 10**400)) == {}
    assert attrs("h:99999") == {SERVER_ADDRESS: "h"}
    assert attrs("h:" + "9" * 5000) == {SERVER_ADDRESS: "h"}  # int() would refuse past 4,300 digits


async def test_a_prometheus_scrape_shows_the_call_histogram_and_counter(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry)
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        async with lb_at(("w1", ("127.0.0.1", 50051)), clock=clock) as lb:
            metrics = instrument(lb, meter_provider=provider)
            async with lb.acquire():
                clock.advance(0.2)
            url = f"http://127.0.0.1:{server.server_port}/metrics"
            body = await anyio.to_thread.run_sync(lambda: urllib.request.urlopen(url, timeout=10).read().decode())
            metrics.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        provider.shutdown()
    samples = scraped(body)
    call = {
        "poise_call_outcome": "success",
        "poise_endpoint_id": "w1",
        "server_address": "127.0.0.1",
        "server_port": "50051",
    }
    assert "# TYPE poise_call_duration_seconds histogram" in body
    assert sample(samples, "poise_call_duration_seconds_bucket", **call, le="0.25") == 1.0
    assert sample(samples, "poise_call_duration_seconds_bucket", **call, le="0.1") == 0.0
    assert sample(samples, "poise_call_duration_seconds_sum", **call) == pytest.approx(0.2)
    assert sample(samples, "poise_calls_total", **call) == 1.0
    assert sample(samples, "poise_circuit_status", poise_endpoint_id="w1", poise_circuit_state="closed") == 1.0


SAMPLE = re.compile(r"^([a-z_]+)\{(.*)\} (\S+)$")


def scraped(body: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for each sample line of a Prometheus text exposition."""
    found = []
    for line in body.splitlines():
        match = SAMPLE.match(line)
        if match:
            labels = dict(re.findall(r'([a-z_]+)="([^"]*)"', match.group(2)))
            found.append((match.group(1), labels, float(match.group(3))))
    return found


def sample(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    for n, have, v in samples:
        if n == name and labels.items() <= have.items():
            return v
    raise AssertionError(f"no sample {name} {labels}")


def test_importing_without_opentelemetry_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "try:\n"
        "    import poise_py.contrib.otel\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc)\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)  # noqa: S603
    assert (
        out.stdout.strip()
        == "poise_py.contrib.otel needs: pip install 'poise_py[otel]' (in a clone: pip install -e '.[otel]')"
    )


async def test_an_endpoint_moved_to_a_new_address_is_measured_at_the_new_one(clock: FakeClock) -> None:
    reader = InMemoryMetricReader()
    send, receive = anyio.create_memory_object_stream[poise.Update](4)
    lb = poise.LoadBalancer(receive, clock=clock)
    async with lb, send, receive:
        instrument(lb, meter_provider=MeterProvider(metric_readers=[reader], shutdown_on_exit=False))
        for revision, host in ((1, "10.0.0.1"), (2, "10.0.0.9")):
            await send.send(poise.Snapshot(revision, [poise.Endpoint("a", address=(host, 80))]))
            await anyio.wait_all_tasks_blocked()
            async with lb.acquire():
                pass
        found = points(reader)
        assert value(found, "poise.calls", **call_attrs("a", "10.0.0.1", 80, "success")) == 1
        assert value(found, "poise.calls", **call_attrs("a", "10.0.0.9", 80, "success")) == 1
