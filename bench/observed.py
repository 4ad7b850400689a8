"""Per-call cost of a call observer and of OpenTelemetry instrumentation.

Run: ``python bench/observed.py`` (Trio). Prints microseconds per ``async with
lb.acquire(): pass`` (RoundRobin, 10 endpoints) with no call observer, with a no-op call
observer, and with ``poise_py.contrib.otel.instrument`` on an SDK ``MeterProvider``
(the duration histogram and call counter recorded on every call), each as a multiple of
the unobserved cost, measured in this one run.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import poise_py as poise
from bench._timing import best_of
from poise_py.contrib.otel import instrument


def make_lb() -> poise.LoadBalancer:
    eps = [poise.Endpoint(f"e{i}", address=("127.0.0.1", 10000 + i)) for i in range(10)]
    return poise.LoadBalancer(poise.StaticDiscovery(eps), policy=poise.RoundRobin(), seed=1)


async def acquire_loop(lb: poise.LoadBalancer, n: int) -> None:
    acquire = lb.acquire
    for _ in range(n):
        async with acquire():
            pass


async def main(iterations: int) -> None:
    print(f"{'RoundRobin, 10 endpoints':<34}{'us/call':>10}{'x plain':>9}")
    plain = 0.0
    for name in ("no call observer", "a no-op call observer", "otel instrument (SDK)"):
        lb = make_lb()
        async with lb:
            if name == "a no-op call observer":
                lb.add_call_observer(lambda ended: None)
            elif name == "otel instrument (SDK)":
                instrument(lb, meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]))
            cost = await best_of(functools.partial(acquire_loop, lb), iterations)
        plain = plain or cost
        print(f"{name:<34}{cost * 1e6:>10.3f}{cost / plain:>9.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=50_000)
    trio.run(main, parser.parse_args().iterations)
