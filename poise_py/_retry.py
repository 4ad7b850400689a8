"""``LoadBalancer.call``: one logical request, retried on other endpoints within a budget.

A few lines over the one retry driver (:class:`~poise_py._attempts.Attempts`, which the
httpx transport and the gRPC channel use too): take an attempt, await the caller's
function on its endpoint, and let the driver judge how it ended.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar

from ._attempts import Attempt
from ._core._retry import RETRYABLE

if TYPE_CHECKING:
    from ._balancer import LoadBalancer

T = TypeVar("T")

__all__ = ["RETRYABLE", "Attempt", "call_with_retries"]


async def call_with_retries(
    lb: LoadBalancer,
    fn: Callable[..., Awaitable[T]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    attempts: int,
    key: Hashable | None,
) -> T:
    """The body of ``LoadBalancer.call``; see there."""
    tries = lb._internals.attempts(attempts, key=key)
    async for attempt in tries:
        async with attempt:
            return await fn(attempt.endpoint, *args, **kwargs)
    return tries.outcome()  # type: ignore[no-any-return] # every attempt failed: raises the last error
