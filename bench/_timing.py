"""Timing helpers for the benchmarks: per-iteration costs measured in one process."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from types import TracebackType


async def interleaved(
    bodies: list[Callable[[int], Awaitable[None]]], iterations: int, rounds: int
) -> list[list[Sample]]:
    """Time every body ``rounds`` times, each once a round and in a rotating order.

    Each sample is a pair: seconds per iteration of the body, and of a bare ``async with``
    timed right before it. A change of the machine's load between rounds falls on every
    body alike, so ratios of samples from the same round (one body over another, or over
    its bare) hold where costs measured minutes apart do not; no body always runs first.
    """
    for body in bodies:
        await body(iterations)  # warm the caches and any lazily built structure
    samples: list[list[Sample]] = [[] for _ in bodies]
    for r in range(rounds):
        for i in [(r + k) % len(bodies) for k in range(len(bodies))]:
            base = await _timed(bare, iterations)
            samples[i].append((await _timed(bodies[i], iterations), base))
    return samples


Sample = tuple[float, float]
"""One sample from :func:`interleaved`: seconds per iteration of a body, and of the bare before it."""


def median_cost(row: list[Sample]) -> float:
    """A body's median seconds per iteration over its rounds."""
    return statistics.median(cost for cost, _ in row)


def median_over_bare(row: list[Sample]) -> float:
    """A body's median over its rounds of its cost over the bare ``async with`` timed before it."""
    return statistics.median(cost / base for cost, base in row)


def per_round(row: list[Sample], over: list[Sample]) -> list[float]:
    """Round by round, ``row``'s bare-normalised sample over ``over``'s from the same round."""
    return [(c / b) / (oc / ob) for (c, b), (oc, ob) in zip(row, over, strict=True)]


def cost_per_round(row: list[Sample], over: list[Sample]) -> list[float]:
    """Round by round, ``row``'s cost over ``over``'s from the same round (their bares unused)."""
    return [c / oc for (c, _), (oc, _) in zip(row, over, strict=True)]


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
