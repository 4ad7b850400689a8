"""A retry budget (Finagle style, pure core): retries may add a fraction of recent traffic, plus a floor.

Over the last ``ttl`` seconds (in ``buckets`` slices) the budget counts first attempts
(deposits) and retries (withdrawals). A retry is allowed while
``retries < percent * requests + min_per_second * ttl``. A dead pool therefore sees at
most ``1 + percent`` times its normal load from retries, not ``attempts`` times; the
floor lets a quiet client still retry a few requests.
"""

from __future__ import annotations

import attrs

from .._knobs import RESOLUTION, check_duration, check_number, check_share


@attrs.frozen(kw_only=True)
class RetryBudget:
    """Retry budget knobs for ``LoadBalancer.call``.

    Attributes:
        percent: retries allowed as a fraction of first attempts over ``ttl`` (0 to 10;
            0.2, the default, is 20%: a fraction like every share knob, despite the name).
        min_per_second: a floor of retries per second of ``ttl``, whatever the traffic.
        ttl: how long deposits and withdrawals are remembered, seconds.
    """

    percent: float = 0.2
    min_per_second: float = 10.0
    ttl: float = 10.0

    def __attrs_post_init__(self) -> None:
        check_share("RetryBudget.percent", self.percent, high=10.0)
        check_number("RetryBudget.min_per_second", self.min_per_second, low=0.0)
        check_duration("RetryBudget.ttl", self.ttl, minimum=RESOLUTION * 10)  # ten slices of at least a millisecond


class Budget:
    """The running state of a :class:`RetryBudget`. Pure: every method takes ``now``."""

    __slots__ = ("_config", "_deposits", "_floor", "_n", "_ticks", "_width", "_withdrawals", "denied")

    def __init__(self, config: RetryBudget, buckets: int = 10) -> None:
        self._config = config
        self._n = buckets
        self._width = config.ttl / buckets
        self._ticks = [-1] * buckets
        self._deposits = [0] * buckets
        self._withdrawals = [0] * buckets
        self._floor = config.min_per_second * config.ttl
        self.denied = 0
        """Withdrawals refused so far: the retries the budget skipped (``lb.retries_denied``)."""

    def _slot(self, now: float) -> int:
        tick = int(now // self._width)
        i = tick % self._n
        if self._ticks[i] != tick:
            self._ticks[i] = tick
            self._deposits[i] = self._withdrawals[i] = 0
        return i

    def _totals(self, now: float) -> tuple[int, int]:
        oldest = int(now // self._width) - self._n + 1
        deposits = withdrawals = 0
        for i, tick in enumerate(self._ticks):
            if tick >= oldest:
                deposits += self._deposits[i]
                withdrawals += self._withdrawals[i]
        return deposits, withdrawals

    def deposit(self, now: float) -> None:
        """Count one first attempt."""
        self._deposits[self._slot(now)] += 1

    def try_withdraw(self, now: float) -> bool:
        """Take one retry from the budget if it allows one; False (counted in ``denied``) if it is spent."""
        deposits, withdrawals = self._totals(now)
        if withdrawals >= self._config.percent * deposits + self._floor:
            self.denied += 1
            return False
        self._withdrawals[self._slot(now)] += 1
        return True

    def refund(self, at: float) -> None:
        """Give back a withdrawal made at ``at`` that went unspent (its retry or hedge found no endpoint).

        Nothing if ``at``'s slice has passed out of the window since: its withdrawals no
        longer count anyway.
        """
        tick = int(at // self._width)
        i = tick % self._n
        if self._ticks[i] == tick and self._withdrawals[i]:
            self._withdrawals[i] -= 1

    def balance(self, now: float) -> float:
        """Retries still allowed now (may be fractional)."""
        deposits, withdrawals = self._totals(now)
        return max(0.0, self._config.percent * deposits + self._floor - withdrawals)
