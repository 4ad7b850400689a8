"""Discovery costs: applying a 1% change to a 10,000-endpoint pool, and selection while updates stream in.

Run: ``python bench/discovery.py`` (Trio). Prints milliseconds and ratios measured in this
one run:

1. Applying updates through a running balancer (the time from the source handing over
   an update to the balancer asking for the next one, so it is exactly the apply): a
   full build of 10,000 endpoints into an empty pool; then, on the live pool, the same
   1% change (100 endpoints leave, 100 new ones join) as a ``Snapshot`` (the diff reads
   every id, the work is per change) and as a ``Delta`` (O(changes)); each as a ratio of
   the full build. The same with an endpoint factory, whose calls are per change too.
   The Delta at 100,000 endpoints shows its cost does not grow with the pool.
2. ``async with lb.acquire(): pass`` over 10,000 endpoints, alone and with a 1% Delta
   published through a ``DiscoveryPublisher`` after every 1,000 calls; only the calls are
   timed, and the ratio says whether selection slowed while membership churned.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import poise_py as poise

CHURN = 0.01


def endpoint(i: int) -> poise.Endpoint:
    return poise.Endpoint(f"e{i}", address=("10.0.0.1", 10000 + i % 50000))


def pool(start: int, size: int) -> list[poise.Endpoint]:
    return [endpoint(i) for i in range(start, start + size)]


async def timed_source(updates: list[poise.Update], costs: list[float]) -> AsyncIterator[poise.Update]:
    """Hands over each update and records how long the balancer took before asking for the next."""
    for update in updates:
        start = time.perf_counter()
        yield update
        costs.append(time.perf_counter() - start)


async def apply_costs(updates: list[poise.Update], factory: Callable[[poise.Endpoint], object] | None) -> list[float]:
    costs: list[float] = []
    lb = poise.LoadBalancer(discovery=timed_source(updates, costs), endpoint_factory=factory)
    async with lb:
        await trio.testing.wait_all_tasks_blocked()
    assert len(costs) == len(updates)
    return costs


async def apply_bench(
    size: int, repeats: int, factory: Callable[[poise.Endpoint], object] | None, churn: int
) -> tuple[float, float, float]:
    """Best (full build, Snapshot, Delta) seconds for a pool of ``size`` where ``churn`` ids change."""
    full = snap = delta = float("inf")
    first = pool(0, size)
    changed = first[churn:] + pool(size, churn)
    for _ in range(repeats):
        costs = await apply_costs(
            [
                poise.Snapshot(1, first),
                poise.Snapshot(2, changed),
                poise.Delta(3, removed=[e.id for e in changed[:churn]], added=pool(2 * size, churn)),
            ],
            factory,
        )
        full, snap, delta = min(full, costs[0]), min(snap, costs[1]), min(delta, costs[2])
    return full, snap, delta


async def acquire_loop(lb: poise.LoadBalancer, n: int) -> float:
    acquire = lb.acquire
    start = time.perf_counter()
    for _ in range(n):
        async with acquire():
            pass
    return time.perf_counter() - start


async def streaming_bench(size: int, calls: int, batch: int, repeats: int) -> tuple[float, float, int]:
    """Best (us/call alone, us/call while updates stream), and the updates applied per run.

    Both runs have the same shape: ``calls`` acquires in batches of ``batch``, the
    event loop settling between batches; only in the second does a 1% Delta (a 100
    leave, 100 join) arrive through a publisher between batches. Only the calls are timed.
    """
    pub = poise.DiscoveryPublisher()
    lb = poise.LoadBalancer(discovery=pub.subscribe(), seed=1)
    churn = int(size * CHURN)
    oldest, newest, revision = 0, size, 1

    async def settle() -> None:
        await trio.testing.wait_all_tasks_blocked()

    async def churn_once() -> None:
        nonlocal oldest, newest, revision
        revision += 1
        removed = [f"e{i}" for i in range(oldest, oldest + churn)]
        pub.publish(poise.Delta(revision, removed=removed, added=pool(newest, churn)))
        oldest += churn
        newest += churn
        await trio.testing.wait_all_tasks_blocked()

    async def run(between: Callable[[], Awaitable[None]]) -> float:
        spent = 0.0
        for _ in range(calls // batch):
            spent += await acquire_loop(lb, batch)
            await between()
        return spent / calls

    alone = streaming = float("inf")
    async with lb:
        pub.publish(poise.Snapshot(1, pool(0, size)))
        await lb.wait_ready(timeout=60)
        for _ in range(repeats):
            alone = min(alone, await run(settle))
            streaming = min(streaming, await run(churn_once))
        assert lb.discovery_revision == revision
        assert lb.snapshot().size == size
    return alone * 1e6, streaming * 1e6, calls // batch


async def main(repeats: int, calls: int) -> None:
    size = 10_000
    print(f"applying updates to a {size:,}-endpoint pool (1% = {int(size * CHURN)} leave, as many join)")
    print(f"{'':<24}{'full build':>12}{'1% Snapshot':>14}{'1% Delta':>12}{'Snap/full':>11}{'Delta/full':>12}")

    def row(name: str, full: float, snap: float, delta: float) -> None:
        print(
            f"{name:<24}{full * 1e3:>10.2f}ms{snap * 1e3:>12.2f}ms{delta * 1e3:>10.3f}ms"
            f"{snap / full:>11.3f}{delta / full:>12.4f}"
        )

    churn = int(size * CHURN)
    full, snap, delta = await apply_bench(size, repeats, None, churn)
    row("no factory", full, snap, delta)
    full_f, snap_f, delta_f = await apply_bench(size, repeats, lambda e: object(), churn)
    row("with endpoint_factory", full_f, snap_f, delta_f)
    _, _, delta_big = await apply_bench(10 * size, max(1, repeats // 3), None, churn)
    print(f"the same {churn}-change Delta on {10 * size:,} endpoints: {delta_big * 1e3:.3f} ms", end="")
    print(f" ({delta_big / delta:.2f}x the cost on {size:,})")

    alone, streaming, updates = await streaming_bench(size, calls, 1000, 3)
    print(f"\nselection over {size:,} endpoints, PowerOfTwoChoices, {calls:,} calls")
    print(f"alone:                              {alone:.3f} us/call")
    print(f"with a 1% Delta every 1,000 calls:  {streaming:.3f} us/call", end="")
    print(f" ({updates} updates per run, between the batches)")
    print(f"ratio (streaming / alone):          {streaming / alone:.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=100_000)
    args = parser.parse_args()
    trio.run(main, args.repeats, args.calls)
