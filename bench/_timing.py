"""Timing helpers for the benchmarks: best-of-N per-iteration cost, in one process."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from types import TracebackType


async def best_of(body: Callable[[int], Awaitable[None]], iterations: int, repeats: int = 5) -> float:
    """Run ``body(iterations)`` ``repeats`` times; return the best seconds per iteration."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        await body(iterations)
        best = min(best, (time.perf_counter() - start) / iterations)
    return best


class Noop:
    """The baseline: the cheapest possible async context manager."""

    __slots__ = ()

    async def __aenter__(self) -> Noop:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


async def bare(n: int) -> None:
    """``n`` bare no-op ``async with`` blocks: what every per-call ratio is measured against."""
    cm = Noop()
    for _ in range(n):
        async with cm:
            pass
