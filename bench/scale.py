"""How every exported selection policy scales from 10 to 100,000 endpoints, end to end.

Run: ``python bench/scale.py`` (Trio). For each policy, weighted (weights 1 to 4) and
with equal weights, a balancer over 10 and over 100,000 endpoints is timed on ``async
with lb.acquire(key=...): pass`` (the whole call: selection, permit, outcome recording).
Every sample is normalised by a bare no-op ``async with`` timed right before it in the
same process, so a change of machine load between samples cancels out; the figure for a
size is the median of those bare-normalised samples. The sizes' balancers run side by
side and are sampled in interleaved rounds (each size once a round, in a rotating order),
and ``x10`` is the median over the rounds of the 100,000-endpoint sample over the
10-endpoint one, so a change of the machine's load between rounds falls on both. The
target is ``x10 <= 1.5`` for every policy (O(log n) policies are marked; see
docs/performance.md). The first ``floor`` row is a context manager that only picks a
random object of as many and counts on it: how much the machine's memory alone grows the
cost of a random pick. The second compares two random counts of a compact list and counts
on the lesser one's object: the same for a two-choice pick (PowerOfTwoChoices).

``--sizes 10,1000,10000,100000`` adds intermediate sizes (the log n evidence for the
policies that are O(log n)). ``--only NAME`` runs the rows whose name contains NAME
(``--only floor``: the floors).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import random
import statistics
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import poise_py as poise
from bench._timing import interleaved, median_over_bare, per_round

KEYS = [f"user-{i}" for i in range(1 << 16)]


class _Item:
    __slots__ = ("count", "pad1", "pad2", "pad3", "pad4", "pad5")

    def __init__(self) -> None:
        self.count = 0


class Floor:
    """A floor for random picks: a context manager that picks a random object and counts on it.

    No selection policy, no circuit, no permit: what a uniform random pick among ``size``
    small objects costs on this machine, which grows once they leave the CPU cache.
    """

    __slots__ = ("_item", "_items", "_unit")

    def __init__(self, size: int) -> None:
        self._items = [_Item() for _ in range(size)]
        self._unit = random.Random(1).random
        self._item = self._items[0]

    async def __aenter__(self) -> Floor:
        items = self._items
        item = self._item = items[int(self._unit() * len(items))]
        item.count += 1
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._item.count -= 1


class TwoChoicesFloor(Floor):
    """The floor for a two-choice pick: two random counts compared, and the lesser one's object counted.

    What power of two choices cannot avoid at any pool size: two uniform random reads of a
    compact list of counts (a read of the objects themselves would cost a trip to memory
    each), then the write to the object it picked and to its count.
    """

    __slots__ = ("_counts", "_pos")

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self._counts = [0] * size
        self._pos = 0

    async def __aenter__(self) -> TwoChoicesFloor:
        counts = self._counts
        unit = self._unit
        first = int(unit() * len(counts))
        second = int(unit() * len(counts))
        pos = self._pos = first if counts[first] <= counts[second] else second
        counts[pos] += 1
        item = self._item = self._items[pos]
        item.count += 1
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._counts[self._pos] -= 1
        self._item.count -= 1


FLOORS: list[tuple[str, type[Floor]]] = [
    ("floor: a random object, counted", Floor),
    ("floor: two random counts, one counted", TwoChoicesFloor),
]


def floor_loop(size: int, kind: type[Floor] = Floor) -> Callable[[int], Awaitable[None]]:
    cm = kind(size)

    async def body(n: int) -> None:
        for _ in range(n):
            async with cm:
                pass

    return body


def acquire_loop(lb: poise.LoadBalancer, *, keyed: bool) -> Callable[[int], Awaitable[None]]:
    acquire = lb.acquire
    keys = KEYS

    async def unkeyed(n: int) -> None:
        for _ in range(n):
            async with acquire():
                pass

    async def with_keys(n: int) -> None:
        for i in range(n):
            async with acquire(key=keys[i & 0xFFFF]):
                pass

    return with_keys if keyed else unkeyed


async def sized(
    bodies: list[Callable[[int], Awaitable[None]]], iterations: int, samples: int
) -> tuple[list[float], float]:
    """Each body's median over ``samples`` of its cost over a bare ``async with`` timed just before
    it, and the median over the rounds of the last body's sample over the first's (``x10``).

    The bodies, one per size, are timed in interleaved rounds (``bench._timing.interleaved``),
    so ``x10`` is a ratio of samples taken side by side rather than of two medians taken
    minutes apart.
    """
    rows = await interleaved(bodies, iterations, samples)
    return [median_over_bare(row) for row in rows], statistics.median(per_round(rows[-1], rows[0]))


ROWS: list[tuple[str, Callable[[], poise.Policy], bool, bool, str]] = [
    # name, policy, weighted endpoints, keyed calls, order
    ("RoundRobin", poise.RoundRobin, False, False, "O(1)"),
    ("Random", poise.Random, False, False, "O(1)"),
    ("PowerOfTwoChoices", poise.PowerOfTwoChoices, False, False, "O(1)"),
    ("PeakEwma", poise.PeakEwma, False, False, "O(1)"),
    ("ConsistentHash", poise.ConsistentHash, False, True, "O(1)"),
    ("WeightedRandom", poise.WeightedRandom, False, False, "O(1)"),
    ("WeightedRandom, weights 1-4", poise.WeightedRandom, True, False, "O(1)"),
    ("WeightedRoundRobin", poise.WeightedRoundRobin, False, False, "O(1)"),
    ("WeightedRoundRobin, weights 1-4", poise.WeightedRoundRobin, True, False, "O(log k)"),
    ("PowerOfTwoChoices, weights 1-4", poise.PowerOfTwoChoices, True, False, "O(log n)"),
    ("ConsistentHash, weights 1-4", poise.ConsistentHash, True, True, "O(1)"),
    ("ConsistentHash bounded, weights 1-4", lambda: poise.ConsistentHash(balance_factor=1.25), True, True, "O(1)"),
]


def make_lb(policy: poise.Policy, size: int, *, weighted: bool) -> poise.LoadBalancer:
    eps = [
        poise.Endpoint(f"e{i}", address=("127.0.0.1", 10000 + i % 50000), weight=1 + i % 4 if weighted else 1)
        for i in range(size)
    ]
    return poise.LoadBalancer(poise.StaticDiscovery(eps), policy=policy, seed=1)


async def main(sizes: list[int], iterations: int, samples: int, only: str | None) -> None:
    print(f"median of {samples} bare-normalised samples of {iterations:,} calls each, the sizes interleaved")
    head = "".join(f"{f'@{s:,}':>10}" for s in sizes)
    print(f"{'policy':<38}{'order':<10}{head}{'x10':>8}")
    for name, kind in FLOORS:
        if only is not None and only.lower() not in name.lower():
            continue
        cells, growth = await sized([floor_loop(size, kind) for size in sizes], iterations, samples)
        print(f"{name:<38}{'-':<10}{''.join(f'{c:>10.2f}' for c in cells)}{growth:>8.2f}", flush=True)
    for name, make, weighted, keyed, order in ROWS:
        if only is not None and only.lower() not in name.lower():
            continue
        async with contextlib.AsyncExitStack() as stack:
            bodies = []
            for size in sizes:
                lb = await stack.enter_async_context(make_lb(make(), size, weighted=weighted))
                bodies.append(acquire_loop(lb, keyed=keyed))
            cells, growth = await sized(bodies, iterations, samples)
        del bodies, lb
        gc.collect()
        flag = "  <- over 1.5x" if growth > 1.5 else ""
        print(f"{name:<38}{order:<10}{''.join(f'{c:>10.2f}' for c in cells)}{growth:>8.2f}{flag}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,100000")
    parser.add_argument("--iterations", type=int, default=20_000)
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--only", default=None)
    args = parser.parse_args()
    trio.run(main, [int(s) for s in args.sizes.split(",")], args.iterations, args.samples, args.only)
