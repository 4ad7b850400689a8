"""OpenTelemetry gauges of load control: effective weight, adaptive concurrency limit, fixed cap."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import poise_py as poise
from poise_py.contrib.otel import ENDPOINT, SERVER_ADDRESS, SERVER_PORT, instrument
from tests.contrib.test_otel import points, value
from tests.support.clocks import FakeClock

pytestmark = pytest.mark.anyio

A = {ENDPOINT: "a", SERVER_ADDRESS: "10.0.0.1", SERVER_PORT: 8080}
B = {ENDPOINT: "b", SERVER_ADDRESS: "10.0.0.2", SERVER_PORT: 9090}


def _reader(lb: poise.LoadBalancer) -> InMemoryMetricReader:
    reader = InMemoryMetricReader()
    instrument(lb, meter_provider=MeterProvider(metric_readers=[reader], shutdown_on_exit=False))
    return reader


def _endpoints(**b: Any) -> list[poise.Endpoint]:
    return [
        poise.Endpoint("a", address=("10.0.0.1", 8080), weight=2),
        poise.Endpoint("b", address="10.0.0.2:9090", **b),
    ]


async def test_every_endpoint_reports_its_weight_and_none_reports_a_limit_or_cap_without_load_knobs(
    clock: FakeClock,
) -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery(_endpoints()), clock=clock)
    async with lb:
        found = points(_reader(lb))
    assert value(found, "poise.endpoint.effective_weight", **A) == 2.0
    assert value(found, "poise.endpoint.effective_weight", **B) == 1.0
    assert "poise.endpoint.concurrency.limit" not in found
    assert "poise.endpoint.concurrency.max" not in found


async def test_the_cap_and_the_adaptive_limit_are_gauges_per_endpoint(clock: FakeClock) -> None:
    lb = poise.LoadBalancer(
        poise.StaticDiscovery(_endpoints(metadata={"max_in_flight": 3})),
        concurrency=poise.AdaptiveConcurrency(poise.AIMD(initial_limit=4)),
        clock=clock,
    )
    async with lb:
        reader = _reader(lb)
        found = points(reader)
        assert value(found, "poise.endpoint.concurrency.limit", **A) == 4
        assert value(found, "poise.endpoint.concurrency.limit", **B) == 4
        assert value(found, "poise.endpoint.concurrency.max", **B) == 3
        assert [attrs for attrs, _ in found["poise.endpoint.concurrency.max"]] == [B]  # a has no cap
        for _ in range(20):  # AIMD grows a's limit while it is used
            held = [lb.acquire(exclude=["b"]) for _ in range(4)]
            clock.advance(0.01)
            for permit in held:
                permit.succeed()
        grown = value(points(reader), "poise.endpoint.concurrency.limit", **A)
        assert grown == lb.snapshot()["a"].concurrency_limit
        assert grown > 4


async def test_a_ramping_endpoints_effective_weight_gauge_rises_over_its_slow_start(clock: FakeClock) -> None:
    publisher = poise.DiscoveryPublisher()
    lb = poise.LoadBalancer(publisher.subscribe(), slow_start=poise.SlowStart(window=10.0), clock=clock)
    publisher.publish(poise.Snapshot(1, _endpoints()[:1]))
    async with lb:
        await lb.wait_ready()
        reader = _reader(lb)
        publisher.publish(poise.Delta(2, added=_endpoints()[1:]))
        while "b" not in lb.snapshot():
            await anyio.sleep(0)
        early = value(points(reader), "poise.endpoint.effective_weight", **B)
        clock.advance(5.0)
        later = value(points(reader), "poise.endpoint.effective_weight", **B)
        publisher.close()
    assert early == pytest.approx(0.1)  # min_weight
    assert later == pytest.approx(0.5)


async def test_reported_utilization_and_the_load_weight_are_gauges_of_the_endpoints_that_report(
    clock: FakeClock,
) -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery(_endpoints()), clock=clock)
    async with lb:
        reader = _reader(lb)
        assert "poise.endpoint.load.utilization" not in points(reader)  # nothing reported yet
        async with lb.acquire(exclude=["b"]) as permit:
            permit.report_load(poise.LoadReport(cpu_utilization=0.8, application_utilization=0.4, qps=20.0))
        found = points(reader)
        assert value(found, "poise.endpoint.load.utilization", **A) == 0.4
        assert value(found, "poise.endpoint.load.weight", **A) == pytest.approx(50.0)
        assert [attrs for attrs, _ in found["poise.endpoint.load.weight"]] == [A]
