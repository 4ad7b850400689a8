"""Issuing permits: what ``acquire`` reads, and ``acquire`` itself (the front of the hot path).

:class:`PermitIssuer` is ``LoadBalancer``'s base: it declares the few fields a selection
reads (the pool, the permits' exit, the owner-thread gate, the call observers) and the
ones its refusals report to, and implements :meth:`PermitIssuer.acquire`. It is its own
module so that the optional compiled build compiles it with the permit and the pure
core: a call then runs natively from ``acquire`` through the pick to the permit's exit
(``docs/performance.md``). The balancer sets every field in its constructor.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Hashable
from typing import TYPE_CHECKING, Final, overload

from ._call_observers import CallObserver, ObservedPermit
from ._core._native import mypyc_attr
from ._errors import (
    DISCOVERY_CLOSED,
    ConfigError,
    DiscoveryClosed,
    NoEligibleEndpoints,
    NotRunning,
    SelectionError,
    WrongThread,
)
from ._permit import Permit
from ._waiting import PendingPermit

if TYPE_CHECKING:
    from ._clock import Clock
    from ._coordination._coordinator import Coordinator
    from ._core._pool import Pool
    from ._membership import Membership
    from ._pool_wires import PermitExit
    from ._telemetry import Telemetry
    from ._waiting import WaitQueue

NO_EXCLUDE: Final[Collection[str]] = ()
"""``acquire``'s default ``exclude``: recognised by identity, so the common call checks nothing."""

get_ident: Final = threading.get_ident
"""``threading.get_ident``. The constants ``acquire`` reads are ``Final``: the compiled build
reads a ``Final`` module name as a C static, any other module global by a dict lookup per
call (with the tally's constants, about 300 instructions, 6-7% of a compiled call)."""


@mypyc_attr(allow_interpreted_subclasses=True)
class PermitIssuer:
    """Selects an endpoint and issues its permit; ``LoadBalancer`` is one."""

    _pool: Pool
    _exit: PermitExit
    """What every permit reports its end to (its clock is set again by ``async with``)."""
    _gate: int
    """The owner thread's id while serving, else 0: ``acquire``'s one test on its hot path."""
    _owner: int
    """The id of the thread whose event loop runs the balancer (set by ``async with``)."""
    _running: bool
    _clock: Clock
    _call_observers: tuple[CallObserver, ...]
    _coordinator: Coordinator | None
    _membership: Membership
    _telemetry: Telemetry
    _waiting: WaitQueue

    @overload
    def acquire(self, *, key: Hashable | None = None, exclude: Collection[str] = NO_EXCLUDE) -> Permit: ...
    @overload
    def acquire(self, *, key: Hashable | None = None, exclude: Collection[str] = NO_EXCLUDE, wait: None) -> Permit: ...
    @overload
    def acquire(
        self, *, key: Hashable | None = None, exclude: Collection[str] = NO_EXCLUDE, wait: float
    ) -> PendingPermit: ...
    def acquire(  # ``wait: object``: the compiled build would refuse a bad type before the check names it
        self, *, key: Hashable | None = None, exclude: Collection[str] = NO_EXCLUDE, wait: object = None
    ) -> Permit | PendingPermit:
        """Reserve a permit for one call.

        Selection happens here, synchronously and atomically (a half-open probe slot is
        reserved before this returns). Use the result as an async context manager.

        Args:
            key: the request key for hashing policies.
            exclude: endpoint ids not to choose (already tried): a collection of
                strings (a list, a set...). One bare string is refused, not read as a
                collection of characters.
            wait: seconds to wait for an eligible endpoint when none is (None, the default,
                raises at once). With ``wait`` the result is a :class:`PendingPermit`:
                ``async with lb.acquire(wait=5) as permit:`` waits, first come first
                served, and raises the selection error if the wait ends first
                (docs/tails.md, "Waiting for an eligible endpoint").

        Raises:
            EmptyPool: the pool holds no endpoint (discovery has delivered none yet, or
                its latest update left none).
            NoEligibleEndpoints: endpoints exist but none may take a permit now.
            ReadinessError: readiness failures quarantined every endpoint (the error names
                the last one; the per-reason counts are on its ``__cause__``).
            DiscoveryClosed: the stream ended under ``DiscoveryEnd.FAIL_CLOSED``.
            NotRunning: outside ``async with lb``.
            ConfigError: ``exclude`` is not a collection of endpoint ids, ``wait`` is not a
                finite number of seconds >= 0, or a hashing policy's ``key`` is unhashable.
            WrongThread: called from a thread other than the balancer's (a balancer
                belongs to one event loop).
        """
        if exclude is not NO_EXCLUDE:
            _check_exclude(exclude)
        if get_ident() != self._gate:  # one test: serving, and on the owner's thread
            self._refuse()
        if wait is not None:
            return PendingPermit(self._waiting, key, exclude, wait)
        pool = self._pool
        try:
            selected = pool.select(self._clock.now() if pool.needs_now else 0.0, key, exclude)
        except SelectionError as exc:
            self._refused(exc)
            raise
        if self._call_observers:
            return ObservedPermit(self._exit, selected, self._call_observers)
        return Permit(self._exit, selected)

    def _select(self, key: Hashable | None, exclude: Collection[str]) -> Permit:
        """A waiter's selection: ``acquire``'s, reporting nothing (a waiter's failed try is not a refusal)."""
        pool = self._pool
        selected = pool.select(self._clock.now() if pool.needs_now else 0.0, key, exclude)
        if self._call_observers:
            return ObservedPermit(self._exit, selected, self._call_observers)
        return Permit(self._exit, selected)

    def _refused(self, exc: SelectionError) -> None:
        """Report a failed selection; raise the readiness error that explains it, if one does."""
        if self._coordinator is not None:
            self._coordinator.refused(self._clock())  # demand: a waiting half-open round leases
        if isinstance(exc, NoEligibleEndpoints):
            readiness = self._membership.readiness_error()
            if readiness is not None:
                self._telemetry.selection_failed(readiness, self._clock())
                readiness.__cause__ = exc  # `raise ... from exc`, spelled so the compiled build keeps it
                raise readiness from exc
        self._telemetry.selection_failed(exc, self._clock())

    def _refuse(self) -> None:
        """Why ``acquire`` cannot select now: not running, another thread, or failed closed."""
        if not self._running:
            raise NotRunning("acquire() needs a running balancer: use it inside `async with lb:`")
        if get_ident() != self._owner:
            raise WrongThread(
                "acquire() was called from another thread: a LoadBalancer belongs to the event loop that "
                "runs its `async with` block; hand the call to that loop (anyio.from_thread.run)"
            )
        closed = DiscoveryClosed(DISCOVERY_CLOSED)
        self._telemetry.selection_failed(closed, self._clock())
        raise closed


def _check_exclude(exclude: object) -> None:
    if isinstance(exclude, str | bytes) or not isinstance(exclude, Collection):
        raise ConfigError("exclude", f"must be a collection of endpoint ids such as a list or a set, got {exclude!r}")
    for endpoint_id in exclude:
        if not isinstance(endpoint_id, str):
            raise ConfigError("exclude", f"must hold endpoint ids (strings), got {endpoint_id!r}")
