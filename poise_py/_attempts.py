"""The one retry driver: the attempts of one logical request, each around its own permit.

``LoadBalancer.call``, the httpx transport and the gRPC channel are each a few lines over
it (the simulator drives the same pure :class:`~poise_py._core._retry.RetryLoop` from its
event loop). It is reached through ``lb._internals.attempts(...)``::

    attempts = lb._internals.attempts(3, key=key)
    async for attempt in attempts:
        async with attempt:                     # an exception is classified and reported
            return await call(attempt.endpoint)
    attempts.outcome()                          # no attempt succeeded: raise the last error

How a block ends decides what follows:

- normally: the permit succeeds (unless the body reported it, or took it over with
  :meth:`AttemptScope.detach`);
- by an ``Exception``: it is classified (the driver's ``classify``), reported on the permit
  and handed to the one :class:`RetryLoop` with the pool's size and the time left before
  the deadline on the balancer's clock. When another attempt follows the exception is
  swallowed and the loop goes on; otherwise it propagates, annotated with every attempt;
- by cancellation (or any ``BaseException``): the permit is cancelled, no strike and no
  success, and it propagates.

A result that is itself a failure (an HTTP 503 response) is reported with
:meth:`AttemptScope.failed`, which says whether another attempt follows; the driver keeps it as
the request's answer until the next attempt really starts (the ``discard`` hook releases
it then), so a retry that finds no endpoint left answers with the last real result or
error, never with the selection error.

Three options pace the attempts (docs/tails.md):

- ``wait``: the first attempt waits up to that long for an eligible endpoint
  (``acquire(wait=...)``, first come first served); a retry never waits, it ends the
  request when no endpoint is left;
- ``backoff`` (:class:`~poise_py.RetryBackoff`): a retry waits a jittered delay, or the server's
  pushback (the failed answer's ``retry_after``) when it gave one; a delay past the deadline
  ends the request;
- hedging (:meth:`Attempts.hedge`): another attempt starts while earlier ones run, on an
  endpoint not yet tried, when the retry loop and the retry budget allow it. Each attempt
  owns its permit, and the driver's bookkeeping (the endpoints tried, the last outcome)
  does not assume one attempt at a time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Collection
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from ._core._retry import AfterFault, RetryLoop
from ._core._tails import RetryBackoff
from ._errors import SelectionError
from ._faults import Classification, Fault

if TYPE_CHECKING:
    from ._endpoint import Endpoint
    from ._permit import Permit

__all__ = ["Attempt", "AttemptScope", "Attempts", "Pacing"]

Classify = Callable[[Exception], Fault | Classification]
"""How an attempt's exception is judged (the balancer's classifier, or an integration's own)."""


@attrs.frozen(kw_only=True)
class Attempt:
    """One failed try of a logical request, recorded on the exception it ends with.

    ``exc.poise_attempts`` is the tuple of them (``LoadBalancer.call``, the httpx
    transport, the gRPC channel), oldest first.

    Attributes:
        endpoint_id: the endpoint tried.
        fault: how its failure was classified.
        error: the exception it raised, or None when its result was itself the failure
            (an HTTP 503 response).
    """

    endpoint_id: str
    fault: Fault
    error: BaseException | None


class Attempts:
    """The attempts of one logical request (``lb._internals.attempts(...)``); iterate with ``async for``.

    Args:
        loop: the request's pure retry decision, on the balancer's budget (not started).
        acquire: takes a permit avoiding the endpoints already tried (raises
            :class:`SelectionError` when there is none).
        classify: judges an attempt's exception.
        now: reads the balancer's clock.
        pool_size: how many endpoints the pool holds now (a request stops, without
            spending budget, once it tried every one).
        deadline: when the request's time ends on the balancer's clock, or None.
        discard: releases a failed result the request will not answer with after all
            (another attempt started), or None.
        pacing: how the attempts wait (:class:`Pacing`), or None: at once, one after
            another (the common request pays for nothing it does not use).
    """

    __slots__ = (
        "_acquire",
        "_classify",
        "_deadline",
        "_discard",
        "_done",
        "_error",
        "_loop",
        "_now",
        "_pacing",
        "_pool_size",
        "_pushback",
        "_result",
        "_started",
        "history",
    )

    def __init__(
        self,
        loop: RetryLoop,
        *,
        acquire: Callable[[Collection[str]], Permit],
        classify: Classify,
        now: Callable[[], float],
        pool_size: Callable[[], int],
        deadline: float | None = None,
        discard: Callable[[Any], Awaitable[None]] | None = None,
        pacing: Pacing | None = None,
    ) -> None:
        self._loop = loop
        self._pacing = pacing
        # _pushback (the last failure's retry_after) is set by the first failure: a request
        # that succeeds at once never pays for it.
        self._acquire = acquire
        self._classify = classify
        self._now = now
        self._pool_size = pool_size
        self._deadline = deadline
        self._discard = discard
        self._started = False
        self._done = False
        self._error: BaseException | None = None
        self._result: Any = None
        self.history: list[Attempt] = []
        """Every failed attempt so far, oldest first."""

    def __aiter__(self) -> Attempts:
        return self

    async def __anext__(self) -> AttemptScope:
        if self._done:
            raise StopAsyncIteration
        attempt: AttemptScope | None
        pacing = self._pacing
        if pacing is not None and not self._started:
            attempt = await self.first()  # it waits, if the request waits
        else:
            if pacing is not None and not await self._paced(pacing):  # a retry: back off first
                raise StopAsyncIteration
            attempt = self.next()
            if attempt is None:
                raise StopAsyncIteration
        if self._result is not None:
            await self.drop_kept()  # another attempt started: the kept failure is not the answer
        return attempt

    async def first(self) -> AttemptScope:
        """Start the first attempt, waiting for an eligible endpoint if the driver was given ``wait_acquire``.

        Raises the selection error when there is none (after the wait).
        """
        wait_acquire = None if self._pacing is None else self._pacing.wait_acquire
        if self._started or wait_acquire is None:
            attempt = self.next()
            if attempt is None:
                raise RuntimeError("first() after the request's first attempt")
            return attempt
        self._started = True
        self._loop.start(self._now())
        try:
            permit = await wait_acquire(self._loop.exclude)
        except BaseException:
            self._done = True
            raise
        return self._take(permit)

    async def _paced(self, pacing: Pacing) -> bool:
        """Wait the backoff (or the server's pushback) before a retry; False when the deadline would pass first."""
        backoff = pacing.backoff
        if backoff is None:
            return True
        draw = pacing.random()
        pushback: float | None = getattr(self, "_pushback", None)
        delay = backoff.delay(max(1, self._loop.attempts_made), draw, pushback)
        left = self.time_left()
        if left is not None and delay >= left:
            self._done = True
            return False
        if delay > 0.0:
            await anyio.sleep(delay)
        return True

    def hedge(self) -> AttemptScope | None:
        """Start a hedge now, beside the attempts in flight: its permit, or None when none may go.

        None when the request is over, every allowed attempt was made, every endpoint was
        tried, no endpoint not yet tried is eligible, or the retry budget refuses (hedges
        and retries draw from one budget). A hedge that cannot go does not end the request.
        """
        if self._done or not self._started:
            return None
        loop = self._loop
        if not loop.may_hedge(self._now(), pool_size=self._pool_size()):
            return None
        try:
            permit = self._acquire(loop.exclude)
        except SelectionError:
            loop.unsent()  # not sent: the budget gets its withdrawal back
            return None
        return self._take(permit)

    def next(self) -> AttemptScope | None:
        """Start the next attempt now: its permit, or None when the request is over.

        The first attempt's :class:`SelectionError` propagates (there is nothing else to
        answer with); a later one ends the request with the last outcome.
        """
        if self._done:
            return None
        loop = self._loop
        if not self._started:
            self._started = True
            loop.start(self._now())
        try:
            permit = self._acquire(loop.exclude)
        except SelectionError:
            self._done = True
            if not loop.attempts_made:
                raise
            loop.unsent()  # the retry was not sent: the budget gets its withdrawal back
            return None
        return self._take(permit)

    def _take(self, permit: Permit) -> AttemptScope:
        self._loop.attempt(permit.endpoint.id)
        self._error = None
        return AttemptScope(self, permit)

    async def drop_kept(self) -> None:
        """Release a failed result kept as the answer (another attempt started, or won)."""
        result, self._result = self._result, None
        if result is not None and self._discard is not None:
            await self._discard(result)

    def kept(self) -> Any:
        """The failed result kept as the request's answer so far, or None."""
        return self._result

    def time_left(self) -> float | None:
        """Seconds before the request's deadline on the balancer's clock (None without one)."""
        deadline = self._deadline
        return None if deadline is None else deadline - self._now()

    def outcome(self) -> Any:
        """After the last attempt: the failed result kept as the answer, or raise the last error (annotated)."""
        error = self._error
        if error is not None:
            self._error = None
            self.annotate(error)
            raise error
        return self._result

    def _judged(self, permit: Permit, verdict: Fault | Classification, error: BaseException | None) -> AfterFault:
        """Report ``verdict`` on ``permit`` and ask the retry loop what follows."""
        if isinstance(verdict, Classification):
            fault = verdict.fault
            permit.fail(fault, retry_after=verdict.retry_after, overload=verdict.overload)
            self._pushback = verdict.retry_after
        else:
            fault = verdict
            permit.fail(fault)
            self._pushback = None
        self.history.append(Attempt(endpoint_id=permit.endpoint.id, fault=fault, error=error))
        next_step = self._loop.after_fault(fault, self._now(), pool_size=self._pool_size(), time_left=self.time_left())
        if next_step is not AfterFault.RETRY:
            self._done = True
        return next_step

    def _judge(self, exc: Exception) -> Fault | Classification:
        try:
            verdict: object = self._classify(exc)
        except Exception:  # noqa: BLE001 - a broken classifier must not lose the outcome
            return Fault.SUSPECT
        return verdict if isinstance(verdict, Fault | Classification) else Fault.SUSPECT

    def annotate(self, exc: BaseException) -> None:
        """Record every attempt on ``exc``: ``exc.poise_attempts`` and a note."""
        attempts = tuple(self.history)
        # An exception class with __slots__ cannot take the attribute; the note still says it.
        with contextlib.suppress(AttributeError):
            exc.poise_attempts = attempts  # type: ignore[attr-defined]
        summary = ", ".join(f"{a.endpoint_id}: {a.fault.value}" for a in attempts)
        exc.add_note(f"poise_py: {len(attempts)} attempt(s) [{summary}]")


@attrs.frozen
class Pacing:
    """How a request's attempts wait, when they do (``Attempts(pacing=...)``).

    Attributes:
        wait_acquire: takes the first attempt's permit, waiting for an eligible endpoint
            (``acquire(wait=...)``), or None to take it at once.
        backoff: the delay before each retry, or None (at once).
        random: a uniform draw in [0, 1) for the backoff's jitter.
    """

    wait_acquire: Callable[[Collection[str]], Awaitable[Permit]] | None
    backoff: RetryBackoff | None
    random: Callable[[], float]


class AttemptScope:
    """One try of a logical request around its own permit; ``async with attempt:`` judges how it ends."""

    __slots__ = ("_attempts", "_detached", "_step", "permit")

    def __init__(self, attempts: Attempts, permit: Permit) -> None:
        self._attempts = attempts
        self.permit = permit
        self._detached = False
        # _step is set when the attempt fails (the common attempt succeeds and never pays for it).

    @property
    def step(self) -> AfterFault | None:
        """What the retry loop decided after this attempt failed (None: it did not fail, or has not ended)."""
        step: AfterFault | None = getattr(self, "_step", None)
        return step

    @property
    def endpoint(self) -> Endpoint:
        """The endpoint this attempt goes to."""
        return self.permit.endpoint

    def failed(
        self, verdict: Fault | Classification, *, result: Any = None, error: BaseException | None = None
    ) -> bool:
        """Report a failure the body saw without raising (a 503 response); True when another attempt follows.

        ``result`` is kept as the request's answer until the next attempt starts (the
        driver's ``discard`` releases it then); ``error`` is raised by ``outcome()`` if no
        attempt follows.
        """
        attempts = self._attempts
        step = self._step = attempts._judged(self.permit, verdict, error)
        attempts._result = result
        attempts._error = error
        return step is AfterFault.RETRY

    def detach(self) -> Permit:
        """The permit outlives the block (a streamed body reports it later); the block leaves it alone."""
        self._detached = True
        return self.permit

    async def __aenter__(self) -> AttemptScope:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        permit = self.permit
        if self._detached or permit.done:
            return False
        if exc is None:
            permit.succeed()
            return False
        if not isinstance(exc, Exception):
            permit.cancel()  # a cancellation: neither a success nor a failure
            return False
        attempts = self._attempts
        step = self._step = attempts._judged(permit, attempts._judge(exc), exc)
        if step is AfterFault.RETRY:
            attempts._error = exc  # swallowed: the answer if no endpoint is left to retry on
            return True
        attempts.annotate(exc)
        return False
