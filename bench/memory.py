"""Memory: bytes per endpoint, and whether memory stays flat under calls and churn.

Run: ``python bench/memory.py`` (Trio, ``tracemalloc``). Prints:

1. Bytes per endpoint of a running balancer at 10,000 and 100,000 endpoints, for
   RoundRobin, PowerOfTwoChoices with weights and ConsistentHash: the memory traced
   while the balancer starts and applies its snapshot (the endpoints' own ``Endpoint``
   values, which the caller built, are counted separately).
2. 1,000,000 ``async with lb.acquire(): pass`` over 10,000 endpoints with a 1% ``Delta``
   (100 leave, 100 new join) published every 10,000 calls: traced memory after every
   100,000 calls, relative to the first checkpoint, and the same run's growth per
   departed endpoint. Flat means the memory a call or a departed endpoint leaves
   behind is bounded.

``--calls`` and ``--size`` scale part 2 down for a quick look.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from pathlib import Path

import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import poise_py as poise


def pool(start: int, count: int, *, weighted: bool = False) -> list[poise.Endpoint]:
    return [
        poise.Endpoint(f"e{i}", address=("127.0.0.1", 10000 + i % 50000), weight=1 + i % 4 if weighted else 1)
        for i in range(start, start + count)
    ]


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def per_endpoint(policy: poise.Policy, size: int, *, weighted: bool, key: bool) -> tuple[float, float]:
    """(bytes per endpoint of the balancer, bytes per ``Endpoint`` value)."""
    start = traced()
    endpoints = pool(0, size, weighted=weighted)
    built = traced()
    lb = poise.LoadBalancer(poise.StaticDiscovery(endpoints), policy=policy, seed=1)
    async with lb:
        await lb.wait_ready(timeout=600)
        async with lb.acquire(key="k" if key else None):  # builds lazy structures (a Maglev table)
            pass
        running = traced()
    del lb
    return (running - built) / size, (built - start) / size


async def churn(size: int, calls: int, every: int, checkpoint: int) -> None:
    pub = poise.DiscoveryPublisher()
    lb = poise.LoadBalancer(discovery=pub.subscribe(), seed=1)
    step = size // 100
    oldest, newest, revision = 0, size, 1
    marks: list[tuple[int, int]] = []
    async with lb:
        pub.publish(poise.Snapshot(1, pool(0, size)))
        await lb.wait_ready(timeout=600)
        acquire = lb.acquire
        done = 0
        while done < calls:
            for _ in range(every):
                async with acquire():
                    pass
            done += every
            revision += 1
            pub.publish(
                poise.Delta(revision, removed=[f"e{i}" for i in range(oldest, oldest + step)], added=pool(newest, step))
            )
            oldest += step
            newest += step
            await trio.testing.wait_all_tasks_blocked()
            if done % checkpoint == 0:
                marks.append((done, traced()))
        assert lb.snapshot().size == size
    first_calls, first = marks[0]
    print(f"{'calls':>10}{'departed':>10}{'traced MB':>11}{'vs first':>10}")
    for n, mem in marks:
        print(f"{n:>10,}{n // every * step:>10,}{mem / 1e6:>11.2f}{mem / first:>10.3f}")
    last_calls, last = marks[-1]
    departed = (last_calls - first_calls) // every * step
    print(f"growth from the first checkpoint to the last: {(last - first) / 1e6:.2f} MB", end="")
    print(f" = {(last - first) / departed:.0f} bytes per departed endpoint ({departed:,} departed)")


async def main(size: int, calls: int) -> None:
    tracemalloc.start()
    print(f"{'policy':<34}{'endpoints':>11}{'bytes/endpoint':>16}{'+ Endpoint value':>18}")
    rows: list[tuple[str, poise.Policy, bool, bool]] = [
        ("RoundRobin", poise.RoundRobin(), False, False),
        ("PowerOfTwoChoices, weights 1-4", poise.PowerOfTwoChoices(), True, False),
        ("ConsistentHash", poise.ConsistentHash(), False, True),
    ]
    for name, policy, weighted, key in rows:
        for n in (10_000, 100_000):
            balancer, value = await per_endpoint(policy, n, weighted=weighted, key=key)
            print(f"{name:<34}{n:>11,}{balancer:>16,.0f}{value:>18,.0f}", flush=True)
    print()
    print(f"{calls:,} acquires over {size:,} endpoints, a 1% Delta every 10,000 calls:")
    await churn(size, calls, 10_000, max(10_000, calls // 10))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=1_000_000)
    args = parser.parse_args()
    if args.calls < 20_000:
        parser.error(f"--calls: at least 20,000 (two checkpoints of 10,000 calls to compare), got {args.calls:,}")
    if args.size < 100:
        parser.error(f"--size: at least 100 (each Delta replaces 1% of the pool), got {args.size:,}")
    trio.run(main, args.size, args.calls)
