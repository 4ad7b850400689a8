"""Pick cost of every selection policy at 10, 1,000 and 100,000 endpoints.

Run: ``python bench/policies.py``. Everything is measured in this one run, on the pure
pool (no event loop), and printed as ratios to RoundRobin at 10 endpoints:

* ``pick``: the policy alone, ``picker.pick(candidates, loads, key)`` on the scope;
* ``call``: ``Pool.select`` + ``Pool.succeed``, the selection work of one call.

``x10`` is the 100,000-endpoint cost over the 10-endpoint cost. The one marked
O(log n) (weighted least request's EDF heap) is documented to grow with ``log n``; O(1)
policies must not grow more than 1.5x beyond the machine's *memory floor*: the
``floor`` row times a bare random read of one candidate (``candidates[random index]``,
no policy at all), which grows as soon as the pool's objects no longer fit in the CPU
cache; ``/floor`` is a policy's ``x10`` divided by the floor's. Endpoints carry weights
1 to 4 (so weighted paths are exercised) except in the rows marked "equal".
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import poise_py as poise
from poise_py._core._pool import Pool

SIZES = (10, 1_000, 100_000)
KEYS = [f"user-{i}" for i in range(4096)]


def make_pool(policy: poise.Policy, size: int, *, equal: bool) -> Pool:
    pool = Pool(poise.CircuitPolicy(), policy, random.Random(1))
    pool.apply(0.0, added=[poise.Endpoint(f"e{i}", weight=1 if equal else 1 + i % 4) for i in range(size)])
    state, ticket, now, _ = pool.select(0.0, KEYS[0])  # builds lazy structures (Maglev)
    pool.succeed(state, ticket, 0.0, now)
    return pool


def best(body: Callable[[int], None], iterations: int, repeats: int) -> float:
    """Best seconds per iteration over ``repeats`` runs."""
    fastest = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        body(iterations)
        fastest = min(fastest, (time.perf_counter() - start) / iterations)
    return fastest


def pick_loop(pool: Pool) -> Callable[[int], None]:
    scope = pool.router.tiers[0].local
    pick = scope.picker.pick
    candidates, loads, keys = scope.candidates, scope.loads, KEYS

    def body(n: int) -> None:
        for i in range(n):
            pick(candidates, loads, keys[i & 4095])

    return body


def floor_loop(pool: Pool) -> Callable[[int], None]:
    candidates = pool.router.tiers[0].local.candidates
    unit = random.Random(2).random
    n = len(candidates)

    def body(k: int) -> None:
        for _ in range(k):
            candidates[int(unit() * n)]

    return body


def call_loop(pool: Pool) -> Callable[[int], None]:
    select, succeed, keys = pool.select, pool.succeed, KEYS

    def body(n: int) -> None:
        for i in range(n):
            state, ticket, now, _ = select(0.0, keys[i & 4095])
            succeed(state, ticket, 0.0, now)

    return body


ROWS: list[tuple[str, poise.Policy, bool, str]] = [
    ("RoundRobin", poise.RoundRobin(), True, "O(1)"),
    ("Random", poise.Random(), True, "O(1)"),
    ("PowerOfTwoChoices equal", poise.PowerOfTwoChoices(), True, "O(1)"),
    ("PeakEwma", poise.PeakEwma(), True, "O(1)"),
    ("ConsistentHash", poise.ConsistentHash(), False, "O(1)"),
    ("ConsistentHash bounded", poise.ConsistentHash(balance_factor=1.25), False, "O(1)"),
    ("WeightedRandom", poise.WeightedRandom(), False, "O(1)"),
    ("WeightedRoundRobin", poise.WeightedRoundRobin(), False, "O(1)"),
    ("PowerOfTwoChoices weighted", poise.PowerOfTwoChoices(), False, "O(log n)"),
]


def main(iterations: int, repeats: int) -> int:
    floor = {}
    results: dict[str, dict[int, tuple[float, float]]] = {}
    for name, policy, equal, _ in ROWS:
        for size in SIZES:
            pool = make_pool(policy, size, equal=equal)
            if name == "RoundRobin":
                floor[size] = best(floor_loop(pool), iterations, repeats)
            pick = best(pick_loop(pool), iterations, repeats)
            call = best(call_loop(pool), iterations, repeats)
            results.setdefault(name, {})[size] = (pick, call)
    base_pick, base_call = results["RoundRobin"][10]
    print(f"RoundRobin at 10 endpoints: pick {base_pick * 1e6:.3f} us, call {base_call * 1e6:.3f} us")
    head = "".join(f"{f'pick@{s:,}':>13}" for s in SIZES) + "".join(f"{f'call@{s:,}':>13}" for s in SIZES)
    print(f"{'policy':<27}{'order':<9}{head}{'pick x10':>9}{'/floor':>7}{'call x10':>9}")
    floor_growth = floor[SIZES[-1]] / floor[SIZES[0]]
    cells = "".join(f"{floor[s] / base_pick:>13.2f}" for s in SIZES)
    print(f"{'floor: one random read':<27}{'-':<9}{cells}{'':>39}{floor_growth:>9.2f}")
    over = 0
    for name, _, _, order in ROWS:
        row = results[name]
        picks = "".join(f"{row[s][0] / base_pick:>13.2f}" for s in SIZES)
        calls = "".join(f"{row[s][1] / base_call:>13.2f}" for s in SIZES)
        grow_pick = row[SIZES[-1]][0] / row[SIZES[0]][0]
        grow_call = row[SIZES[-1]][1] / row[SIZES[0]][1]
        net = grow_pick / floor_growth
        flag = ""
        if order == "O(1)" and grow_pick > 1.5 and net > 1.5:
            flag = "  <- grows"
            over += 1
        print(f"{name:<27}{order:<9}{picks}{calls}{grow_pick:>9.2f}{net:>7.2f}{grow_call:>9.2f}{flag}")
    return over


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    growing = main(args.iterations, args.repeats)
    if growing:
        print(f"{growing} O(1) policies grew past 1.5x beyond the memory floor in this run")
