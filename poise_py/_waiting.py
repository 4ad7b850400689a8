"""Waiting for an eligible endpoint: ``lb.acquire(wait=seconds)``, first come first served.

Theory of operation
-------------------
A caller that asks to wait and finds nothing eligible joins one FIFO queue
(:class:`WaitQueue`) and sleeps on its own event; nothing polls. The queue is a client of
the balancer's one timer (:mod:`poise_py._timer`):

- when the pool's eligible set may have grown (a circuit moved, an endpoint joined, came
  back or freed a concurrency slot: :meth:`WaitQueue.changed`), or another caller joined,
  the queue is due at once and the timer serves it in arrival order: each waiter whose
  selection succeeds is handed its permit; once one fails, the waiters behind it asking
  for the same (key and exclude) are not tried again in that pass. A circuit that
  half-opens therefore hands its ``permitted_probes`` probe permits to the first waiters,
  and the rest wait for the verdict (a success closes the circuit: everyone is served; a
  failure reopens it), while a waiter that cannot be served holds back no one asking for
  something else;
- when a waiter's time ends its selection is tried once more, and if that fails too the
  waiter gets the selection error (``NoEligibleEndpoints`` with its ``retry_after``), at
  the exact instant, on the balancer's clock (an injected clock included).

A waiter that is cancelled leaves no trace: it leaves the queue, and a permit handed to it
that it never took up is cancelled (no strike and no success; a probe slot is freed for the
next waiter). While anyone waits, a caller who asks to wait joins the back of the queue
rather than take an endpoint that just became eligible ahead of it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Collection, Generator, Hashable
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from ._errors import EmptyPool, NoEligibleEndpoints, NotRunning, Overloaded, SelectionError
from ._knobs import check_duration

if TYPE_CHECKING:
    from ._permit import Permit

__all__ = ["PendingPermit", "WaitQueue", "waitable"]

WAITABLE = (NoEligibleEndpoints, Overloaded, EmptyPool)
"""The selection errors a waiter waits out (not NotRunning, WrongThread or DiscoveryClosed)."""


def waitable(error: SelectionError) -> bool:
    """Whether ``error`` may end by itself while the balancer runs (so waiting makes sense)."""
    return isinstance(error, WAITABLE)


class _Waiter:
    __slots__ = ("deadline", "error", "event", "exclude", "key", "permit", "settled", "wants")

    def __init__(self, key: Hashable | None, exclude: Collection[str], deadline: float) -> None:
        self.key: Hashable | None = key
        self.exclude: Collection[str] = exclude
        try:
            hash(key)
        except TypeError:  # a key no policy reads may be anything: such a waiter asks alone
            key = object()
        self.wants: tuple[Hashable | None, frozenset[str]] = (key, frozenset(exclude))
        """What it asks for: waiters asking the same are served alike."""
        self.deadline: float = deadline
        self.event: anyio.Event | None = None  # made by the waiting task (the queue itself is sans-IO)
        self.permit: Permit | None = None
        self.error: BaseException | None = None
        self.settled: bool = False

    def grant(self, permit: Permit) -> None:
        self.permit = permit
        self._settle()

    def refuse(self, error: BaseException) -> None:
        self.error = error
        self._settle()

    def _settle(self) -> None:
        self.settled = True
        if self.event is not None:
            self.event.set()


class WaitQueue:
    """The balancer's waiters, in arrival order; a client of its one timer.

    Args:
        select: takes a permit for ``(key, exclude)`` or raises a :class:`SelectionError`,
            reporting nothing (a waiter's failed tries are not refusals).
        refused: reports a selection error a waiter ends with; returns the error to raise
            (a readiness error may explain it better).
        clock: reads the balancer's clock.
        wake: wakes the timer task.
        signal: told whether anyone waits (the permits' exit then reports freed slots).
        demand: told that callers wait for an endpoint (a fleet's half-open round leases
            its probe slots on demand), as each joins and whenever serving them stops short.
    """

    def __init__(
        self,
        select: Callable[[Hashable | None, Collection[str]], Permit],
        refused: Callable[[SelectionError], SelectionError],
        clock: Callable[[], float],
        wake: Callable[[], None],
        signal: Callable[[bool], None],
        *,
        demand: Callable[[], None] = lambda: None,
    ) -> None:
        self._select = select
        self._demand = demand
        self._refused = refused
        self._clock = clock
        self._wake = wake
        self._signal = signal
        self._queue: deque[_Waiter] = deque()
        self._expiries: list[tuple[float, int, _Waiter]] = []
        self._order = itertools.count()
        self._due = False
        self._closed: Callable[[], BaseException] | None = None
        """While the balancer is stopped: the error a caller who would join gets (see :meth:`close`)."""
        self.waited: int = 0
        """Callers that had to wait (found nothing eligible)."""
        self.expired: int = 0
        """Waiters whose time ran out."""

    def __len__(self) -> int:
        return len(self._queue)

    def changed(self) -> None:
        """The eligible set may have grown: serve the queue at the timer's next pass."""
        if self._queue and not self._due:
            self._due = True
            self._wake()

    def join(self, key: Hashable | None, exclude: Collection[str], wait: float) -> _Waiter:
        """Queue a caller that waits up to ``wait`` seconds of the balancer's clock.

        Raises:
            NotRunning: the balancer stopped (nothing would serve the queue, nor end the wait).
        """
        if self._closed is not None:
            raise self._closed()
        waiter = _Waiter(key, exclude, self._clock() + wait)
        if not self._queue:
            self._signal(True)
        else:
            self._due = True  # its turn is behind the others, but it may want what they cannot take
        self._queue.append(waiter)
        heapq.heappush(self._expiries, (waiter.deadline, next(self._order), waiter))
        self.waited += 1
        self._demand()
        self._wake()  # a new deadline
        return waiter

    def leave(self, waiter: _Waiter) -> None:
        """``waiter`` stops waiting (cancelled): out of the queue, and an unclaimed permit cancelled."""
        if not waiter.settled:
            waiter.settled = True
            self._remove(waiter)
        permit, waiter.permit = waiter.permit, None
        if permit is not None and not permit.done:
            permit.cancel(superseded=True)  # handed over, never taken up: no strike, no success, not counted

    def close(self, error: Callable[[], BaseException]) -> None:
        """Nothing can come any more (the balancer stops, discovery fails closed): each waiter ends with ``error()``."""
        while self._queue:
            self._queue.popleft().refuse(error())
        self._expiries.clear()
        self._signal(False)
        self._closed = error  # a caller who would join from now on ends the same way, at once

    def open(self) -> None:
        """The balancer runs (again): callers may wait."""
        self._closed = None

    def _remove(self, waiter: _Waiter) -> None:
        try:
            self._queue.remove(waiter)
        except ValueError:
            return
        if not self._queue:
            self._signal(False)

    # -- the timer's client ------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """Now, when the eligible set changed; else the earliest waiter's deadline; None when nobody waits."""
        if not self._queue:
            self._expiries.clear()
            return None
        if self._due:
            return -math.inf
        expiries = self._expiries
        while expiries and expiries[0][2].settled:
            heapq.heappop(expiries)
        return expiries[0][0] if expiries else None

    def handle_timer(self, now: float) -> None:
        """Serve the queue in arrival order, each waiter whose selection succeeds; end the waits that are over.

        A waiter that cannot be served keeps its place and holds back no one who asks for
        something else (another ``exclude`` or ``key``); once a selection fails, the waiters
        behind it asking for the same are not tried again in this pass (they would fail too:
        a half-open circuit's probes go to the first waiters, the rest wait for the verdict).
        """
        self._due = False
        queue = self._queue
        failed: set[tuple[Hashable | None, frozenset[str]]] = set()
        served = False
        for waiter in queue:
            wants = waiter.wants
            if wants in failed:
                continue
            try:
                permit = self._select(waiter.key, waiter.exclude)
            except SelectionError:
                failed.add(wants)
                continue
            served = True
            waiter.grant(permit)
        if served:
            self._queue = queue = deque(w for w in queue if not w.settled)
        if failed:
            self._demand()  # still wanted: a fleet's waiting round leases for it
        expiries = self._expiries
        while expiries and expiries[0][0] <= now:
            _, _, waiter = heapq.heappop(expiries)
            if waiter.settled:
                continue
            self._remove(waiter)
            try:
                waiter.grant(self._select(waiter.key, waiter.exclude))  # at its deadline, not past it
            except SelectionError as exc:
                self.expired += 1
                waiter.refuse(self.explained(exc))
        if not queue:
            self._signal(False)

    def explained(self, error: SelectionError) -> SelectionError:
        """Report ``error`` as the refusal a waiter ends with; the error to raise."""
        try:
            return self._refused(error)
        except SelectionError as better:  # the readiness error that explains it
            return better

    # -- the waiting caller --------------------------------------------------------------

    async def wait(self, waiter: _Waiter) -> Permit:
        """Sleep until ``waiter`` is served (its permit) or refused (raises); cancellation leaves no trace."""
        try:
            if not waiter.settled:
                waiter.event = anyio.Event()
                await waiter.event.wait()
        except BaseException:
            self.leave(waiter)
            raise
        permit, waiter.permit = waiter.permit, None
        if permit is None:
            error = waiter.error
            assert error is not None  # noqa: S101 - settled: a permit or an error
            raise error
        return permit

    def first(self, key: Hashable | None, exclude: Collection[str]) -> Permit | SelectionError:
        """The selection a new waiting caller tries before joining: a permit, or the error it waits out.

        While anyone waits, nobody jumps the queue: the caller's turn is at its back.
        """
        if self._queue:
            return NoEligibleEndpoints({}, 0)
        try:
            return self._select(key, exclude)
        except SelectionError as exc:
            if not waitable(exc):
                raise
            return exc


class PendingPermit:
    """What ``lb.acquire(wait=seconds)`` returns: ``async with`` it (or ``await`` it) for the permit.

    The permit was taken at once if an endpoint was eligible; otherwise entering waits, in
    arrival order, until one is or ``wait`` seconds pass (then the selection error is
    raised, a :class:`~poise_py.NoEligibleEndpoints` with its ``retry_after``). Exiting the
    block reports the call exactly as a permit's block does.
    """

    __slots__ = ("_exclude", "_first", "_key", "_permit", "_queue", "_wait")

    def __init__(
        self,
        queue: WaitQueue,
        key: Hashable | None,
        exclude: Collection[str],
        wait: object,
    ) -> None:
        self._queue = queue
        self._key = key
        self._exclude = exclude
        self._wait = check_duration("wait", wait, allow_zero=True)  # type: ignore[arg-type] # checked here
        self._permit: Permit | None = None
        self._first: Permit | SelectionError = queue.first(key, exclude)

    async def permit(self) -> Permit:
        """The permit: at once if one was taken, else after waiting (raises the selection error when the wait ends)."""
        first = self._first
        if not isinstance(first, SelectionError):
            return first
        if self._wait <= 0.0 and not len(self._queue):
            raise self._queue.explained(first)  # nothing to wait for: refused now
        queue = self._queue
        waiter = queue.join(self._key, self._exclude, self._wait)
        return await queue.wait(waiter)

    def __await__(self) -> Generator[Any, None, Permit]:
        return self.permit().__await__()

    async def __aenter__(self) -> Permit:
        permit = self._permit = await self.permit()
        return await permit.__aenter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        permit = self._permit
        if permit is not None:
            await permit.__aexit__(exc_type, exc, tb)


def not_running() -> NotRunning:
    """The error waiters get when the balancer stops under them."""
    return NotRunning("the balancer stopped while this caller waited for an endpoint")
