"""The pool's one outgoing interface: what it tells the shell, as a typed protocol (pure core).

:class:`~poise_py._core._pool.Pool` reports everything the shell must react to through
one :class:`PoolListener` (given at construction or by ``Pool.listen``): circuit moves, an endpoint's
last permit ending, panic episodes, degradation, departures, a newly armed timer and
probe results that moved nothing, a slow start's beginning and end, and an adaptive
limit's changes. The calls are synchronous and come from inside pool
operations, so a listener only records or forwards (it must not call back into the
pool). :class:`NullListener` ignores everything; subclass it to hear only some events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ._circuit import Transition
    from ._record import Member


class PoolListener(Protocol):
    """What a :class:`~poise_py._core._pool.Pool` reports, each from a cold path."""

    def transition(self, member: Member, transition: Transition) -> None:
        """A circuit moved (events, logs, fleet mirroring, the timer's next deadline)."""

    def idle(self, member: Member) -> None:
        """The last permit of an endpoint that takes no new ones ended (drain waiters)."""

    def panic(self, tier: int, *, started: bool, healthy_share: float) -> None:
        """A tier started (``started``) or stopped panicking."""

    def degraded(self, member: Member, degraded: bool) -> None:  # noqa: FBT001
        """An endpoint became degraded (``max_ejection_percent`` refused its trip) or stopped."""

    def left(self, states: list[Member]) -> None:
        """Endpoints left the pool, together (telemetry folds their counters)."""

    def armed(self) -> None:
        """A timer deadline appeared that no transition announced (the first outlier evaluation)."""

    def probe_result(self, member: Member) -> None:
        """A current-epoch probe result moved nothing, or a probe was cancelled (a slot is free)."""

    def ramp(self, member: Member, *, started: bool) -> None:
        """An endpoint's slow start began (``started``) or ended."""

    def limit_changed(self, member: Member, limit: int, previous: int) -> None:
        """An endpoint's adaptive concurrency limit moved a step (a quarter, at least 2) from the last report."""

    def replanned(self) -> None:
        """The endpoints that may take permits were counted again: some may have become eligible (waiters)."""


class NullListener:
    """A :class:`PoolListener` that ignores every report; subclass it to hear some."""

    def transition(self, member: Member, transition: Transition) -> None:
        """Ignore a circuit move."""

    def idle(self, member: Member) -> None:
        """Ignore an idle endpoint."""

    def panic(self, tier: int, *, started: bool, healthy_share: float) -> None:
        """Ignore a panic episode."""

    def degraded(self, member: Member, degraded: bool) -> None:  # noqa: FBT001
        """Ignore a degradation change."""

    def left(self, states: list[Member]) -> None:
        """Ignore departures."""

    def armed(self) -> None:
        """Ignore a new deadline."""

    def probe_result(self, member: Member) -> None:
        """Ignore a probe result."""

    def ramp(self, member: Member, *, started: bool) -> None:
        """Ignore a slow start's beginning or end."""

    def limit_changed(self, member: Member, limit: int, previous: int) -> None:
        """Ignore a limit change."""

    def replanned(self) -> None:
        """Ignore a recount of the eligible endpoints."""
