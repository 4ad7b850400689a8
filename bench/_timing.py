"""Timing helpers for the benchmarks: best-of-N per-iteration cost, in one process."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable


async def best_of(body: Callable[[int], Awaitable[None]], iterations: int, repeats: int = 5) -> float:
    """Run ``body(iterations)`` ``repeats`` times; return the best seconds per iteration."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        await body(iterations)
        best = min(best, (time.perf_counter() - start) / iterations)
    return best
