"""A/B the hot path of two checkouts: best per-call cost of ``async with lb.acquire(): pass``.

Run: ``python bench/ab.py /path/to/checkout-a /path/to/checkout-b [--rounds 4]``. Each
round runs each checkout in its own process (RoundRobin and PowerOfTwoChoices over 10
endpoints, Trio, 15 x 50,000 calls, best kept), alternating so machine load hits both
alike; it prints every run, then the best per checkout.
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


async def main():
    costs = []
    for policy in (poise.RoundRobin(), poise.PowerOfTwoChoices()):
        eps = [poise.Endpoint(f"e{i}") for i in range(10)]
        lb = poise.LoadBalancer(poise.StaticDiscovery(eps), policy=policy, clock=lambda: 0.0, seed=1)
        async with lb:
            best = 1e9
            for _ in range(15):
                t = time.perf_counter()
                await loop(lb, 50_000)
                best = min(best, (time.perf_counter() - t) / 50_000)
        costs.append(best * 1e6)
    print(*costs)


trio.run(main)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkouts", nargs=2)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    best: dict[str, list[float]] = {c: [float("inf"), float("inf")] for c in args.checkouts}
    for _ in range(args.rounds):
        for checkout in args.checkouts:
            out = subprocess.run(  # noqa: S603 - our own interpreter and script
                [sys.executable, "-c", CHILD, checkout], check=True, capture_output=True, text=True
            )
            rr, p2c = (float(x) for x in out.stdout.split())
            print(f"{checkout}: RoundRobin {rr:.3f} us, PowerOfTwoChoices {p2c:.3f} us")
            best[checkout] = [min(best[checkout][0], rr), min(best[checkout][1], p2c)]
    print("best:")
    for checkout, (rr, p2c) in best.items():
        print(f"  {checkout}: RoundRobin {rr:.3f} us, PowerOfTwoChoices {p2c:.3f} us")


if __name__ == "__main__":
    main()
