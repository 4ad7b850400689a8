"""``LoadBalancer.call``: one logical request, retried on other endpoints within a budget.

The decisions are the pure :class:`~poise_py._core._retry.RetryLoop`'s (the one the httpx
transport, the gRPC channel and the simulator use); this module only performs them: it
takes permits, awaits the caller's function, and records the attempts on the error it
raises. It reaches the balancer through its public API and ``lb._internals``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from ._core._retry import RETRYABLE, Next
from ._errors import SelectionError
from ._faults import Fault

if TYPE_CHECKING:
    from ._balancer import LoadBalancer
    from ._endpoint import Endpoint

T = TypeVar("T")

__all__ = ["RETRYABLE", "Attempt", "call_with_retries"]


@attrs.frozen(kw_only=True)
class Attempt:
    """One try of a ``LoadBalancer.call``, recorded on the exception it raises.

    Attributes:
        endpoint_id: the endpoint tried.
        fault: how its failure was classified.
        error: the exception it raised.
    """

    endpoint_id: str
    fault: Fault
    error: BaseException


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
    internals = lb._internals
    loop = internals.retry_loop(attempts)
    history: list[Attempt] = []
    loop.start(internals.now())
    while True:
        try:
            permit = lb.acquire(key=key, exclude=loop.exclude)
        except SelectionError:
            if not history:
                raise
            break  # nowhere else to go: the last real error is the answer
        endpoint: Endpoint = permit.endpoint
        loop.attempt(endpoint.id)
        async with permit:
            try:
                return await fn(endpoint, *args, **kwargs)
            except Exception as exc:
                judged = internals.classify(exc, endpoint.id)
                fault = judged.fault
                permit.fail(fault, retry_after=judged.retry_after, overload=judged.overload)
                history.append(Attempt(endpoint_id=endpoint.id, fault=fault, error=exc))
                verdict = loop.after_fault(fault, internals.now())
                if verdict is Next.NOT_RETRYABLE:
                    _annotate(exc, history)
                    raise
        if verdict is not Next.RETRY:
            break
    last = history[-1].error
    _annotate(last, history)
    raise last


def _annotate(exc: BaseException, history: list[Attempt]) -> None:
    attempts = tuple(history)
    # An exception class with __slots__ cannot take the attribute; the note still says it.
    with contextlib.suppress(AttributeError):
        exc.poise_attempts = attempts  # type: ignore[attr-defined]
    summary = ", ".join(f"{a.endpoint_id}: {a.fault.value}" for a in attempts)
    exc.add_note(f"poise_py: {len(attempts)} attempt(s) [{summary}]")
