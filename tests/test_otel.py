"""OpenTelemetry metrics: observable instruments fed from the counters, read by the SDK."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

import poise_py as poise
from poise_py._core._state import SATURATED, count_selection
from poise_py.contrib.otel import ENDPOINT, FAULT, MODE, instrument
from tests.helpers import TRIP_AT_ONCE, FakeClock, static_lb

pytestmark = pytest.mark.anyio


def points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], int | float]]]:
    """Every data point the reader collected, by metric name: (attributes, value)."""
    data = reader.get_metrics_data()
    found: dict[str, list[tuple[dict[str, Any], int | float]]] = {}
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "poise_py"
            for metric in scope.metrics:
                found[metric.name] = [
                    (dict(p.attributes or {}), p.value)
                    for p in metric.data.data_points
                    if isinstance(p, NumberDataPoint)
                ]
    return found


def value(found: dict[str, list[tuple[dict[str, Any], int | float]]], name: str, **attributes: str) -> int | float:
    for attrs, v in found[name]:
        if attrs == attributes:
            return v
    raise AssertionError(f"no point {attributes} in {name}: {found[name]}")


async def test_instruments_report_counters_with_endpoint_and_mode_attributes(clock: FakeClock) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    async with static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=clock) as lb:
        metrics = instrument(lb, meter_provider=provider)
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
        assert value(found, "poise.successes", **{ENDPOINT: "a"}) == 3
        assert value(found, "poise.faults", **{ENDPOINT: "b", FAULT: "suspect"}) == 1
        assert value(found, "poise.faults", **{ENDPOINT: "a", FAULT: "suspect"}) == 0
        assert value(found, "poise.selections", **{ENDPOINT: "a", MODE: "healthy"}) == 2
        assert value(found, "poise.selections", **{ENDPOINT: "a", MODE: "spillover"}) == 1
        assert value(found, "poise.selections", **{ENDPOINT: "b", MODE: "panic"}) == 0
        assert value(found, "poise.ejections", **{ENDPOINT: "b"}) == 1
        assert value(found, "poise.pool.selections", **{MODE: "healthy"}) == 3
        assert value(found, "poise.selection_failures") == 1
        assert value(found, "poise.endpoints") == 2
        assert value(found, "poise.endpoints.ejected") == 1
        assert value(found, "poise.endpoints.available") == 1
        assert set(metrics.names) <= set(found)

        metrics.close()
        async with lb.acquire(exclude=["b"]):
            pass
        assert metrics.closed
        after = reader.get_metrics_data()
        assert after is None or all(
            not m.data.data_points for r in after.resource_metrics for s in r.scope_metrics for m in s.metrics
        )


async def test_reported_values_saturate_and_attributes_stay_bounded(clock: FakeClock) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    send, receive = anyio.create_memory_object_stream[poise.Update](10)
    lb = poise.LoadBalancer(receive, clock=clock)
    async with lb, send, receive:
        instrument(lb, meter_provider=provider)
        for revision in range(1, 21):  # 20 endpoints come and go, one live at a time
            await send.send(poise.Snapshot(revision, [poise.Endpoint(f"e{revision}")]))
            await anyio.wait_all_tasks_blocked()
            async with lb.acquire():
                pass
        found = points(reader)
        assert {a[ENDPOINT] for a, _ in found["poise.successes"]} == {"e20"}
        assert value(found, "poise.pool.selections", **{MODE: "healthy"}) == 20
        assert value(found, "poise.discovery.applied") == 20
        lb._pool.members["e20"].successes = SATURATED
        lb._pool.members["e20"].cancellations = SATURATED
        found = points(reader)
        assert value(found, "poise.successes", **{ENDPOINT: "e20"}) == SATURATED
        assert value(found, "poise.pool.selections", **{MODE: "healthy"}) == SATURATED
