"""The retry decision of one logical request, pure: ``LoadBalancer.call`` and the simulator share it.

Theory of operation: a request starts with :meth:`RetryLoop.start` (its first attempt is
a deposit in the retry budget). Each attempt goes to an endpoint not yet tried
(:attr:`RetryLoop.exclude`). After a failed attempt, :meth:`RetryLoop.after_fault` says
what happens next: another attempt (the fault is retryable, attempts remain, and the budget
grants a withdrawal), or an end with the reason. The order of the checks is the contract: a
CALLER fault ends the request before the budget is asked, and running out of attempts never
spends budget. No clock reads: time comes in as ``now``.
"""

from __future__ import annotations

import enum

from .._faults import Fault
from .._knobs import check_count
from ._budget import Budget

RETRYABLE = frozenset({Fault.TRANSIENT, Fault.SUSPECT, Fault.FATAL, Fault.PERMANENT})
"""Faults after which another endpoint is tried. Never CALLER: the request itself is bad."""


class Next(enum.Enum):
    """What follows a failed attempt."""

    RETRY = "retry"
    """Try another endpoint (the budget granted a withdrawal)."""
    NOT_RETRYABLE = "not_retryable"
    """The fault says the request is bad: end with this error."""
    ATTEMPTS_SPENT = "attempts_spent"
    """Every allowed attempt was made."""
    BUDGET_SPENT = "budget_spent"
    """The retry budget denied the retry (a dead pool does not multiply its load)."""


def check_attempts(attempts: object) -> int:
    """``attempts`` as a validated int >= 1, or ConfigError."""
    return check_count("attempts", attempts)  # type: ignore[arg-type]


class RetryLoop:
    """The retry state of one logical request: endpoints tried, attempts made, the shared budget."""

    __slots__ = ("_attempts", "_budget", "_made", "_tried")

    def __init__(self, budget: Budget, attempts: int) -> None:
        self._budget = budget
        self._attempts = check_attempts(attempts)
        self._made = 0
        self._tried: list[str] = []

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
        """An attempt goes to ``endpoint_id``."""
        self._made += 1
        self._tried.append(endpoint_id)

    def after_fault(self, fault: Fault, now: float) -> Next:
        """The last attempt failed with ``fault``: what next (a RETRY has withdrawn from the budget)."""
        if fault not in RETRYABLE:
            return Next.NOT_RETRYABLE
        if self._made >= self._attempts:
            return Next.ATTEMPTS_SPENT
        if not self._budget.try_withdraw(now):
            return Next.BUDGET_SPENT
        return Next.RETRY
