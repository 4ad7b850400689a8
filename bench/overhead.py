"""Per-call cost of ``async with lb.acquire(): pass`` against a bare no-op ``async with``.

Run: ``python bench/overhead.py``. Prints microseconds and ratios measured in this one
process: each policy at 10 and 10,000 endpoints, as a multiple of the bare context
manager (timed on the same event loop), and the 10,000-endpoint cost as a multiple of
the 10-endpoint cost, on Trio and then on asyncio; then (Trio) the cost of recording
outcomes with rate windows enabled, as a multiple of the default circuit's cost.
``--backend trio`` or ``--backend asyncio`` runs only the one; ``--peers`` adds the
breaker libraries that are installed (``bench/peers.py``), timed in the same run. The
first line says which build is measured: the pure-Python install or the compiled one
(``poise.COMPILED``; see docs/performance.md for how to build it).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import poise_py as poise
from bench._timing import bare, best_of
from bench.peers import PEERS


def make_lb(policy: poise.Policy, size: int, circuit: poise.CircuitPolicy | None = None) -> poise.LoadBalancer:
    eps = [poise.Endpoint(f"e{i}", address=("127.0.0.1", 10000 + i % 50000)) for i in range(size)]
    return poise.LoadBalancer(poise.StaticDiscovery(eps), policy=policy, circuit=circuit, seed=1)


async def acquire_loop(lb: poise.LoadBalancer, n: int) -> None:
    acquire = lb.acquire
    for _ in range(n):
        async with acquire():
            pass


async def main(iterations: int, backend: str, *, windows: bool, peers: bool) -> None:
    base = await best_of(bare, iterations)
    build = "compiled" if poise.COMPILED else "pure Python"
    print(f"{backend}, {build} build: bare async with: {base * 1e6:.3f} us")
    print(f"{'policy':<22}{'endpoints':>10}{'us/call':>10}{'x bare':>9}{'x 10 eps':>10}")
    policies: list[tuple[str, poise.Policy]] = [
        ("RoundRobin", poise.RoundRobin()),
        ("PowerOfTwoChoices", poise.PowerOfTwoChoices()),
    ]
    for name, policy in policies:
        small = 0.0
        for size in (10, 10_000):
            lb = make_lb(policy, size)
            async with lb:
                cost = await best_of(functools.partial(acquire_loop, lb), iterations)
            small = small or cost
            print(f"{name:<22}{size:>10}{cost * 1e6:>10.3f}{cost / base:>9.2f}{cost / small:>10.2f}")
    if peers:
        print(f"{'peer (one breaker, no selection)':<36}{'us/call':>10}{'x bare':>9}")
        for name, make in PEERS:
            body = await make()
            if body is None:
                print(f"{name:<36}{'not installed (or not this backend)':>19}")
                continue
            cost = await best_of(body, iterations)
            print(f"{name:<36}{cost * 1e6:>10.3f}{cost / base:>9.2f}")
    if not windows:
        return

    print()
    print(f"{'circuit (RoundRobin, 10 eps)':<34}{'us/call':>10}{'x bare':>9}{'x default':>11}")
    circuits: list[tuple[str, poise.CircuitPolicy]] = [
        ("default (consecutive)", poise.CircuitPolicy()),
        ("failure rate, CountWindow(100)", poise.CircuitPolicy(failure_rate=0.5)),
        ("failure rate, TimeWindow(30s)", poise.CircuitPolicy(failure_rate=0.5, window=poise.TimeWindow())),
        (
            "+ slow-call rate, TimeWindow",
            poise.CircuitPolicy(
                failure_rate=0.5, slow_call_rate=0.5, slow_call_duration=1.0, window=poise.TimeWindow()
            ),
        ),
    ]
    default = 0.0
    for name, circuit in circuits:
        lb = make_lb(poise.RoundRobin(), 10, circuit)
        async with lb:
            cost = await best_of(functools.partial(acquire_loop, lb), iterations)
        default = default or cost
        print(f"{name:<34}{cost * 1e6:>10.3f}{cost / base:>9.2f}{cost / default:>11.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--backend", choices=["trio", "asyncio", "both"], default="both")
    parser.add_argument("--peers", action="store_true", help="also time the installed breaker libraries")
    args = parser.parse_args()
    if args.backend in ("trio", "both"):
        trio.run(functools.partial(main, args.iterations, "trio", windows=True, peers=args.peers))
    if args.backend in ("asyncio", "both"):
        print()
        asyncio.run(main(args.iterations, "asyncio", windows=False, peers=args.peers))
