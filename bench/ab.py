"""A/B the hot path of two checkouts: best per-call cost of ``async with lb.acquire(): pass``.

Run: ``python bench/ab.py /path/to/checkout-a /path/to/checkout-b [--rounds 4]``. Each
round runs each checkout in its own process (RoundRobin and PowerOfTwoChoices over 10
endpoints, Trio, 15 x 50,000 calls, best kept, and a bare no-op ``async with`` timed the
same way in the same process), alternating so machine load hits both alike; it prints
every run, then the best per checkout, in microseconds and as a multiple of the bare.

Against an older release, check it out beside this one (``git worktree add /tmp/old
<commit>``): the two run on today's machine and interpreter, so their multiples compare
where figures recorded on another day do not (docs/performance.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CHILD = r"""
import sys, time
root = sys.argv[1]
sys.path.insert(0, root)
import trio
import poise_py as poise
assert poise.__file__.startswith(root), poise.__file__


async def loop(lb, n):
    acquire = lb.acquire
    for _ in range(n):
        async with acquire():
            pass


class Noop:  # bench/_timing.py's baseline (an older checkout may not have it)
    __slots__ = ()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return None


async def bare(n):
    cm = Noop()
    for _ in range(n):
        async with cm:
            pass


async def best_of(body, *args):
    best = 1e9
    for _ in range(15):
        t = time.perf_counter()
        await body(*args, 50_000)
        best = min(best, (time.perf_counter() - t) / 50_000)
    return best * 1e6


async def main():
    costs = []
    for policy in (poise.RoundRobin(), poise.PowerOfTwoChoices()):
        eps = [poise.Endpoint(f"e{i}") for i in range(10)]
        lb = poise.LoadBalancer(poise.StaticDiscovery(eps), policy=policy, clock=lambda: 0.0, seed=1)
        async with lb:
            costs.append(await best_of(loop, lb))
    costs.append(await best_of(bare))
    print(*costs)


trio.run(main)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkouts", nargs=2)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    inf = float("inf")
    best: dict[str, list[float]] = {c: [inf, inf, inf] for c in args.checkouts}
    for _ in range(args.rounds):
        for checkout in args.checkouts:
            out = subprocess.run(  # noqa: S603 - our own interpreter and script
                [sys.executable, "-c", CHILD, checkout], check=True, capture_output=True, text=True
            )
            costs = [float(x) for x in out.stdout.split()]
            print(f"{checkout}: {_line(*costs)}")
            best[checkout] = [min(b, c) for b, c in zip(best[checkout], costs, strict=True)]
    print("best:")
    for checkout, costs in best.items():
        print(f"  {checkout}: {_line(*costs)}")


def _line(rr: float, p2c: float, bare: float) -> str:
    return (
        f"RoundRobin {rr:.3f} us ({rr / bare:.2f}x bare), "
        f"PowerOfTwoChoices {p2c:.3f} us ({p2c / bare:.2f}x bare), bare {bare:.3f} us"
    )


if __name__ == "__main__":
    main()
