"""Helpers for the selection and routing suites: a pure pool driven without an event loop."""

from __future__ import annotations

import collections
import random
from collections.abc import Callable, Hashable, Iterable

import poise_py as poise
from poise_py._core._listener import NullListener
from poise_py._core._pool import Pool
from poise_py._core._routing import PanicHook

EJECT_ALL = poise.CircuitPolicy(max_ejection_percent=1.0)
"""A circuit that lets every endpoint be ejected (the routing suites eject on purpose)."""


EVERY_POLICY: list[poise.Policy] = [
    poise.RoundRobin(),
    poise.Random(),
    poise.WeightedRandom(),
    poise.WeightedRoundRobin(),
    poise.PowerOfTwoChoices(),
    poise.PeakEwma(),
    poise.ConsistentHash(table_size=4099),
]
"""One of every selection policy (a ConsistentHash table small enough for quick tests)."""


def zero() -> float:
    """A clock stuck at 0.0."""
    return 0.0


def _quiet(tier: int, *, started: bool, healthy_share: float) -> None:
    return None


class PanicListener(NullListener):
    """Hands the pool's panic reports to one hook."""

    def __init__(self, hook: PanicHook) -> None:
        self._hook = hook

    def panic(self, tier: int, *, started: bool, healthy_share: float) -> None:
        self._hook(tier, started=started, healthy_share=healthy_share)


def make_pool(
    policy: poise.Policy | None = None,
    eps: Iterable[poise.Endpoint] = (),
    *,
    seed: int = 7,
    circuit: poise.CircuitPolicy = EJECT_ALL,
    routing: poise.Routing | None = None,
    panic: poise.Panic | None = None,
    on_panic: PanicHook = _quiet,
) -> Pool:
    """A pure pool holding ``eps``."""
    pool = Pool(
        circuit,
        policy if policy is not None else poise.RoundRobin(),
        random.Random(seed),
        routing=routing,
        panic=panic,
        listener=PanicListener(on_panic),
    )
    pool.apply(0.0, added=list(eps))
    return pool


def tiered(*sizes: int, **kwargs: object) -> list[poise.Endpoint]:
    """``sizes[t]`` endpoints in tier ``t``, named ``t<t>-<i>``."""
    return [
        poise.Endpoint(f"t{t}-{i}", tier=t, **kwargs)  # type: ignore[arg-type]
        for t, size in enumerate(sizes)
        for i in range(size)
    ]


def run(pool: Pool, n: int, *, key: Callable[[int], Hashable] | None = None) -> collections.Counter[str]:
    """Make ``n`` sequential calls that all succeed; count picks per endpoint id."""
    counts: collections.Counter[str] = collections.Counter()
    for i in range(n):
        state, ticket, now, _ = pool.select(0.0, None if key is None else key(i))
        counts[state.endpoint.id] += 1
        pool.succeed(state, ticket, 0.0, now)
    return counts


def decisions(pool: Pool, n: int) -> collections.Counter[tuple[poise.DecisionMode, int]]:
    """Make ``n`` sequential successful calls; count ``(mode, tier)`` of their decisions."""
    counts: collections.Counter[tuple[poise.DecisionMode, int]] = collections.Counter()
    for _ in range(n):
        state, ticket, now, decision = pool.select(0.0)
        counts[decision.mode, decision.tier] += 1
        pool.succeed(state, ticket, 0.0, now)
    return counts


def eject(pool: Pool, endpoint_id: str, now: float = 0.0, fault: poise.Fault = poise.Fault.FATAL) -> None:
    """Open ``endpoint_id``'s circuit (or block it, with PERMANENT) by a fault on a call routed to it."""
    others = [i for i in pool.members if i != endpoint_id]
    state, ticket, _, _ = pool.select(now, exclude=others)
    assert state.endpoint.id == endpoint_id
    pool.complete(state, ticket, fault, now)
    expected = poise.CircuitState.BLOCKED if fault is poise.Fault.PERMANENT else poise.CircuitState.OPEN
    assert state.circuit.state is expected


def shares(counts: collections.Counter[str]) -> dict[str, float]:
    """Counts as fractions of their total."""
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()}
