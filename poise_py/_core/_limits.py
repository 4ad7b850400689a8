"""Running load state (pure core, compiled): adaptive limiters, each endpoint's limit and ramp.

The configuration users build (:class:`~poise_py.AIMD`, :class:`~poise_py.Gradient2`,
:class:`~poise_py.SlowStart`...) lives in :mod:`poise_py._core._concurrency` and stays
interpreted; what it makes runs here, on every completed call while an adaptive limit is
on: :class:`AIMDLimiter` and :class:`Gradient2Limiter` (Netflix's ``AIMDLimit`` and
``Gradient2Limit`` updates, their formulas as published), the call-counted
:class:`Window`, one endpoint's :class:`LoadControl`, and the pool's :class:`LoadState`,
whose flags the pool reads on every selection. The running state reads the configuration
through the protocols :class:`LoadKnobs` and :class:`RampShape`, so this compiled module
imports none of the interpreted one. No clock and no I/O.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

UNLIMITED = 1 << 62
"""The limit of an endpoint without one (a count no pool reaches)."""


class Window:
    """Completed calls gathered into one sample: Netflix's ``WindowedLimit`` (average sample window), in calls.

    Netflix closes a window after a time (one second by default) once it holds at least
    ten calls; the pure core has no clock, so a window here closes after ``size`` calls.
    The sample it makes is their mean latency, the most calls that were in flight, and
    whether any of them was a drop.
    """

    size: int
    _count: int
    _drop: bool
    _in_flight: int
    _total: float

    __slots__ = ("_count", "_drop", "_in_flight", "_total", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._count = 0
        self._total = 0.0
        self._in_flight = 0
        self._drop = False

    def add(self, rtt: float, in_flight: int, *, drop: bool) -> tuple[float, int, bool] | None:
        """Add a completed call; when the window is full, its sample (and the window starts again)."""
        self._count += 1
        self._total += rtt
        self._in_flight = max(self._in_flight, in_flight)
        self._drop = self._drop or drop
        if self._count < self.size:
            return None
        window = (self._total / self._count, self._in_flight, self._drop)
        self._count = 0
        self._total = 0.0
        self._in_flight = 0
        self._drop = False
        return window


class RunningLimit:
    """One endpoint's running adaptive limit: :class:`AIMDLimiter` or :class:`Gradient2Limiter`.

    A base class rather than a union so that the compiled build calls :meth:`sample`
    through its method table, on every timed call.
    """

    limit: int
    """The whole number of calls the endpoint may have in flight now (>= 1)."""

    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def sample(self, rtt: float, in_flight: int, *, drop: bool) -> int:
        """Feed one completed call (its latency, the calls in flight then, whether it was a drop); the new limit."""
        raise NotImplementedError


class AIMDLimiter(RunningLimit):
    """One endpoint's ``AIMD`` limit (the knobs copied in: read on every completed call)."""

    limit: int
    _min: int
    _max: int
    _backoff: float
    _timeout: float | None
    _window: Window | None

    __slots__ = ("_backoff", "_max", "_min", "_timeout", "_window")

    def __init__(
        self,
        *,
        initial_limit: int,
        min_limit: int,
        max_limit: int,
        backoff_ratio: float,
        timeout: float | None,
        window: int,
    ) -> None:
        super().__init__(initial_limit)
        self._min = min_limit
        self._max = max_limit
        self._backoff = backoff_ratio
        self._timeout = timeout
        self._window = Window(window) if window > 1 else None

    def sample(self, rtt: float, in_flight: int, *, drop: bool) -> int:
        """``AIMDLimit._update``: decrease on a drop (or a call over ``timeout``), else grow by one if used."""
        if self._window is not None:
            window = self._window.add(rtt, in_flight, drop=drop)
            if window is None:
                return self.limit
            rtt, in_flight, drop = window
        limit = self.limit
        timeout = self._timeout
        if drop or (timeout is not None and rtt > timeout):
            limit = int(limit * self._backoff)
            limit = max(limit, self._min)
        elif in_flight * 2 >= limit:
            if limit < self._max:
                limit += 1
        else:
            return limit  # not used enough to grow (a comparison, not min/max: every call runs this)
        self.limit = limit
        return limit


class ExpAverage:
    """Netflix's ``ExpAvgMeasurement``: a mean of the first ``warmup`` samples, then an EMA over ``window``."""

    value: float
    _count: int
    _factor: float
    _sum: float
    _warmup: int

    __slots__ = ("_count", "_factor", "_sum", "_warmup", "value")

    def __init__(self, window: int, warmup: int = 10) -> None:
        self._factor = 2.0 / (window + 1)
        self._warmup = warmup
        self._count = 0
        self._sum = 0.0
        self.value = 0.0

    def add(self, sample: float) -> float:
        """Add a sample; return the average."""
        if self._count < self._warmup:
            self._count += 1
            self._sum += sample
            self.value = self._sum / self._count
        else:
            factor = self._factor
            self.value = self.value * (1 - factor) + sample * factor
        return self.value


class Gradient2Limiter(RunningLimit):
    """One endpoint's ``Gradient2`` limit (kept as a float, read as a whole number; the knobs copied in)."""

    estimate: float
    limit: int
    _min: float
    _max: float
    _tolerance: float
    _queue: float
    _smoothing: float
    _long: ExpAverage
    _window: Window | None

    __slots__ = ("_long", "_max", "_min", "_queue", "_smoothing", "_tolerance", "_window", "estimate")

    def __init__(
        self,
        *,
        initial_limit: int,
        min_limit: int,
        max_limit: int,
        smoothing: float,
        rtt_tolerance: float,
        long_window: int,
        queue_size: float,
        window: int,
    ) -> None:
        super().__init__(initial_limit)
        self._min = float(min_limit)
        self._max = float(max_limit)
        self._tolerance = float(rtt_tolerance)
        self._queue = float(queue_size)
        self._smoothing = float(smoothing)
        self._long = ExpAverage(long_window)
        self._window = Window(window) if window > 1 else None
        self.estimate = float(initial_limit)
        """The estimated limit, unrounded."""

    @property
    def long_rtt(self) -> float:
        """The long-term average latency (0.0 before any sample)."""
        return self._long.value

    def sample(self, rtt: float, in_flight: int, *, drop: bool) -> int:
        """``Gradient2Limit._update`` (a drop is a sample like any other: its latency speaks)."""
        if self._window is not None:
            window = self._window.add(rtt, in_flight, drop=drop)
            if window is None:
                return self.limit
            rtt, in_flight, _ = window
        del drop  # Gradient2 reads latency only; a timeout's latency is its deadline
        # Clamps are written as comparisons, not min/max calls: every timed call runs this.
        short = rtt if rtt > 1e-9 else 1e-9
        long = self._long.add(short)
        if long / short > 2:
            self._long.value = long * 0.95
        estimate = self.estimate
        if in_flight < estimate / 2:
            return self.limit
        gradient = self._tolerance * long / short  # clamped to [0.5, 1.0]
        if gradient > 1.0:
            gradient = 1.0
        elif gradient < 0.5:
            gradient = 0.5
        smoothing = self._smoothing
        new = estimate * gradient + self._queue
        new = estimate * (1 - smoothing) + new * smoothing
        if new > self._max:  # clamped to [min_limit, max_limit]
            new = self._max
        elif new < self._min:
            new = self._min
        self.estimate = new
        limit = math.floor(new)
        self.limit = limit = limit if limit > 1 else 1
        return limit


class LoadControl:
    """One endpoint's load state, kept beside its record (only while a load knob is on).

    Attributes:
        cap: the fixed cap (its metadata's ``max_in_flight``, else the balancer's), or
            :data:`UNLIMITED`.
        limiter: its adaptive limit, or None.
        quota: the calls its provider's quota has left (rate-limit headers), or
            :data:`UNLIMITED` while none was said.
        limit: the least of the cap, the adaptive limit and the quota: it is not a
            candidate while this many calls are in flight.
        ramp_since: when its slow start began, or None when it is not ramping.
        shape: the ramp it follows while :attr:`ramp_since` is set (the balancer's slow
            start, or the one after a recall), else None.
        share: the share of its provider's quota left (1.0 while none was said): its
            effective weight falls with it.
        thins: whether a pick of it is kept only with some probability (it ramps, or its
            quota's share is under 1): the one flag the hot path reads for both.
        reported: the limit last reported as an event.
    """

    cap: int
    limit: int
    limiter: RunningLimit | None
    quota: int
    ramp_since: float | None
    reported: int
    shape: RampShape | None
    share: float
    thins: bool

    __slots__ = ("cap", "limit", "limiter", "quota", "ramp_since", "reported", "shape", "share", "thins")

    def __init__(self, cap: int, limiter: RunningLimit | None) -> None:
        self.cap = cap
        self.limiter = limiter
        self.quota = UNLIMITED
        self.limit = cap if limiter is None else min(cap, limiter.limit)
        self.ramp_since = None
        self.shape = None
        self.share = 1.0
        self.thins = False
        self.reported = self.limit
        """The limit last reported as an event (telemetry's bookkeeping)."""

    def ramp(self, since: float | None, shape: RampShape | None = None) -> None:
        """Start (at ``since``, following ``shape``) or end (``since`` None) its slow start."""
        self.ramp_since = since
        self.shape = shape if since is not None else None
        self.thins = since is not None or self.share < 1.0

    def factor(self, now: float) -> float:
        """The share of its weight its ramp gives it at ``now`` (1.0 when it is not ramping)."""
        since, shape = self.ramp_since, self.shape
        if since is None or shape is None:
            return 1.0
        return min(1.0, shape.factor(now - since))

    def set_share(self, share: float) -> None:
        """Take the share of its provider's quota left (0 to 1; 1.0: whole, or none said)."""
        self.share = min(1.0, max(0.0, share))
        self.thins = self.ramp_since is not None or self.share < 1.0

    def _relimit(self) -> None:
        limiter = self.limiter
        limit = self.cap if limiter is None else min(self.cap, limiter.limit)
        self.limit = min(limit, self.quota)

    def recap(self, cap: int) -> None:
        """Take a new fixed cap (an endpoint's metadata changed)."""
        self.cap = cap
        self._relimit()

    def set_quota(self, quota: int) -> None:
        """Take the calls its provider's quota has left (:data:`UNLIMITED`: none said, or it reset)."""
        self.quota = quota
        self._relimit()

    def relimited(self) -> int | None:
        """Take the adaptive limit's latest value into :attr:`limit`; the new limit if it changed, else None."""
        before = self.limit
        self._relimit()
        return self.limit if self.limit != before else None


class RampShape(Protocol):
    """What the running state reads of a slow start (``SlowStart``, configuration kept interpreted)."""

    @property
    def window(self) -> float:
        """Seconds to full weight."""
        ...

    def factor(self, elapsed: float) -> float:
        """The share of its weight an endpoint ``elapsed`` seconds into its ramp gets."""
        ...


class LimiterFactory(Protocol):
    """What makes an endpoint's running limit (``AdaptiveConcurrency``)."""

    def limiter(self) -> RunningLimit:
        """A fresh running limit for one endpoint."""
        ...


class LoadKnobs(Protocol):
    """What the running state reads of the balancer's load knobs (``LoadPolicy``)."""

    @property
    def max_in_flight(self) -> int | None:
        """The balancer's cap per endpoint, or None."""
        ...

    @property
    def adaptive(self) -> LimiterFactory | None:
        """The adaptive limit's configuration, or None."""
        ...

    @property
    def slow_start(self) -> RampShape | None:
        """The slow-start knobs, or None."""
        ...

    @property
    def limits(self) -> bool:
        """Whether any endpoint may have a concurrency limit."""
        ...


class LoadState:
    """A pool's load knobs and running state, in one object (the pool reads its flags per call).

    Attributes:
        policy: the knobs.
        controlled: whether endpoints carry a :class:`LoadControl` (each member record's
            ``control``) and picks are admitted.
        adaptive: whether completed calls feed adaptive limits.
        slow_start: the slow-start knobs, or None.
        recall_ramp: the ramp an endpoint recalled for the pool's load follows when its probe
            passes while no slow start is configured (over the circuit policy's
            ``overload_window``), or None.
        ramping: the endpoints in slow start, oldest first.
        overloaded: when each member last had a load-shaped failure, oldest first (the
            pool's evidence that a timeout or overload answer is the pool's load).
        recallable: the OPEN members ejected for a load-shaped failure, with when: the
            next sign of the pool's load restores them (``Cause.POOL_LOADED``) or recalls
            them (``Cause.RECALLED``).
        recalls: when each member was first recalled since its circuit last closed.
        shared_faults: load-shaped failures judged the pool's load, not a strike (saturating).
    """

    policy: LoadKnobs
    controlled: bool
    adaptive: bool
    slow_start: RampShape | None
    recall_ramp: RampShape | None
    ramping: dict[Any, None]
    overloaded: dict[Any, float]
    recallable: dict[Any, float]
    recalls: dict[Any, float]
    shared_faults: int

    __slots__ = (
        "adaptive",
        "controlled",
        "overloaded",
        "policy",
        "ramping",
        "recall_ramp",
        "recallable",
        "recalls",
        "shared_faults",
        "slow_start",
    )

    def __init__(self, policy: LoadKnobs, recall_ramp: RampShape | None = None) -> None:
        self.policy = policy
        self.controlled = policy.limits or policy.slow_start is not None
        self.adaptive = policy.adaptive is not None
        self.slow_start = policy.slow_start
        self.recall_ramp = recall_ramp
        self.ramping = {}
        self.overloaded = {}
        self.recallable = {}
        self.recalls = {}
        self.shared_faults = 0
