"""The retry decision of one logical request, pure: every retrying caller in poise_py shares it.

``LoadBalancer.call``, the httpx transport, the gRPC channel and the simulator each run
one :class:`RetryLoop` per logical request; what differs between them is only what they
pass in (the pool's size, the time left before a deadline), never the order of the checks.

Theory of operation: a request starts with :meth:`RetryLoop.start` (its first attempt is
a deposit in the retry budget). Each attempt goes to an endpoint not yet tried
(:attr:`RetryLoop.exclude`). After a failed attempt, :meth:`RetryLoop.after_fault` says
what happens next: another attempt, or an end with the reason. The order of the checks
is the contract, cheapest verdicts first and the budget last, because asking the budget
spends it:

1. a CALLER fault ends the request (the request is bad, not the endpoint);
2. running out of attempts ends it;
3. a deadline that has passed (``time_left <= 0``, when the caller has one) ends it;
4. a pool whose every endpoint was tried (``pool_size``, when the caller passes it) ends it;
5. the budget decides: a withdrawal means RETRY, a refusal is counted in
   :attr:`Budget.denied` and ends it.

A hedge (:meth:`RetryLoop.may_hedge`) is an attempt started while others are in flight:
it needs an attempt left, an endpoint not yet tried, and a withdrawal from the same budget.
The wait between attempts (``Backoff``) and the deadline are the driver's: it hands each
attempt what is left. No clock reads: time comes in as ``now``.
"""

from __future__ import annotations

import enum

from .._faults import Fault
from .._knobs import check_count
from ._budget import Budget

RETRYABLE = frozenset({Fault.TRANSIENT, Fault.SUSPECT, Fault.FATAL, Fault.PERMANENT})
"""Faults after which another endpoint is tried. Never CALLER: the request itself is bad."""


class AfterFault(enum.Enum):
    """What follows a failed attempt."""

    RETRY = "retry"
    """Try another endpoint (the budget granted a withdrawal)."""
    NOT_RETRYABLE = "not_retryable"
    """The fault says the request is bad: end with this error."""
    ATTEMPTS_SPENT = "attempts_spent"
    """Every allowed attempt was made."""
    DEADLINE_PASSED = "deadline_passed"
    """The caller's deadline has passed: no attempt would have any time."""
    POOL_SPENT = "pool_spent"
    """Every endpoint of the pool was tried (the budget was not asked)."""
    BUDGET_SPENT = "budget_spent"
    """The retry budget denied the retry (a dead pool does not multiply its load)."""


def check_attempts(attempts: object, field: str = "attempts") -> int:
    """``attempts`` as a validated int >= 1, or ConfigError naming ``field``."""
    return check_count(field, attempts)  # type: ignore[arg-type]


class RetryLoop:
    """The retry state of one logical request: endpoints tried, attempts made, the shared budget."""

    __slots__ = ("_attempts", "_budget", "_made", "_tried", "_withdrawn")

    def __init__(self, budget: Budget, attempts: object) -> None:
        self._budget = budget
        self._attempts = check_attempts(attempts)
        self._made = 0
        self._tried: list[str] = []
        self._withdrawn: float | None = None
        """When the budget granted the retry or hedge not yet sent, or None."""

    @property
    def exclude(self) -> list[str]:
        """The endpoints already tried (the next attempt avoids them); a live list."""
        return self._tried

    @property
    def attempts_made(self) -> int:
        """Attempts started so far."""
        return self._made

    def start(self, now: float) -> None:
        """The request begins: its first attempt is a deposit in the budget."""
        self._budget.deposit(now)

    def attempt(self, endpoint_id: str) -> None:
        """An attempt goes to ``endpoint_id`` (a withdrawal granted for it is spent)."""
        self._made += 1
        self._tried.append(endpoint_id)
        self._withdrawn = None

    def unsent(self) -> None:
        """The retry or hedge the budget granted found no endpoint: its withdrawal goes back."""
        if self._withdrawn is not None:
            self._budget.refund(self._withdrawn)
            self._withdrawn = None

    def _withdraw(self, now: float) -> bool:
        if not self._budget.try_withdraw(now):
            return False
        self._withdrawn = now
        return True

    def may_hedge(self, now: float, *, pool_size: int | None = None) -> bool:
        """Whether a hedge may start now (a True has withdrawn from the budget, as a retry does)."""
        if self._made >= self._attempts or not self._made:
            return False
        if pool_size is not None and len(self._tried) >= pool_size:
            return False
        return self._withdraw(now)

    def after_fault(
        self, fault: Fault, now: float, *, pool_size: int | None = None, time_left: float | None = None
    ) -> AfterFault:
        """The last attempt failed with ``fault``: what next (a RETRY has withdrawn from the budget).

        Args:
            fault: how the attempt's failure was classified.
            now: the budget's clock reading.
            pool_size: the pool's size, to stop without spending budget once every
                endpoint was tried; None when a failed selection ends the request instead.
            time_left: seconds before the caller's deadline; None without a deadline.
        """
        if fault not in RETRYABLE:
            return AfterFault.NOT_RETRYABLE
        if self._made >= self._attempts:
            return AfterFault.ATTEMPTS_SPENT
        if time_left is not None and time_left <= 0:
            return AfterFault.DEADLINE_PASSED
        if pool_size is not None and len(self._tried) >= pool_size:
            return AfterFault.POOL_SPENT
        if not self._withdraw(now):
            return AfterFault.BUDGET_SPENT
        return AfterFault.RETRY
