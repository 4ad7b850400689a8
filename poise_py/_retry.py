"""``LoadBalancer.call``: one logical request, retried on other endpoints within a budget."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from ._errors import ConfigError, SelectionError
from ._faults import Fault

if TYPE_CHECKING:
    from ._balancer import LoadBalancer
    from ._endpoint import Endpoint

T = TypeVar("T")

RETRYABLE = frozenset({Fault.TRANSIENT, Fault.SUSPECT, Fault.FATAL, Fault.PERMANENT})
"""Faults after which ``call`` tries another endpoint. Never CALLER: the request itself is bad."""


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
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ConfigError("attempts", f"must be an int >= 1, got {attempts!r}")
    tried: list[str] = []
    history: list[Attempt] = []
    budget = lb._budget
    for n in range(attempts):
        if n == 0:
            budget.deposit(lb._clock())
        elif not budget.try_withdraw(lb._clock()):
            lb._retries_denied += 1
            break
        try:
            permit = lb.acquire(key=key, exclude=tried)
        except SelectionError:
            if not history:
                raise
            break  # nowhere else to go: the last real error is the answer
        endpoint: Endpoint = permit.endpoint
        tried.append(endpoint.id)
        async with permit:
            try:
                return await fn(endpoint, *args, **kwargs)
            except Exception as exc:
                fault, retry_after = lb._classify(exc, endpoint.id)
                permit.fail(fault, retry_after=retry_after)
                history.append(Attempt(endpoint_id=endpoint.id, fault=fault, error=exc))
                if fault not in RETRYABLE:
                    _annotate(exc, history)
                    raise
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
