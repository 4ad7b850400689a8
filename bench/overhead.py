"""Per-call cost of ``async with lb.acquire(): pass`` against a bare no-op ``async with``.

Run: ``python bench/overhead.py``. Prints microseconds and ratios measured in this one
process: each policy at 10 and 10,000 endpoints, as a multiple of the bare context
manager (timed on the same event loop), and the 10,000-endpoint cost as a multiple of
the 10-endpoint cost, on Trio and then on asyncio; then (Trio) the cost of recording
outcomes with rate windows enabled, as a multiple of the default circuit's cost; then the
cost of load control (slow start, concurrency caps, adaptive limits: docs/overload.md) at
10 endpoints, as a multiple of the same policy with it off (issue 36's goal: slow start
and adaptive limits together at most 1.3x); then ``lb.call`` on a no-op function, plain and
with each of its options, as a multiple of the same call written by hand around
``acquire`` (issue 39's goal: ``lb.call`` without hedge or wait unchanged). Every
row's balancer (or peer) runs side by side with the others, and they are timed in
interleaved rounds, each sample against a bare ``async with`` timed right before it; a
figure is the median over the rounds, so a change of the machine's load falls on every
row alike.
``--backend trio`` or ``--backend asyncio`` runs only the one; ``--peers`` adds the
breaker libraries that are installed (``bench/peers.py``), timed in the same run. The
first line says which build is measured: the pure-Python install or the compiled one
(``poise.COMPILED``; see docs/performance.md for how to build it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import statistics
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import poise_py as poise
from bench._acquire import acquire_loop
from bench._timing import interleaved, median_cost, median_over_bare, per_round
from bench.peers import PEERS


def make_lb(
    policy: poise.Policy,
    size: int,
    circuit: poise.CircuitPolicy | None = None,
    *,
    max_in_flight: int | None = None,
    concurrency: poise.AdaptiveConcurrency | None = None,
    slow_start: poise.SlowStart | None = None,
) -> poise.LoadBalancer:
    eps = [poise.Endpoint(f"e{i}", address=("127.0.0.1", 10000 + i % 50000)) for i in range(size)]
    return poise.LoadBalancer(
        poise.StaticDiscovery(eps),
        policy=policy,
        circuit=circuit,
        seed=1,
        max_in_flight=max_in_flight,
        concurrency=concurrency,
        slow_start=slow_start,
    )


async def _noop(endpoint: poise.Endpoint) -> None:
    return None


async def by_hand_loop(lb: poise.LoadBalancer, n: int) -> None:
    acquire = lb.acquire
    for _ in range(n):
        async with acquire() as permit:
            await _noop(permit.endpoint)


def call_loop(**options: object) -> Callable[[poise.LoadBalancer, int], Awaitable[None]]:
    async def loop(lb: poise.LoadBalancer, n: int) -> None:
        call = lb.call
        for _ in range(n):
            await call(_noop, **options)  # type: ignore[arg-type]

    return loop


CALLS: list[tuple[str, Callable[[poise.LoadBalancer, int], Awaitable[None]]]] = [
    ("acquire, by hand", by_hand_loop),
    ("lb.call", call_loop()),
    ("lb.call, wait=1 (eligible)", call_loop(wait=1.0)),
    ("lb.call, hedge (never fires)", call_loop(hedge=poise.Hedge(delay=60.0))),
    ("lb.call, backoff + deadline", call_loop(backoff=poise.RetryBackoff(), deadline=60.0)),
]
"""``lb.call`` rows (RoundRobin, 10 endpoints); the first, the same call written by hand, is the baseline."""

POLICIES: list[tuple[str, Callable[[], poise.Policy]]] = [
    ("RoundRobin", poise.RoundRobin),
    ("PowerOfTwoChoices", poise.PowerOfTwoChoices),
]
SIZES = (10, 10_000)
CIRCUITS: list[tuple[str, Callable[[], poise.CircuitPolicy]]] = [
    ("default (consecutive)", poise.CircuitPolicy),
    ("failure rate, CountWindow(100)", lambda: poise.CircuitPolicy(failure_rate=0.5)),
    ("failure rate, TimeWindow(30s)", lambda: poise.CircuitPolicy(failure_rate=0.5, window=poise.TimeWindow())),
    (
        "+ slow-call rate, TimeWindow",
        lambda: poise.CircuitPolicy(
            failure_rate=0.5, slow_call_rate=0.5, slow_call_duration=1.0, window=poise.TimeWindow()
        ),
    ),
]

LOADS: list[tuple[str, Callable[[poise.Policy], poise.LoadBalancer]]] = [
    ("off", lambda policy: make_lb(policy, 10)),
    ("max_in_flight=1000", lambda policy: make_lb(policy, 10, max_in_flight=1000)),
    ("SlowStart()", lambda policy: make_lb(policy, 10, slow_start=poise.SlowStart())),
    (
        "AdaptiveConcurrency(Gradient2())",
        lambda policy: make_lb(policy, 10, concurrency=poise.AdaptiveConcurrency(poise.Gradient2())),
    ),
    (
        "AdaptiveConcurrency(AIMD())",
        lambda policy: make_lb(policy, 10, concurrency=poise.AdaptiveConcurrency(poise.AIMD())),
    ),
    (
        "SlowStart() + Gradient2()",
        lambda policy: make_lb(
            policy, 10, slow_start=poise.SlowStart(), concurrency=poise.AdaptiveConcurrency(poise.Gradient2())
        ),
    ),
]
"""Load-control rows, each timed per policy at 10 endpoints; the first (all off) is the baseline.

A static pool's first members start together, so no endpoint ramps here: the slow-start
rows measure what slow start costs every call while nothing ramps (a ramp lasts a window).
"""
LOAD_GOAL = 1.3
"""Issue 36: slow start and adaptive limits on cost at most this multiple of them off."""


async def main(
    iterations: int, rounds: int, backend: str, *, windows: bool, peers: bool, load: bool = True, calls: bool = True
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        bodies: list[Callable[[int], Awaitable[None]]] = []
        for _, policy in POLICIES:
            for size in SIZES:
                lb = await stack.enter_async_context(make_lb(policy(), size))
                bodies.append(functools.partial(acquire_loop, lb))
        present: list[tuple[str, int | None]] = []
        for name, make in PEERS if peers else []:
            body = await make()
            present.append((name, None if body is None else len(bodies)))
            if body is not None:
                bodies.append(body)
        first_circuit = len(bodies)
        for _, circuit in CIRCUITS if windows else []:
            lb = await stack.enter_async_context(make_lb(poise.RoundRobin(), 10, circuit()))
            bodies.append(functools.partial(acquire_loop, lb))
        first_load = len(bodies)
        for _, policy in POLICIES if load else []:
            for _, balancer in LOADS:
                lb = await stack.enter_async_context(balancer(policy()))
                bodies.append(functools.partial(acquire_loop, lb))
        first_call = len(bodies)
        for _, loop in CALLS if calls else []:
            lb = await stack.enter_async_context(make_lb(poise.RoundRobin(), 10))
            bodies.append(functools.partial(loop, lb))
        samples = await interleaved(bodies, iterations, rounds)

    base = statistics.median(b for body in samples for _, b in body)
    build = "compiled" if poise.COMPILED else "pure Python"
    print(f"{backend}, {build} build: bare async with: {base * 1e6:.3f} us")
    print(f"   {rounds} interleaved rounds of {iterations:,} calls per row, each against a bare timed just before it")
    print(f"{'policy':<22}{'endpoints':>10}{'us/call':>10}{'x bare':>9}{'x 10 eps':>10}")
    for p, (name, _) in enumerate(POLICIES):
        small = samples[p * len(SIZES)]
        for s, size in enumerate(SIZES):
            row = samples[p * len(SIZES) + s]
            growth = statistics.median(per_round(row, small))
            print(f"{name:<22}{size:>10}{median_cost(row) * 1e6:>10.3f}{median_over_bare(row):>9.2f}{growth:>10.2f}")
    if peers:
        print(f"{'peer (one breaker, no selection)':<36}{'us/call':>10}{'x bare':>9}")
        for name, index in present:
            if index is None:
                print(f"{name:<36}{'not installed (or not this backend)':>19}")
                continue
            row = samples[index]
            print(f"{name:<36}{median_cost(row) * 1e6:>10.3f}{median_over_bare(row):>9.2f}")
    if windows:
        print()
        print(f"{'circuit (RoundRobin, 10 eps)':<34}{'us/call':>10}{'x bare':>9}{'x default':>11}")
        default = samples[first_circuit]
        for k, (name, _) in enumerate(CIRCUITS):
            row = samples[first_circuit + k]
            ratio = statistics.median(per_round(row, default))
            print(f"{name:<34}{median_cost(row) * 1e6:>10.3f}{median_over_bare(row):>9.2f}{ratio:>11.2f}")
    if load:
        print()
        print(f"load control, 10 eps (goal: slow start + adaptive at most {LOAD_GOAL}x off)")
        print(f"{'policy':<19}{'load knobs':<34}{'us/call':>10}{'x bare':>9}{'x off':>8}")
        for p, (policy_name, _) in enumerate(POLICIES):
            first = first_load + p * len(LOADS)
            off = samples[first]
            for k, (name, _) in enumerate(LOADS):
                row = samples[first + k]
                ratio = statistics.median(per_round(row, off))
                cost = median_cost(row) * 1e6
                print(f"{policy_name:<19}{name:<34}{cost:>10.3f}{median_over_bare(row):>9.2f}{ratio:>8.2f}")
    if calls:
        print()
        print("lb.call on a no-op (RoundRobin, 10 eps), as a multiple of the same call by hand around acquire")
        print(f"{'call':<34}{'us/call':>10}{'x bare':>9}{'x by hand':>11}")
        by_hand = samples[first_call]
        for k, (name, _) in enumerate(CALLS):
            row = samples[first_call + k]
            ratio = statistics.median(per_round(row, by_hand))
            print(f"{name:<34}{median_cost(row) * 1e6:>10.3f}{median_over_bare(row):>9.2f}{ratio:>11.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=20_000, help="calls per row per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--backend", choices=["trio", "asyncio", "both"], default="both")
    parser.add_argument("--peers", action="store_true", help="also time the installed breaker libraries")
    parser.add_argument("--no-load", action="store_true", help="skip the load-control rows")
    parser.add_argument("--no-calls", action="store_true", help="skip the lb.call rows")
    args = parser.parse_args()
    sections = {"peers": args.peers, "load": not args.no_load, "calls": not args.no_calls}
    if args.backend in ("trio", "both"):
        trio.run(functools.partial(main, args.iterations, args.rounds, "trio", windows=True, **sections))
    if args.backend in ("asyncio", "both"):
        print()
        asyncio.run(main(args.iterations, args.rounds, "asyncio", windows=False, **sections))
