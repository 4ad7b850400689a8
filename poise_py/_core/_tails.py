"""Cutting the tail and pacing retries (pure core): hedged requests and retry backoff.

Configuration a caller builds, and the pure state behind it; the async driver
(:mod:`poise_py._attempts`) and the simulator read both the same way.

- :class:`Hedge`: after ``delay`` (seconds, or a :class:`Quantile` of the latency this
  balancer measures for the call site) with no answer, send the same request to an endpoint
  not yet tried; again every ``delay`` until ``max_attempts`` are in flight. The first
  success wins; the others are cancelled through their permits (no strike, no success).
  As in gRPC's hedging policy (gRFC A6, "Hedging Policy": ``maxAttempts``,
  ``hedgingDelay``) and Dean and Barroso's "The Tail at Scale" (CACM 2013), with
  Finagle's bound on the load it adds (``max_extra_load``).
- :class:`HedgeState`: one call site's measured latencies (the last
  :data:`SAMPLES` successful attempts) and its extra-load allowance: each request earns
  ``max_extra_load`` of a hedge, a hedge spends one, at most :data:`BURST` are kept. The
  allowance starts with one hedge, so over any run ``hedges <= 1 + max_extra_load *
  requests``.
  A hedge must also win a withdrawal from the balancer's retry budget: hedges and retries
  draw from one budget.
- :class:`RetryBackoff`: gRPC's retry backoff (gRFC A6, "Exponential backoff"): the n-th retry
  waits ``random(0, min(initial * multiplier ** (n - 1), maximum))`` (full jitter), or a
  server's pushback when the failed answer carried one (``grpc-retry-pushback-ms``, an
  HTTP Retry-After).

No clock reads and no I/O: time and random draws come in as arguments.
"""

from __future__ import annotations

import bisect
import math
from typing import Final

import attrs

from .._errors import ConfigError
from .._knobs import check_count, check_duration, check_number, check_share

__all__ = ["BURST", "SAMPLES", "Hedge", "HedgeState", "Quantile", "RetryBackoff"]

SAMPLES: Final = 1000
"""How many recent successful attempts a :class:`HedgeState` keeps to read its quantile from."""
RESORT_EVERY: Final = 50
"""A quantile is read again from the samples after this many new ones (not on every call)."""
BURST: Final = 10.0
"""The most hedges an idle call site saves up for a burst of slow calls."""


def _check_q(q: object) -> float:
    return check_number("Quantile.q", q, low=0.0, high=1.0, low_open=True, high_open=True)  # type: ignore[arg-type]


@attrs.frozen(kw_only=True)
class Quantile:
    """A hedge delay read from measured latency: the ``q`` quantile of the call site's successful attempts.

    Attributes:
        q: the quantile, in (0, 1): 0.95 waits as long as 95% of calls take.
        min_samples: successful attempts measured before the quantile is trusted; until
            then the delay is ``initial``.
        initial: the delay (seconds) before ``min_samples`` are measured; None (default)
            sends no hedge until then.
    """

    q: float = attrs.field(converter=_check_q)
    min_samples: int = 50
    initial: float | None = None

    def __attrs_post_init__(self) -> None:
        check_count("Quantile.min_samples", self.min_samples, maximum=SAMPLES)
        if self.initial is not None:
            check_duration("Quantile.initial", self.initial, allow_zero=True)  # as Hedge.delay: 0 hedges at once


def _check_delay(delay: object) -> float | Quantile:
    if isinstance(delay, Quantile):
        return delay
    return check_duration("Hedge.delay", delay, allow_zero=True)  # type: ignore[arg-type]


@attrs.frozen(kw_only=True)
class Hedge:
    """Hedged requests for ``lb.call`` (and the httpx transport and the gRPC channel).

    Attributes:
        delay: seconds without an answer before the next hedge is sent, or a
            :class:`Quantile` of the latency measured for the call site
            (``Hedge.quantile(0.95)``).
        max_attempts: the most attempts of one request in flight at once, the first
            included (gRPC's ``maxAttempts``; 2 sends at most one hedge).
        max_extra_load: hedges allowed as a fraction of requests (0.02: two hedges per
            hundred requests at most). Each hedge also needs the retry budget's consent.
    """

    delay: float | Quantile = attrs.field(converter=_check_delay)
    max_attempts: int = 2
    max_extra_load: float = 0.02

    def __attrs_post_init__(self) -> None:
        check_count("Hedge.max_attempts", self.max_attempts, minimum=2, maximum=10)
        check_share("Hedge.max_extra_load", self.max_extra_load, low_open=True)

    @classmethod
    def quantile(
        cls,
        q: float,
        *,
        min_samples: int = 50,
        initial: float | None = None,
        max_attempts: int = 2,
        max_extra_load: float = 0.02,
    ) -> Hedge:
        """A hedge sent once an attempt has run longer than the ``q`` quantile of measured latency."""
        return cls(
            delay=Quantile(q=q, min_samples=min_samples, initial=initial),
            max_attempts=max_attempts,
            max_extra_load=max_extra_load,
        )


class HedgeState:
    """One call site's hedging state: its recent latencies and its extra-load allowance. Pure.

    Attributes:
        requests: requests started with this hedge policy.
        sent: hedges sent.
        won: hedges whose answer was the request's answer.
        totals: the balancer's ``[requests, sent, won]`` over every call site, counted with
            this one's (a call site forgotten later takes nothing back from them).
    """

    __slots__ = (
        "_delay",
        "_fresh",
        "_next",
        "_samples",
        "_sorted",
        "_tokens",
        "hedge",
        "requests",
        "sent",
        "totals",
        "won",
    )

    def __init__(self, hedge: Hedge, totals: list[int] | None = None) -> None:
        self.hedge = hedge
        self.totals: list[int] = [0, 0, 0] if totals is None else totals
        self._samples: list[float] = []
        self._next = 0
        self._sorted: list[float] = []
        self._fresh = 0
        self._tokens = 1.0  # one hedge to start with: a quiet call site can hedge its first slow call
        delay = hedge.delay
        self._delay: float | None = delay if isinstance(delay, float) else delay.initial
        self.requests = 0
        self.sent = 0
        self.won = 0

    def started(self) -> None:
        """A request begins: it earns ``max_extra_load`` of a hedge."""
        self.requests += 1
        self.totals[0] += 1
        self._tokens = min(BURST, self._tokens + self.hedge.max_extra_load)

    def delay(self) -> float | None:
        """Seconds without an answer before a hedge is sent now; None while the quantile is unmeasured."""
        return self._delay

    def may_hedge(self) -> bool:
        """Whether the extra-load allowance holds a hedge (it is not spent: :meth:`spend` does)."""
        return self._tokens >= 1.0

    def spend(self) -> None:
        """A hedge is sent: it costs one from the allowance."""
        self._tokens -= 1.0
        self.sent += 1
        self.totals[1] += 1

    def win(self) -> None:
        """A hedge's answer was the request's answer."""
        self.won += 1
        self.totals[2] += 1

    def observe(self, latency: float) -> None:
        """A successful attempt took ``latency`` seconds (a cancelled or failed one is not a sample)."""
        delay = self.hedge.delay
        if isinstance(delay, float) or not latency >= 0.0 or math.isinf(latency):
            return
        samples = self._samples
        if len(samples) < SAMPLES:
            samples.append(latency)
        else:
            samples[self._next] = latency
            self._next = (self._next + 1) % SAMPLES
        self._fresh += 1
        n = len(samples)
        if n >= delay.min_samples and (self._fresh >= RESORT_EVERY or n == delay.min_samples):
            self._fresh = 0
            self._sorted = sorted(samples)
            self._delay = quantile(self._sorted, delay.q)

    def measured(self) -> int:
        """How many latencies the quantile is read from."""
        return len(self._samples)


def quantile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile of ``sorted_values`` (nearest rank: the smallest value with at least ``q`` at or below it)."""
    n = len(sorted_values)
    if not n:
        raise ValueError("no values")
    rank = max(1, math.ceil(q * n))
    return sorted_values[rank - 1]


def rank_of(sorted_values: list[float], value: float) -> float:
    """The share of ``sorted_values`` at or below ``value`` (for tests and reports)."""
    return bisect.bisect_right(sorted_values, value) / len(sorted_values) if sorted_values else 0.0


def _check_multiplier(value: object) -> float:
    return check_number("RetryBackoff.multiplier", value, low=1.0)  # type: ignore[arg-type]


@attrs.frozen(kw_only=True)
class RetryBackoff:
    """The wait between a failed attempt and the next (gRPC's retry backoff, full jitter).

    The n-th retry waits ``random(0, min(initial * multiplier ** (n - 1), maximum))``
    seconds. When the failed answer carried a server's pushback (``grpc-retry-pushback-ms``,
    an HTTP Retry-After: the classification's ``retry_after``), that is the wait instead;
    a pushback longer than the call's deadline leaves ends the call.

    Attributes:
        initial: the first retry's ceiling, seconds (> 0).
        multiplier: how much the ceiling grows per retry (>= 1).
        maximum: the ceiling's ceiling, seconds (>= initial).
    """

    initial: float = 0.05
    multiplier: float = attrs.field(default=2.0, converter=_check_multiplier)
    maximum: float = 1.0

    def __attrs_post_init__(self) -> None:
        check_duration("RetryBackoff.initial", self.initial)
        check_duration("RetryBackoff.maximum", self.maximum)
        if self.maximum < self.initial:
            raise ConfigError("RetryBackoff.maximum", f"must be >= initial ({self.initial:g}), got {self.maximum!r}")

    def ceiling(self, retry: int) -> float:
        """The most the ``retry``-th retry (1 for the first) may wait.

        ``min(initial * multiplier ** (retry - 1), maximum)``.
        """
        if retry < 1:
            raise ValueError(f"retry counts from 1, got {retry}")
        exponent = retry - 1
        # multiplier ** exponent overflows for long retry chains; the maximum caps it anyway.
        if self.multiplier > 1.0 and exponent * math.log(self.multiplier) > math.log(self.maximum / self.initial):
            return self.maximum
        return min(self.initial * self.multiplier**exponent, self.maximum)

    def delay(self, retry: int, unit: float, pushback: float | None = None) -> float:
        """The wait before the ``retry``-th retry: the server's ``pushback`` if any, else ``unit * ceiling``.

        ``unit`` is a uniform draw in [0, 1) (full jitter).
        """
        if pushback is not None:
            return max(0.0, pushback)
        return unit * self.ceiling(retry)
