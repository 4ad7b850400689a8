"""Endpoint fault and load models for the simulator: functions of virtual time and draws.

An endpoint follows a schedule of phases (each from its ``start`` until the next), and
optionally a flapping cycle, a rate limit and a quota. Given the time and two uniform
draws it answers with a service time and an outcome; it also says whether it is *healthy*
at a time, which is how the report tells a spurious ejection from a deserved one.

An endpoint may declare a ``capacity`` (calls served at once) and a ``max_queue``: the
engine's :class:`~poise_py.sim._station.Station` then queues what it cannot serve, so a
call's latency is its wait plus its service time. :meth:`EndpointModel.capacity_at` says
how many calls it serves at a time, a phase's ``capacity`` or a cold start's warm-up
included.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from statistics import NormalDist

import attrs

from .. import ConfigError, Fault
from .._internal import check_count, check_number
from ._observe import GrpcStatus, HttpStatus, Observation, Overloaded, Refused, Stated, Throttled, Timeout

_PERMANENT_GRPC = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})


def _permanent(observation: Observation) -> bool:
    """Whether the observation says the endpoint refuses this client for good (a bad key)."""
    match observation:
        case Stated(fault=fault):
            return fault is Fault.PERMANENT
        case HttpStatus(status=status):
            return status in (401, 403)
        case GrpcStatus(code=code):
            return code in _PERMANENT_GRPC
    return False


_NORMAL = NormalDist()
_Z99 = _NORMAL.inv_cdf(0.99)


@attrs.frozen(kw_only=True)
class Latency:
    """A log-normal latency given by its median and 99th percentile, in seconds, with stragglers.

    Attributes:
        median: the median, seconds.
        p99: the 99th percentile of the log-normal, seconds (>= median).
        straggler_rate: the share of calls that straggle (in [0, 1)): the slowest
            ``straggler_rate`` of draws (``unit >= 1 - straggler_rate``) take
            ``median * straggler_scale`` instead, as a GC pause or a cold cache makes one
            call in a hundred slow for reasons no health check sees.
        straggler_scale: how many medians a straggler takes (>= 1).
    """

    median: float = 0.02
    p99: float = 0.08
    straggler_rate: float = 0.0
    straggler_scale: float = 100.0

    def __attrs_post_init__(self) -> None:
        if not (0 < self.median <= self.p99 < math.inf):
            raise ConfigError("latency", f"need 0 < median <= p99, got {self.median}, {self.p99}")
        check_number("latency.straggler_rate", self.straggler_rate, low=0.0, high=1.0, high_open=True)
        check_number("latency.straggler_scale", self.straggler_scale, low=1.0)

    def draw(self, unit: float) -> float:
        """The latency at quantile ``unit`` (a straggler's when ``unit >= 1 - straggler_rate``)."""
        if self.straggler_rate and unit >= 1.0 - self.straggler_rate:
            return self.median * self.straggler_scale
        sigma = math.log(self.p99 / self.median) / _Z99
        u = min(max(unit, 1e-9), 1 - 1e-9)
        return self.median * math.exp(sigma * _NORMAL.inv_cdf(u))


@attrs.frozen(kw_only=True)
class Phase:
    """How an endpoint behaves from ``start`` until the next phase.

    Attributes:
        start: virtual seconds.
        error_rate: the share of calls that fail.
        error: what the client observes of those failures (a gRPC or HTTP status, a
            timeout, a refused connection).
        latency_scale: multiplies the latency, the service time of an endpoint with a
            capacity (a gray failure is an endpoint ten times slower).
        error_latency: seconds a failed call takes (None: drawn like a success's); a
            backend that sheds load answers its 503 in about a millisecond.
        capacity: calls served at once during this phase (None: the endpoint's own).
        healthy: whether the endpoint counts as healthy (default: error_rate < 0.25, and
            not refusing this client for good: 401/403, UNAUTHENTICATED/PERMISSION_DENIED).
    """

    start: float = 0.0
    error_rate: float = 0.0
    error: Observation = attrs.field(factory=lambda: Stated(fault=Fault.SUSPECT))
    latency_scale: float = 1.0
    error_latency: float | None = None
    capacity: int | None = None
    healthy: bool | None = None

    def __attrs_post_init__(self) -> None:
        if not 0.0 <= self.error_rate <= 1.0:
            raise ConfigError("phase.error_rate", f"must be in [0, 1], got {self.error_rate}")
        if not 0 <= self.start < math.inf:
            raise ConfigError("phase.start", f"must be a finite number >= 0, got {self.start}")
        if not 0 < self.latency_scale < math.inf:
            raise ConfigError("phase.latency_scale", f"must be a finite number > 0, got {self.latency_scale}")
        if self.error_latency is not None and not 0 < self.error_latency < math.inf:
            raise ConfigError("phase.error_latency", f"must be a finite number > 0, got {self.error_latency}")
        if self.capacity is not None:
            check_count("phase.capacity", self.capacity, maximum=MAX_CAPACITY)

    @property
    def down(self) -> bool:
        """Whether nothing listens during this phase (every call refused)."""
        return self.error_rate >= 1.0 and isinstance(self.error, Refused)

    @property
    def is_healthy(self) -> bool:
        """The explicit flag, or the default rule."""
        if self.healthy is not None:
            return self.healthy
        if self.error_rate == 0:
            return True
        return self.error_rate < 0.25 and not _permanent(self.error)


@attrs.frozen(kw_only=True)
class Flap:
    """A repeating cycle: ``down`` seconds failing with ``error`` every ``period`` seconds."""

    period: float
    down: float
    error: Observation = attrs.field(factory=lambda: Stated(fault=Fault.SUSPECT))
    start: float = 0.0

    def __attrs_post_init__(self) -> None:
        if not (0 < self.down < self.period < math.inf) or not 0 <= self.start < math.inf:
            raise ConfigError("flap", f"need 0 < down < period, got {self.down}, {self.period}")

    def is_down(self, now: float) -> bool:
        """Whether the cycle is in its failing part at ``now``."""
        return now >= self.start and (now - self.start) % self.period < self.down


@attrs.frozen(kw_only=True)
class RateLimit:
    """Over ``rps`` calls in the last second, refuse with Retry-After (429, RESOURCE_EXHAUSTED)."""

    rps: int
    retry_after: float = 1.0

    def __attrs_post_init__(self) -> None:
        check_count("rate_limit.rps", self.rps, maximum=1_000_000)
        if not 0 <= self.retry_after < math.inf:
            raise ConfigError("rate_limit.retry_after", f"must be a finite number >= 0, got {self.retry_after}")


MAX_CAPACITY = 1_000_000
"""The most calls one endpoint may serve at once, or hold in its queue."""


@attrs.frozen(kw_only=True)
class Quota:
    """A provider's quota: ``requests`` per window of ``per`` seconds (an LLM API's requests per minute).

    The window is fixed (it resets every ``per`` seconds from time 0, as providers reset
    theirs). A call over the quota is answered at once with HTTP 429, ``Retry-After``
    (whole seconds until the reset) and the ``x-ratelimit-remaining-requests`` and
    ``x-ratelimit-reset-requests`` headers; over gRPC, RESOURCE_EXHAUSTED with
    ``retry-after`` in the trailing metadata.
    """

    requests: int
    per: float = 60.0

    def __attrs_post_init__(self) -> None:
        check_count("quota.requests", self.requests, maximum=MAX_CAPACITY)
        if not 0 < self.per < math.inf:
            raise ConfigError("quota.per", f"must be a finite number > 0, got {self.per}")


@attrs.frozen(kw_only=True)
class Warmup:
    """A cold start: after joining or returning, capacity ramps from ``capacity`` x full over ``duration`` s.

    An endpoint *returns* when a phase that refuses every call (the process was down)
    ends. During the warm-up it serves ``max(1, floor(full x f))`` calls at once, where
    ``f`` grows linearly from ``capacity`` to 1.
    """

    duration: float
    capacity: float = 0.25

    def __attrs_post_init__(self) -> None:
        if not 0 < self.duration < math.inf:
            raise ConfigError("warmup.duration", f"must be a finite number > 0, got {self.duration}")
        if not 0 < self.capacity <= 1:
            raise ConfigError("warmup.capacity", f"must be in (0, 1], got {self.capacity}")


@attrs.frozen(kw_only=True)
class Response:
    """One simulated answer."""

    latency: float
    error: Observation | None


@attrs.frozen(kw_only=True, eq=False)
class EndpointModel:
    """One simulated endpoint: its schedule, cycle, rate limit, quota and load model.

    ``capacity`` (None: unlimited, every call served at once) is how many calls it
    serves at a time; past it calls wait in a FIFO queue of at most ``max_queue`` (None:
    unbounded), and past that it sheds them at once with ``overload`` (default: its
    protocol's overload status, :class:`~poise_py.sim.Overloaded`). ``warmup`` makes it
    start cold when it joins or returns. ``reports_load`` makes it attach an ORCA load
    report to every answer, as a server with poise_py's ORCA middleware does: its
    utilization (calls in service over its capacity) and its answers and errors per second,
    each averaged over about the last second.

    The only running state is the rate limiter's recent calls and the quota's count;
    :meth:`fresh` gives a copy with none, so every configuration's run starts from the
    same endpoint.
    """

    id: str = attrs.field(kw_only=False)
    tier: int = 0
    zone: str | None = None
    weight: int = 1
    latency: Latency = attrs.field(factory=Latency)
    phases: tuple[Phase, ...] = (Phase(),)
    flap: Flap | None = None
    rate_limit: RateLimit | None = None
    joins_at: float = 0.0
    leaves_at: float | None = None
    capacity: int | None = None
    max_queue: int | None = None
    overload: Observation = attrs.field(factory=Overloaded)
    warmup: Warmup | None = None
    quota: Quota | None = None
    reports_load: bool = False
    _recent: deque[float] = attrs.field(factory=deque, init=False)
    _starts: list[float] = attrs.field(factory=list, init=False)
    _quota_window: list[float] = attrs.field(factory=lambda: [-1.0, 0.0], init=False)

    def __attrs_post_init__(self) -> None:
        phases = tuple(sorted(self.phases, key=lambda p: p.start))
        if not phases or phases[0].start > 0:
            phases = (Phase(), *phases)
        object.__setattr__(self, "phases", phases)
        object.__setattr__(self, "_starts", [p.start for p in phases])
        if self.capacity is not None:
            check_count("capacity", self.capacity, maximum=MAX_CAPACITY)
        if self.max_queue is not None:
            if self.capacity is None and any(p.capacity is None for p in phases):
                raise ConfigError("max_queue", "a queue needs a capacity (calls served at once)")
            check_count("max_queue", self.max_queue, minimum=0, maximum=MAX_CAPACITY)
        if self.warmup is not None and self.capacity is None:
            raise ConfigError("warmup", "a warm-up ramps a capacity: give the endpoint one")
        if self.reports_load and not self.loaded:
            raise ConfigError("reports_load", "a load report measures use of a capacity: give the endpoint one")

    @property
    def loaded(self) -> bool:
        """Whether this endpoint has a capacity in any phase (so calls may queue)."""
        return self.capacity is not None or any(p.capacity is not None for p in self.phases)

    def returns(self) -> list[float]:
        """When the endpoint starts (cold, with a warm-up): joining after time 0, and each end of a down phase."""
        points = [self.joins_at] if self.joins_at > 0 else []
        points += [b.start for a, b in zip(self.phases, self.phases[1:], strict=False) if a.down and not b.down]
        return sorted(set(points))

    def capacity_at(self, now: float) -> int | None:
        """Calls served at once at ``now`` (None: unlimited), a cold start's warm-up included."""
        phase = self.phase_at(now)
        full = self.capacity if phase.capacity is None else phase.capacity
        warmup = self.warmup
        if full is None or warmup is None:
            return full
        since = math.inf
        for at in self.returns():
            if at <= now:
                since = now - at
        if since >= warmup.duration:
            return full
        share = warmup.capacity + (1 - warmup.capacity) * since / warmup.duration
        return max(1, math.floor(full * share))

    def warmup_steps(self) -> list[float]:
        """The instants a warm-up raises the capacity (the engine starts queued calls then)."""
        warmup = self.warmup
        if warmup is None:
            return []
        points: list[float] = []
        for at in self.returns():
            full = self.capacity_at(at + warmup.duration)
            assert full is not None  # noqa: S101 - a warm-up needs a capacity
            steps = max(1, full)
            points += [at + warmup.duration * k / steps for k in range(1, steps + 1)]
        return points

    def fresh(self) -> EndpointModel:
        """A copy with no running state (an empty rate-limiter history)."""
        return attrs.evolve(self)

    def phase_at(self, now: float) -> Phase:
        """The phase in force at ``now``."""
        return self.phases[bisect.bisect_right(self._starts, now) - 1]

    def exists_at(self, now: float) -> bool:
        """Whether the backend process exists at ``now`` (between joining and leaving)."""
        return self.joins_at <= now and (self.leaves_at is None or now < self.leaves_at)

    def healthy_at(self, now: float) -> bool:
        """Whether this endpoint is serving correctly at ``now``."""
        if not self.exists_at(now):
            return False
        if self.flap is not None and self.flap.is_down(now):
            return False
        return self.phase_at(now).is_healthy

    def change_points(self) -> list[float]:
        """Times at which health or capacity may change (phase starts, joining and leaving)."""
        points = [*self._starts, self.joins_at]
        if self.leaves_at is not None:
            points.append(self.leaves_at)
        return sorted(set(points))

    def respond(self, now: float, u_latency: float, u_error: float) -> Response:
        """Answer a call arriving at ``now``."""
        if not self.exists_at(now):  # nothing listens: connection refused, at once
            return Response(latency=0.001, error=Refused())
        phase = self.phase_at(now)
        latency = self.latency.draw(u_latency) * phase.latency_scale
        if self.rate_limit is not None:
            recent = self._recent
            while recent and recent[0] <= now - 1.0:
                recent.popleft()
            if len(recent) >= self.rate_limit.rps:
                return Response(latency=latency * 0.1, error=Throttled(retry_after=self.rate_limit.retry_after))
            recent.append(now)
        if self.quota is not None:
            refusal = self._spend_quota(now, self.quota)
            if refusal is not None:
                return Response(latency=0.001, error=refusal)
        error = None
        if self.flap is not None and self.flap.is_down(now):
            error = self.flap.error
        elif u_error < phase.error_rate:
            error = phase.error
        if isinstance(error, Timeout):
            return Response(latency=math.inf, error=error)  # never answers: ends at the client's deadline
        if isinstance(error, Refused):
            return Response(latency=0.001, error=error)
        if error is not None and phase.error_latency is not None:
            latency = phase.error_latency
        return Response(latency=latency, error=error)

    def quota_left(self, now: float) -> tuple[int, float] | None:
        """Requests left in the quota's window at ``now`` and seconds until it resets (None: no quota).

        What a provider's rate-limit headers say on every answer.
        """
        quota = self.quota
        if quota is None:
            return None
        start = math.floor(now / quota.per) * quota.per
        used = self._quota_window[1] if self._quota_window[0] == start else 0.0
        return max(0, quota.requests - int(used)), start + quota.per - now

    def _spend_quota(self, now: float, quota: Quota) -> Observation | None:
        """Count one call against the quota's window; the refusal when it is spent."""
        window = self._quota_window
        start = math.floor(now / quota.per) * quota.per
        if window[0] != start:
            window[0], window[1] = start, 0.0
        if window[1] < quota.requests:
            window[1] += 1
            return None
        reset = max(1, math.ceil(start + quota.per - now))
        headers = (("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-reset-requests", f"{reset}s"))
        return Throttled(retry_after=float(reset), headers=headers)
