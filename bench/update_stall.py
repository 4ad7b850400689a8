"""How long applying one large discovery update stalls the event loop.

Run: ``python bench/update_stall.py [--endpoints 200000] [--backend trio|asyncio]``.

A running balancer takes four updates from a custom source while a ticker task sleeps
1 ms at a time and records the longest gap between its wakeups (the loop's worst stall):

1. ``first``: a ``Snapshot`` of N endpoints into an empty pool;
2. ``same``: the same N endpoints again as new, equal objects (a file read again): the
   diff compares every one;
3. ``replace``: a ``Snapshot`` of N other endpoints (N leave, N join);
4. ``delta``: a ``Delta`` adding N endpoints to the N live ones.

Each is run three ways in this one run: planned, built and committed in one block each
(``STEP`` set past any update's size: what the balancer did before it worked in steps);
in bounded steps of ``STEP`` endpoints with the loop running between them (what the
balancer does); and the same after the application froze its heap once the first pool
was loaded (``gc.freeze()``, as large Python services do: the collector's full passes then
skip what was there before). The commit, which makes the update live for every permit at
once, is one block in all three.

CPython's collector runs a full pass whenever the objects that survived since the last
one reach a quarter of the heap, and such a pass visits the whole heap: about 1.2 million
objects per 100,000 endpoints with both pools alive here (the source's endpoints and the
balancer's records). The pass stalls the loop wherever it falls, so each row also prints
the longest collector pause inside the update, and the longest stall once collector pauses
are taken out (the balancer's own work: planning and building steps, the commit, the fold
of the departed endpoints' counters). Only the apply is measured: the source builds its
endpoints first.
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


class Pauses:
    """The collector's pauses, as ``(start, end)`` on ``time.perf_counter()``, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.spans.append((self._start, time.perf_counter()))

    def inside(self, start: float, end: float) -> float:
        """Collector time within ``[start, end]``."""
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in self.spans)


async def measure(updates: list[poise.Update], *, freeze: bool) -> tuple[float, float, float, float]:
    """The last update's longest loop stall, the longest collector pause in the update, the
    longest stall less its collector time, and how long the apply took.

    The ticker notes every wakeup; a stall is a gap between two wakeups, and the gaps that
    overlap the apply count (a gap the apply ends inside is counted whole, so an apply
    that never lets the ticker run reads as one stall as long as itself).
    """
    start = end = 0.0
    applied = anyio.Event()
    wakeups: list[float] = []
    pauses = Pauses()

    async def source() -> AsyncIterator[poise.Update]:
        nonlocal start, end
        for update in updates[:-1]:
            yield update
        gc.collect()  # the set-up's garbage is not the update's
        if freeze:
            gc.freeze()
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
    gc.callbacks.append(pauses)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            async with lb:
                await applied.wait()
                await anyio.sleep(0.3)  # the ticker wakes after the apply (and the fold that follows it)
                assert lb.discovery_revision == updates[-1].revision
            tg.cancel_scope.cancel()
    finally:
        gc.callbacks.remove(pauses)
        if freeze:
            gc.unfreeze()
    gaps = [
        (earlier, later) for earlier, later in itertools.pairwise(wakeups) if later > start and earlier < end + 0.25
    ]
    worst = max((later - earlier for earlier, later in gaps), default=0.0)
    collector = max((b - a for a, b in pauses.spans if b > start and a < end + 0.25), default=0.0)
    own = max((later - earlier - pauses.inside(earlier, later) for earlier, later in gaps), default=0.0)
    return worst, collector, own, end - start


async def main(n: int) -> None:
    print(f"one update of {n:,} endpoints; longest event-loop stall while it is applied (and the fold after it)")
    print("  stall: the longest gap; gc: the longest collector pause; own: the longest gap less collector time")
    ways = (
        ("one step", ONE_STEP, False),
        ("in steps", _directory.STEP, False),
        ("steps, heap frozen", _directory.STEP, True),
    )
    print(f"{'update':<8} " + " ".join(f"{name:>29}" for name, _, _ in ways))
    for name, make in scenarios(n):
        cells = []
        for _, step, freeze in ways:
            set_step(step)
            try:
                worst, collector, own, took = await measure(make(), freeze=freeze)
            finally:
                set_step(STEP)
            gc.collect()
            cells.append(f"{worst * 1e3:5.0f} (gc {collector * 1e3:3.0f}, own {own * 1e3:3.0f}) ms {took:4.2f} s")
        print(f"{name:<8} " + " ".join(f"{cell:>29}" for cell in cells))


STEP = _directory.STEP

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoints", type=int, default=200_000)
    parser.add_argument("--backend", choices=("trio", "asyncio"), default="trio")
    args = parser.parse_args()
    anyio.run(main, args.endpoints, backend=args.backend)
