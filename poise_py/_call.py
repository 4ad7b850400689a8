"""``LoadBalancer.call``: one logical request, retried on other endpoints within a budget, hedged if asked.

A few lines over the one retry driver (:class:`~poise_py._attempts.Attempts`, which the
httpx transport and the gRPC channel use too): take an attempt, await the caller's
function on its endpoint, and let the driver judge how it ended. With a hedge the same
driver runs several attempts at once (:func:`hedged`), and the httpx transport and the
gRPC channel use that function too.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from ._attempts import Attempt, Attempts, AttemptScope
from ._core._retry import RETRYABLE, AfterFault, check_attempts
from ._core._tails import Hedge, HedgeState, RetryBackoff
from ._knobs import check_duration

if TYPE_CHECKING:
    from ._balancer import LoadBalancer

T = TypeVar("T")

__all__ = ["RETRYABLE", "Attempt", "call_with_options", "call_with_retries", "hedged"]


async def call_with_retries(
    tries: Attempts, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> T:
    """One request's attempts, one at a time: ``LoadBalancer.call``'s loop, with or without options."""
    async for attempt in tries:
        async with attempt:
            return await fn(attempt.endpoint, *args, **kwargs)
    return tries.outcome()  # type: ignore[no-any-return] # every attempt failed: raises the last error


async def call_with_options(
    lb: LoadBalancer,
    fn: Callable[..., Awaitable[T]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    attempts: int,
    key: Hashable | None,
    hedge: Hedge | None,
    wait: float | None,
    backoff: RetryBackoff | None,
    deadline: float | None,
) -> T:
    """The body of ``LoadBalancer.call`` with a hedge, a wait, a backoff or a deadline; see there."""
    internals = lb._internals
    if deadline is not None:
        deadline = check_duration("deadline", deadline)
    attempts = check_attempts(attempts)  # before the hedge's max: a bad one is refused either way
    state = None if hedge is None else internals.hedging(hedge, _scope(fn))
    total = attempts if hedge is None else max(attempts, hedge.max_attempts)
    tries = internals.attempts(total, key=key, wait=wait, backoff=backoff, timeout=deadline)
    if deadline is None:
        return await _paced(tries, state, fn, args, kwargs, now=internals.now)
    with anyio.fail_after(deadline):
        return await _paced(tries, state, fn, args, kwargs, now=internals.now)


async def _paced(
    tries: Attempts,
    state: HedgeState | None,
    fn: Callable[..., Awaitable[T]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    now: Callable[[], float],
) -> T:
    """One request with its options: hedged when ``state`` is given, else one attempt at a time."""
    if state is None:
        return await call_with_retries(tries, fn, args, kwargs)

    async def once(attempt: AttemptScope) -> T:
        return await fn(attempt.endpoint, *args, **kwargs)

    return await hedged(tries, state, once, now=now)


def _scope(fn: Callable[..., Any]) -> Hashable:
    """The call site a hedge's latency is measured for: the function called (by name, not identity)."""
    return (getattr(fn, "__module__", None), getattr(fn, "__qualname__", type(fn).__qualname__))


async def hedged(
    tries: Attempts,
    state: HedgeState,
    once: Callable[[AttemptScope], Awaitable[T]],
    *,
    now: Callable[[], float],
) -> T:
    """Run one request's attempts with hedging: the first answer wins, the others are cancelled.

    ``once(attempt)`` makes one attempt's call (inside the attempt's block: an exception is
    judged as the driver judges it). The first attempt starts at once (after its wait, if
    the driver waits); while no attempt has succeeded, another starts on an endpoint not yet
    tried every hedge delay (:meth:`HedgeState.delay`) as long as ``max_attempts`` are not in
    flight, the call site's extra-load allowance holds one and the retry loop and budget
    allow it (:meth:`Attempts.hedge`). A failed attempt that the driver retries is replaced
    at once (gRPC's hedging policy: no backoff); one it does not retry ends the request
    only when nothing else is in flight (or at once, for a CALLER fault). The first success
    is the answer: the other attempts are cancelled through their permits, neither a
    success nor a failure.
    """
    hedge = state.hedge
    state.started()
    first = await tries.first()
    answer: list[T] = []
    fatal: list[BaseException] = []
    failures: list[BaseException] = []
    live: set[AttemptScope] = set()
    retries = [0]
    poke = [anyio.Event()]

    def end(by: AttemptScope, task_group: anyio.abc.TaskGroup) -> None:
        """``by`` decided the request: the others' permits end as superseded, their tasks are cancelled."""
        for attempt in live:
            if attempt is not by and not attempt.permit.done:
                attempt.permit.cancel(superseded=True)  # counted nowhere, before its task is cancelled
        task_group.cancel_scope.cancel()

    async def run(attempt: AttemptScope, is_hedge: bool, task_group: anyio.abc.TaskGroup) -> None:  # noqa: FBT001
        started = now()
        try:
            async with attempt:
                value = await once(attempt)
        except Exception as exc:  # noqa: BLE001 - judged by the driver, not retried: this attempt's final error
            if attempt.step is AfterFault.NOT_RETRYABLE:
                fatal.append(exc)
                end(attempt, task_group)
            else:
                failures.append(exc)
        else:
            step = attempt.step
            if step is AfterFault.RETRY:
                retries[0] += 1
            elif step is AfterFault.NOT_RETRYABLE:  # a failed result saying the request is bad (a 4xx): the answer
                end(attempt, task_group)
            elif step is None and not answer:
                answer.append(value)
                state.observe(now() - started)
                if is_hedge:
                    state.win()
                end(attempt, task_group)
        finally:
            live.discard(attempt)
            poke[0].set()

    def start(task_group: anyio.abc.TaskGroup, attempt: AttemptScope, is_hedge: bool) -> None:  # noqa: FBT001
        live.add(attempt)
        task_group.start_soon(run, attempt, is_hedge, task_group)

    async with anyio.create_task_group() as task_group:
        start(task_group, first, False)
        hedging = True
        delay = state.delay()
        next_at = None if delay is None else now() + delay
        while True:
            if retries[0]:
                retries[0] -= 1
                attempt = tries.next()
                if attempt is not None:
                    await tries.drop_kept()  # another attempt started: a failed answer kept so far is not the answer
                    start(task_group, attempt, False)
                continue
            if not live:
                break
            timeout = math.inf
            if hedging and next_at is not None and len(live) < hedge.max_attempts:
                timeout = max(0.0, next_at - now())
            with anyio.move_on_after(timeout):
                await poke[0].wait()
            if poke[0].is_set():
                poke[0] = anyio.Event()
                continue
            # The hedge delay passed with no answer.
            attempt = tries.hedge() if state.may_hedge() else None
            if attempt is None:
                hedging = False  # the allowance, the budget or the pool is spent for this request
                continue
            state.spend()
            start(task_group, attempt, True)
            delay = state.delay()
            next_at = None if delay is None else now() + delay
    if answer:
        await tries.drop_kept()
        return answer[0]
    if fatal:
        raise fatal[0]
    if failures and tries.kept() is None:
        raise failures[-1]  # annotated by its attempt's block
    return tries.outcome()  # type: ignore[no-any-return] # a kept failed result, or the last error
