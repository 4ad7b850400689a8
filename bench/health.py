"""Per-call cost of ``async with lb.acquire(): pass`` with active health checks on, against off.

Run: ``python bench/health.py`` (Trio). Active health reaches selection only when a
classification or an operator status changes, never per call, so the ratios printed
should be 1.00 within noise. Rows: the same pool without a health check (the baseline),
with one whose probes all pass, and with one endpoint of ten actively UNHEALTHY and one
DRAINING (smaller available list, same per-call work). The three balancers run side by side
and are timed in interleaved rounds (``bench._timing.interleaved``); a ratio is the median
over the rounds of a row's sample over the baseline's from the same round
(``bench._timing.cost_per_round``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import statistics
import sys
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import poise_py as poise
from bench._acquire import acquire_loop, make_lb
from bench._timing import cost_per_round, interleaved, median_cost


async def passing(endpoint: poise.Endpoint) -> None:
    return None


async def failing_e0(endpoint: poise.Endpoint) -> None:
    if endpoint.id == "e0":
        raise ConnectionRefusedError("e0 is down")


async def main(iterations: int, rounds: int) -> None:
    size = 10
    # Long intervals: no probe runs while the loop is timed, as in production between probes.
    quiet: dict[str, Any] = {"interval": 3600.0, "unhealthy_interval": 1.0, "timeout": 1.0, "jitter": 0.0}
    rows = [
        ("no health check", make_lb(size), None),
        ("health check, all passing", make_lb(size, health_check=poise.HealthCheck(probe=passing, **quiet)), None),
        (
            "e0 unhealthy, e1 draining",
            make_lb(size, health_check=poise.HealthCheck(probe=failing_e0, unhealthy_threshold=1, **quiet)),
            "e1",
        ),
    ]
    async with contextlib.AsyncExitStack() as stack:
        for _, lb, _ in rows:
            await stack.enter_async_context(lb)
        await trio.sleep(0.05)  # the first probes run and classify
        for _, lb, drain in rows:
            if drain is not None:
                lb.set_status(drain, poise.AdminStatus.DRAINING)
        samples = await interleaved([functools.partial(acquire_loop, lb) for _, lb, _ in rows], iterations, rounds)
    print(f"{rounds} interleaved rounds of {iterations:,} calls per row")
    print(f"{'RoundRobin, 10 endpoints':<30}{'us/call':>10}{'x off':>8}")
    for (name, _, _), row in zip(rows, samples, strict=True):
        print(f"{name:<30}{median_cost(row) * 1e6:>10.3f}{statistics.median(cost_per_round(row, samples[0])):>8.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=20_000, help="calls per row per round")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    logging.getLogger("poise_py").setLevel(logging.ERROR)  # e0's expected "unhealthy" line
    trio.run(main, args.iterations, args.rounds)
