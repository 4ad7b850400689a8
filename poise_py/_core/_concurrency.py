"""Concurrency limits per endpoint (pure core): a fixed cap, or one that adapts (Netflix's algorithms).

An endpoint at its limit is not a candidate: the pool picks another one, and when every
candidate is at its limit the call is shed at once with :class:`~poise_py.Overloaded`
instead of queueing into a timeout. The limit is fixed (``max_in_flight``, a balancer
default that an endpoint's metadata may override) or adaptive
(:class:`AdaptiveConcurrency`), learned per endpoint from its calls as Netflix's
`concurrency-limits <https://github.com/Netflix/concurrency-limits>`_ learns a server's:

- :class:`AIMD` (``AIMDLimit``): additive increase, multiplicative decrease. A drop (an
  overload signal: a timeout, a 503 or 429, RESOURCE_EXHAUSTED) or a call slower than
  ``timeout`` multiplies the limit by ``backoff_ratio``; any other completed call adds one,
  but only while the limit is being used (``in_flight * 2 >= limit``).
- :class:`Gradient2` (``Gradient2Limit``): the ratio of a long-term average latency to the
  latest call's (``gradient = clamp(rtt_tolerance * long / short, 0.5, 1.0)``) shrinks the
  limit when calls queue; ``queue_size`` lets it grow while they do not:
  ``new = limit * gradient + queue_size``, smoothed as ``limit * (1 - smoothing) + new *
  smoothing``. The long average is an exponential average over ``long_window`` samples
  (a plain mean for its first ten), pulled down by 5% whenever it is more than twice the
  latest call (so it recovers after a long overload); the limit does not move while less
  than half of it is used (the caller, not the endpoint, is the bottleneck).

Both take the latency of each completed call, the number of calls in flight to the
endpoint when it completed (itself included), and whether it was a drop. A cancelled
call is not a sample. With ``window`` > 1 both update once per ``window`` completed calls,
from their mean latency, the most calls in flight and whether any was a drop: Netflix's
``WindowedLimit``, which its examples put around every algorithm, counted in calls rather
than seconds because this core has no clock (``_limits.Window``). This module is the
configuration (interpreted in the compiled build, as every public attrs class is); each
configuration's ``limiter()`` makes the running limit, whose arithmetic runs on every
completed call and lives, with each endpoint's ``LoadControl`` and the pool's ``LoadState``,
in :mod:`poise_py._core._limits` (compiled). No clock, no I/O.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from .._errors import ConfigError
from .._knobs import check_count, check_duration, check_number, optional
from ._limits import AIMDLimiter, Gradient2Limiter, RunningLimit

MAX_LIMIT = 1 << 20
"""The largest limit a knob accepts."""
MAX_WINDOW = 1 << 20
"""The most completed calls a window may take (``window=``)."""


def _check_bounds(owner: str, initial: int, low: int, high: int) -> None:
    check_count(f"{owner}.min_limit", low, maximum=MAX_LIMIT)
    check_count(f"{owner}.max_limit", high, maximum=MAX_LIMIT)
    check_count(f"{owner}.initial_limit", initial, maximum=MAX_LIMIT)
    if low > high:
        raise ConfigError(f"{owner}.max_limit", f"must be >= min_limit ({low}), got {high}")
    if not low <= initial <= high:
        span = f"[min_limit, max_limit] = [{low}, {high}]"
        raise ConfigError(f"{owner}.initial_limit", f"must be in {span}, got {initial}")


@attrs.frozen(kw_only=True)
class AIMD:
    """Additive increase, multiplicative decrease (Netflix's ``AIMDLimit``).

    Attributes:
        initial_limit: the limit before any call completes.
        min_limit: the limit never goes below this.
        max_limit: nor above this.
        backoff_ratio: the factor a drop multiplies the limit by, in [0.5, 1).
        timeout: a call slower than this, in seconds, counts as a drop (None: only
            overload signals do). With ``window`` > 1 it is the window's mean latency
            that is compared, so by Little's law the limit settles near ``capacity *
            timeout / service time``: 1.1 times the unloaded mean latency, on windows of
            twenty calls, holds it within a quarter of an endpoint's capacity
            (docs/overload.md).
        window: completed calls per update (1: every call updates the limit).
    """

    name: ClassVar[str] = "aimd"

    initial_limit: int = 20
    min_limit: int = 1
    max_limit: int = 1000
    backoff_ratio: float = 0.9
    timeout: float | None = None
    window: int = 1

    def __attrs_post_init__(self) -> None:
        _check_bounds("AIMD", self.initial_limit, self.min_limit, self.max_limit)
        check_number("AIMD.backoff_ratio", self.backoff_ratio, low=0.5, high=1.0, high_open=True)
        optional(check_duration, "AIMD.timeout", self.timeout)
        check_count("AIMD.window", self.window, maximum=MAX_WINDOW)

    def limiter(self) -> AIMDLimiter:
        """A fresh running limit."""
        return AIMDLimiter(
            initial_limit=self.initial_limit,
            min_limit=self.min_limit,
            max_limit=self.max_limit,
            backoff_ratio=self.backoff_ratio,
            timeout=self.timeout,
            window=self.window,
        )


@attrs.frozen(kw_only=True)
class Gradient2:
    """Latency gradient with a queue allowance (Netflix's ``Gradient2Limit``).

    Attributes:
        initial_limit: the limit before any call completes.
        min_limit: the limit never goes below this.
        max_limit: nor above this (Netflix's ``maxConcurrency``).
        smoothing: how much of each new estimate replaces the limit, in (0, 1].
        rtt_tolerance: how much slower than the long-term average a call may be before
            the limit shrinks (>= 1: 1.5 tolerates 50%).
        long_window: the long-term average's window, in samples.
        queue_size: how much the limit may grow per update while calls do not queue.
        window: completed calls per update (1: every call updates the limit).
    """

    name: ClassVar[str] = "gradient2"

    initial_limit: int = 20
    min_limit: int = 1
    max_limit: int = 1000
    smoothing: float = 0.2
    rtt_tolerance: float = 1.5
    long_window: int = 600
    queue_size: float = 4.0
    window: int = 1

    def __attrs_post_init__(self) -> None:
        _check_bounds("Gradient2", self.initial_limit, self.min_limit, self.max_limit)
        check_count("Gradient2.window", self.window, maximum=MAX_WINDOW)
        check_number("Gradient2.smoothing", self.smoothing, low=0.0, high=1.0, low_open=True)
        check_number("Gradient2.rtt_tolerance", self.rtt_tolerance, low=1.0)
        check_count("Gradient2.long_window", self.long_window, maximum=1 << 30)
        check_number("Gradient2.queue_size", self.queue_size, low=0.0)

    def limiter(self) -> Gradient2Limiter:
        """A fresh running limit."""
        return Gradient2Limiter(
            initial_limit=self.initial_limit,
            min_limit=self.min_limit,
            max_limit=self.max_limit,
            smoothing=self.smoothing,
            rtt_tolerance=self.rtt_tolerance,
            long_window=self.long_window,
            queue_size=self.queue_size,
            window=self.window,
        )


@attrs.frozen
class AdaptiveConcurrency:
    """Adapt each endpoint's concurrency limit from its calls: ``AdaptiveConcurrency(Gradient2())``.

    Attributes:
        algorithm: :class:`Gradient2` (default) or :class:`AIMD`.
    """

    algorithm: AIMD | Gradient2 = attrs.field(factory=Gradient2)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.algorithm, AIMD | Gradient2):
            raise ConfigError(
                "AdaptiveConcurrency.algorithm",
                f"must be poise.Gradient2() or poise.AIMD(), got {self.algorithm!r}",
            )

    def limiter(self) -> RunningLimit:
        """A fresh running limit for one endpoint."""
        return self.algorithm.limiter()


@attrs.frozen(kw_only=True)
class SlowStart:
    """Ramp a joining or readmitted endpoint's traffic up over ``window`` seconds (Envoy's slow start).

    Its effective weight is ``weight * max(min_weight, time_factor ** (1 / aggression))``,
    ``time_factor = max(t, 1) / window``, ``t`` the seconds since it joined or was
    readmitted, until ``t`` reaches ``window``
    (`Envoy's slow start mode
    <https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/upstream/load_balancing/slow_start>`_).

    Attributes:
        window: seconds to full weight.
        aggression: > 0; 1 ramps linearly, more ramps faster at first, less slower.
        min_weight: the share of its weight an endpoint gets at least, in (0, 1].
    """

    window: float = 30.0
    aggression: float = 1.0
    min_weight: float = 0.1

    def __attrs_post_init__(self) -> None:
        check_duration("SlowStart.window", self.window)
        check_number("SlowStart.aggression", self.aggression, low=0.0, low_open=True)
        check_number("SlowStart.min_weight", self.min_weight, low=0.0, high=1.0, low_open=True)

    def factor(self, elapsed: float) -> float:
        """The share of its weight an endpoint ``elapsed`` seconds into its ramp gets (1.0 once done)."""
        window = self.window
        if elapsed >= window:
            return 1.0
        # Clamped before the power: a window under a second makes Envoy's time factor exceed
        # 1, which a small aggression would raise past a float (the result is the same).
        time_factor = min(1.0, max(elapsed, 1.0) / window)
        ramp: float = time_factor ** (1.0 / self.aggression)
        return min(1.0, max(self.min_weight, ramp))


@attrs.frozen(kw_only=True)
class LoadPolicy:
    """The balancer's load knobs, as the pool takes them (each None when off)."""

    max_in_flight: int | None = None
    adaptive: AdaptiveConcurrency | None = None
    slow_start: SlowStart | None = None

    @property
    def limits(self) -> bool:
        """Whether any endpoint may have a concurrency limit."""
        return self.max_in_flight is not None or self.adaptive is not None
