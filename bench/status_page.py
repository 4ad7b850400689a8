"""Per-call cost of the status page's call figures (``poise_py.contrib.status.StatusApp``).

Run: ``python bench/status_page.py`` (Trio). Prints microseconds per ``async with
lb.acquire(): pass`` (RoundRobin, 10 endpoints) with no call observer, with a no-op call
observer, and with a ``StatusApp`` showing the balancer (its call observer puts every call
into its endpoint's last-minute and five-minute buckets), each as a multiple of the
unobserved cost, measured in this one run: the balancers run side by side and are timed in
interleaved rounds (``bench._timing.interleaved``), and a ratio is the median over the
rounds of a row's sample over the unobserved one's from the same round
(``bench._timing.cost_per_round``).

Then it times what one fetch of ``/status.json`` costs the event loop, and its size, for a
balancer of 50 endpoints after five minutes of 200 calls a second (virtual time: Trio's
``MockClock``), the history full.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import poise_py as poise
from bench._acquire import acquire_loop, make_lb
from bench._timing import cost_per_round, interleaved, median_cost
from poise_py.contrib.status import StatusApp


async def main(iterations: int, rounds: int) -> None:
    names = ("no call observer", "a no-op call observer", "StatusApp (call figures)")
    apps: list[StatusApp] = []
    async with contextlib.AsyncExitStack() as stack:
        bodies: list[Callable[[int], Awaitable[None]]] = []
        for name in names:
            lb = await stack.enter_async_context(make_lb())
            if name == "a no-op call observer":
                lb.add_call_observer(lambda ended: None)
            elif name == "StatusApp (call figures)":
                apps.append(StatusApp(lb))
            bodies.append(functools.partial(acquire_loop, lb))
        samples = await interleaved(bodies, iterations, rounds)
        calls = apps[0].status()["balancers"][0]["last_minute"]["calls"]
    for app in apps:
        app.close()
    print(f"{rounds} interleaved rounds of {iterations:,} calls per row ({calls:,} in the page's last minute)")
    print(f"{'RoundRobin, 10 endpoints':<34}{'us/call':>10}{'x plain':>9}")
    for name, row in zip(names, samples, strict=True):
        print(f"{name:<34}{median_cost(row) * 1e6:>10.3f}{statistics.median(cost_per_round(row, samples[0])):>9.2f}")


async def fetch_cost(endpoints: int, seconds: int, rate: int) -> None:
    eps = [poise.Endpoint(f"e{i}", address=(f"10.0.{i // 256}.{i % 256}", 8080)) for i in range(endpoints)]
    lb = poise.LoadBalancer(poise.StaticDiscovery(eps), policy=poise.RoundRobin(), seed=1)
    app = StatusApp(lb)
    async with lb:
        for _ in range(seconds):
            for _ in range(rate):
                async with lb.acquire():
                    pass
            await trio.sleep(1.0)
        samples = []
        for _ in range(7):
            started = time.perf_counter()
            body = json.dumps(app.status())
            samples.append(time.perf_counter() - started)
    app.close()
    print(
        f"/status.json, {endpoints} endpoints after {seconds} s of {rate} calls/s: "
        f"{statistics.median(samples) * 1e3:.1f} ms to build, {len(body) / 1024:.0f} KiB"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=20_000, help="calls per row per round")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    trio.run(main, args.iterations, args.rounds)
    trio.run(fetch_cost, 50, 300, 200, clock=trio.testing.MockClock(autojump_threshold=0))
