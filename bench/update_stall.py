"""How long applying one large discovery update stalls the event loop.

Run: ``python bench/update_stall.py [--endpoints 200000] [--backend trio|asyncio]``.

A running balancer takes four updates from a custom source while a ticker task sleeps
1 ms at a time and records the longest gap between its wakeups (the loop's worst stall):

1. ``first``: a ``Snapshot`` of N endpoints into an empty pool;
2. ``same``: the same N endpoints again as new, equal objects (a file read again): the
   diff compares every one;
3. ``replace``: a ``Snapshot`` of N other endpoints (N leave, N join);
4. ``delta``: a ``Delta`` adding N endpoints to the N live ones.

Each is run twice in this one run: planned and built in one block each (``STEP`` set
past any update's size) and in bounded steps of ``STEP`` endpoints with the loop running
between them (what the balancer does). The commit, which makes the update live for every
permit at once, is one block in both. Prints the longest stall of each, the apply time,
and the ratio of the stalls. Only the apply is measured: the source builds its endpoints
first.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import poise_py as poise
from poise_py._core import _directory

ONE_STEP = sys.maxsize


def endpoints(start: int, count: int) -> list[poise.Endpoint]:
    return [
        poise.Endpoint(f"node-{i}", address=("10.0.0.1", 1024 + i % 60000), metadata={"rack": f"r{i % 97}"})
        for i in range(start, start + count)
    ]


def scenarios(n: int) -> list[tuple[str, Callable[[], list[poise.Update]]]]:
    """Each scenario's updates: the ones before the measured last one set the pool up."""
    return [
        ("first", lambda: [poise.Snapshot(1, endpoints(0, n))]),
        ("same", lambda: [poise.Snapshot(1, endpoints(0, n)), poise.Snapshot(2, endpoints(0, n))]),
        ("replace", lambda: [poise.Snapshot(1, endpoints(0, n)), poise.Snapshot(2, endpoints(n, n))]),
        ("delta", lambda: [poise.Snapshot(1, endpoints(0, n)), poise.Delta(2, added=endpoints(n, n))]),
    ]


def set_step(step: int) -> None:
    _directory.STEP = step  # planning and building both read the bound from here


async def measure(updates: list[poise.Update]) -> tuple[float, float]:
    """The longest loop stall while the last update is applied, and how long the apply took.

    The ticker notes every wakeup; a stall is a gap between two wakeups, and the gaps that
    overlap the apply count (a gap the apply ends inside is counted whole, so an apply
    that never lets the ticker run reads as one stall as long as itself).
    """
    start = end = 0.0
    applied = anyio.Event()
    wakeups: list[float] = []

    async def source() -> AsyncIterator[poise.Update]:
        nonlocal start, end
        for update in updates[:-1]:
            yield update
        gc.collect()  # the set-up's garbage is not the update's
        await anyio.sleep(0.05)  # the ticker settles after the set-up
        start = time.perf_counter()
        yield updates[-1]
        end = time.perf_counter()  # asked for the next: the last one is applied
        applied.set()
        await anyio.sleep_forever()

    async def ticker() -> None:
        while True:
            wakeups.append(time.perf_counter())
            await anyio.sleep(0.001)

    lb = poise.LoadBalancer(discovery=source())
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        async with lb:
            await applied.wait()
            await anyio.sleep(0.01)  # the ticker wakes once after the apply: the last gap closes
            assert lb.discovery_revision == updates[-1].revision
        tg.cancel_scope.cancel()
    worst = max(
        (later - earlier for earlier, later in itertools.pairwise(wakeups) if later > start and earlier < end),
        default=0.0,
    )
    return worst, end - start


async def main(n: int) -> None:
    print(f"one update of {n:,} endpoints; longest event-loop stall while it is applied")
    print(f"{'update':<8} {'one step':>18} {'in steps':>18} {'ratio':>7}")
    for name, make in scenarios(n):
        results = []
        for step in (ONE_STEP, _directory.STEP):
            set_step(step)
            try:
                results.append(await measure(make()))
            finally:
                set_step(STEP)
            gc.collect()
        (before, before_took), (after, after_took) = results
        print(
            f"{name:<8} {before * 1e3:6.0f} ms ({before_took:4.2f} s) {after * 1e3:6.0f} ms ({after_took:4.2f} s)"
            f" {after / before:6.2f}x"
        )


STEP = _directory.STEP

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoints", type=int, default=200_000)
    parser.add_argument("--backend", choices=("trio", "asyncio"), default="trio")
    args = parser.parse_args()
    anyio.run(main, args.endpoints, backend=args.backend)
