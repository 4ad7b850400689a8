"""Peers' per-call cost against the same bare no-op ``async with``, in the running process.

Imported by ``bench/overhead.py --peers``; each peer is measured only if it is installed
(``pip install purgatory circuitbreaker aiobreaker``). None of them selects among
endpoints: each guards one call with one breaker, so they are a floor for "a breaker
around a call", not a like-for-like balancer.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Awaitable, Callable

Body = Callable[[int], Awaitable[None]]


async def _noop() -> None:
    return None


async def purgatory_cm() -> Body | None:
    """purgatory: ``async with breaker:`` on a breaker fetched once (its cheapest use)."""
    if importlib.util.find_spec("purgatory") is None:
        return None
    from purgatory import AsyncCircuitBreakerFactory

    breaker = await AsyncCircuitBreakerFactory().get_breaker("peer")

    async def body(n: int) -> None:
        for _ in range(n):
            async with breaker:
                pass

    return body


async def circuitbreaker_decorator() -> Body | None:
    """circuitbreaker: ``await f()`` for an async function under ``@circuit``."""
    if importlib.util.find_spec("circuitbreaker") is None:
        return None
    from circuitbreaker import circuit

    guarded = circuit(failure_threshold=5)(_noop)

    async def body(n: int) -> None:
        for _ in range(n):
            await guarded()

    return body


async def aiobreaker_call() -> Body | None:
    """aiobreaker: ``await breaker.call_async(f)`` (asyncio only)."""
    if importlib.util.find_spec("aiobreaker") is None:
        return None
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return None
    from aiobreaker import CircuitBreaker

    breaker = CircuitBreaker()

    async def body(n: int) -> None:
        for _ in range(n):
            await breaker.call_async(_noop)

    return body


PEERS: list[tuple[str, Callable[[], Awaitable[Body | None]]]] = [
    ("purgatory, async with breaker", purgatory_cm),
    ("circuitbreaker, @circuit async fn", circuitbreaker_decorator),
    ("aiobreaker, call_async", aiobreaker_call),
]
