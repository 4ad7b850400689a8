"""Per-call cost of a call observer and of OpenTelemetry instrumentation.

Run: ``python bench/observed.py`` (Trio). Prints microseconds per ``async with
lb.acquire(): pass`` (RoundRobin, 10 endpoints) with no call observer, with a no-op call
observer, and with ``poise_py.contrib.otel.instrument`` on an SDK ``MeterProvider``
(the duration histogram and call counter recorded on every call), each as a multiple of
the unobserved cost, measured in this one run: the three balancers run side by side and
are timed in interleaved rounds (``bench._timing.interleaved``), and a ratio is the median
over the rounds of a row's sample over the unobserved one's from the same round
(``bench._timing.cost_per_round``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from bench._acquire import acquire_loop, make_lb
from bench._timing import cost_per_round, interleaved, median_cost
from poise_py.contrib.otel import instrument


async def main(iterations: int, rounds: int) -> None:
    names = ("no call observer", "a no-op call observer", "otel instrument (SDK)")
    async with contextlib.AsyncExitStack() as stack:
        bodies: list[Callable[[int], Awaitable[None]]] = []
        for name in names:
            lb = await stack.enter_async_context(make_lb())
            if name == "a no-op call observer":
                lb.add_call_observer(lambda ended: None)
            elif name == "otel instrument (SDK)":
                instrument(lb, meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]))
            bodies.append(functools.partial(acquire_loop, lb))
        samples = await interleaved(bodies, iterations, rounds)
    print(f"{rounds} interleaved rounds of {iterations:,} calls per row")
    print(f"{'RoundRobin, 10 endpoints':<34}{'us/call':>10}{'x plain':>9}")
    for name, row in zip(names, samples, strict=True):
        print(f"{name:<34}{median_cost(row) * 1e6:>10.3f}{statistics.median(cost_per_round(row, samples[0])):>9.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=20_000, help="calls per row per round")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    trio.run(main, args.iterations, args.rounds)
