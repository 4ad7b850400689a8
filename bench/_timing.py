"""Timing helpers for the benchmarks: per-iteration costs measured in one process."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from types import TracebackType


async def interleaved(
    bodies: list[Callable[[int], Awaitable[None]]], iterations: int, rounds: int
) -> list[list[tuple[float, float]]]:
    """Time every body ``rounds`` times, each once a round and in a rotating order.

    Each sample is a pair: seconds per iteration of the body, and of a bare ``async with``
    timed right before it. A change of the machine's load between rounds falls on every
    body alike, so ratios of samples from the same round (one body over another, or over
    its bare) hold where costs measured minutes apart do not; no body always runs first.
    """
    for body in bodies:
        await body(iterations)  # warm the caches and any lazily built structure
    samples: list[list[tuple[float, float]]] = [[] for _ in bodies]
    for r in range(rounds):
        for i in [(r + k) % len(bodies) for k in range(len(bodies))]:
            base = await _timed(bare, iterations)
            samples[i].append((await _timed(bodies[i], iterations), base))
    return samples


async def _timed(body: Callable[[int], Awaitable[None]], iterations: int) -> float:
    start = time.perf_counter()
    await body(iterations)
    return (time.perf_counter() - start) / iterations


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
