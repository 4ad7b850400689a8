"""Active health checks: when to probe each endpoint and what its results mean, as pure bookkeeping.

Theory of operation
-------------------
Each endpoint has a *track*: its classification (UNKNOWN, HEALTHY or UNHEALTHY), the
runs of consecutive passing and failing probes, the operator's status, a *generation*
and at most one probe slot. :meth:`HealthScheduler.due` reserves the slot of every
endpoint whose probe time has come and hands out a :class:`ProbeToken` naming the
endpoint, the generation and a number unique in the scheduler; the endpoint is not
scheduled again until that token comes back through :meth:`HealthScheduler.record`
(a result) or :meth:`HealthScheduler.cancel` (no result). So at most one probe per
endpoint is reserved at any time, whatever the shell does.

A result counts only if its token is the endpoint's reserved one. Anything else is
*stale* (counted, no other effect): a token of an earlier generation, a token already
settled, a token of an endpoint that left. Every operator status change bumps the
generation and drops the reservation, so a probe in flight when an operator forces a
status can never overwrite it. While the status is not AUTO the track is parked: no
probes, and a forced status *is* the classification. Returning to AUTO starts afresh:
UNKNOWN, empty runs, a probe due at once (within the initial jitter).

Classification moves only on explicit results: ``healthy_threshold`` passes in a row make
an endpoint HEALTHY, ``unhealthy_threshold`` failures in a row make it UNHEALTHY (a
timeout is a failure). A cancelled probe changes no run and no classification; the
endpoint is simply probed again one interval later. Endpoints not known HEALTHY are
probed at the faster ``unhealthy_interval``, so an endpoint that recovers is readmitted
quickly; every interval is jittered so a fleet does not probe in lock-step.

What a classification means for eligibility is decided here too (:func:`refusal`), and
whether a passing probe closes a passively ejected circuit (:func:`verdict`): the shell
only applies the :class:`HealthVerdict` to the pool.

Nothing here reads a clock or awaits: ``now`` comes in, :meth:`HealthScheduler.next_deadline`
goes out, and the async shell (``poise_py._health_runner``) runs the probes when the
balancer's one timer finds them due.
"""

from __future__ import annotations

import enum
import heapq
import inspect
from collections.abc import Awaitable, Callable, Iterator

import attrs

from .._endpoint import AdminStatus, Endpoint
from .._errors import ConfigError, IneligibleReason
from .._knobs import RESOLUTION, check_bool, check_count, check_duration, check_share, optional
from ._record import sat_add

Probe = Callable[[Endpoint], Awaitable[object]]
"""An active probe: returns (any value) when the endpoint is healthy, raises when it is not."""


class HealthStatus(enum.Enum):
    """What active health checks say about an endpoint."""

    UNKNOWN = "unknown"
    """Not classified yet: new, or returned to AUTO and not probed enough since."""
    HEALTHY = "healthy"
    """``healthy_threshold`` probes in a row passed (or an operator forced it)."""
    UNHEALTHY = "unhealthy"
    """``unhealthy_threshold`` probes in a row failed (or an operator forced it)."""


class ProbeResult(enum.Enum):
    """How one probe ended, when it ended with a result (cancellation is not a result)."""

    PASSED = "passed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    """No answer within ``HealthCheck.timeout``; counts as a failure."""


def _is_async_callable(probe: object) -> bool:
    """An ``async def`` function (or a partial of one), or an object whose ``__call__`` is one."""
    if inspect.iscoroutinefunction(probe):
        return True
    call = getattr(type(probe), "__call__", None)  # noqa: B004 - the class's, not the instance's
    return call is not None and not inspect.isfunction(probe) and inspect.iscoroutinefunction(call)


@attrs.frozen(kw_only=True)
class HealthCheck:
    """Active health checking: the probe and its schedule (``LoadBalancer(health_check=...)``).

    ``docs/health.md`` explains how the active and passive signals combine, and why the
    balancer refuses a schedule that could keep a recovered endpoint out longer than the
    breaker's shortest open window.

    Attributes:
        probe: ``async def probe(endpoint) -> object``: return for healthy, raise for
            unhealthy. Ready-made ones are in :mod:`poise_py.probes`. An ``async def``
            function, a ``functools.partial`` of one, or an object whose ``__call__`` is
            ``async def``; a plain function is refused (:class:`ConfigError`).
        interval: seconds between probes of a HEALTHY endpoint.
        unhealthy_interval: seconds between probes of an endpoint not known healthy
            (UNKNOWN or UNHEALTHY), so it is classified, and readmitted, quickly; at most
            ``interval``. ``None`` means ``interval / 4``.
        timeout: a probe that has not finished after this many seconds is a failure.
        healthy_threshold: passes in a row that make an endpoint HEALTHY.
        unhealthy_threshold: failures in a row that make an endpoint UNHEALTHY.
        jitter: a fraction in [0, 1): each interval is scaled by a uniform factor in
            ``[1 - jitter, 1 + jitter]``, and a new endpoint's first probe is delayed by up
            to ``jitter * interval``, so a fleet does not probe in lock-step.
        admit_unknown: whether an UNKNOWN endpoint may take permits before its first
            classification (default True: a fresh pool serves at once).
        uneject: a passing probe of a HEALTHY endpoint closes its passively ejected
            (OPEN or HALF_OPEN) circuit, as Envoy's
            ``successful_active_health_check_uneject_host`` (default True).
    """

    probe: Probe
    interval: float = 10.0
    unhealthy_interval: float | None = None
    timeout: float = 2.0
    healthy_threshold: int = 2
    unhealthy_threshold: int = 3
    jitter: float = 0.1
    admit_unknown: bool = True
    uneject: bool = True

    def __attrs_post_init__(self) -> None:
        if not _is_async_callable(self.probe):
            raise ConfigError(
                "HealthCheck.probe",
                f"must be an async callable (`async def probe(endpoint)`), got {self.probe!r}: "
                "a plain function's result cannot be awaited, so every probe would fail",
            )
        check_duration("HealthCheck.interval", self.interval, minimum=RESOLUTION)
        fast = optional(check_duration, "HealthCheck.unhealthy_interval", self.unhealthy_interval)
        if fast is not None and fast > self.interval:
            raise ConfigError(
                "HealthCheck.unhealthy_interval",
                f"must be <= interval ({self.interval}), got {self.unhealthy_interval}",
            )
        check_duration("HealthCheck.timeout", self.timeout)
        check_count("HealthCheck.healthy_threshold", self.healthy_threshold)
        check_count("HealthCheck.unhealthy_threshold", self.unhealthy_threshold)
        check_share("HealthCheck.jitter", self.jitter, high_open=True)
        for knob in ("admit_unknown", "uneject"):
            check_bool(f"HealthCheck.{knob}", getattr(self, knob))

    @property
    def fast_interval(self) -> float:
        """The interval while an endpoint is not known healthy."""
        return self.interval / 4 if self.unhealthy_interval is None else float(self.unhealthy_interval)

    @property
    def readmit_bound(self) -> float:
        """The longest a recovered endpoint can stay excluded by active checks, in seconds.

        A probe already in flight when the endpoint recovers may still fail (up to
        ``timeout``); then ``healthy_threshold`` probes must pass, each scheduled at most
        ``fast_interval * (1 + jitter)`` after the previous one ended and each taking up
        to ``timeout``.
        """
        step = self.fast_interval * (1.0 + self.jitter) + self.timeout
        return self.timeout + self.healthy_threshold * step


@attrs.frozen
class ProbeToken:
    """A reserved probe: hand it back to :meth:`HealthScheduler.record` or ``cancel``.

    Attributes:
        endpoint_id: the endpoint to probe.
        generation: the endpoint's probe generation when reserved.
        number: unique in the scheduler, so a token is never mistaken for a later one.
    """

    endpoint_id: str
    generation: int
    number: int


@attrs.frozen(kw_only=True)
class HealthSnapshot:
    """Active health of one endpoint, as of a ``LoadBalancer.snapshot()``.

    Attributes:
        status: the classification (a forced status while an operator forces one).
        generation: bumped by every operator status change; older probes are stale.
        consecutive_passes: the current run of passing probes, counted up to
            ``healthy_threshold`` (where it changes the verdict; it stops there).
        consecutive_failures: the current run of failing probes (timeouts included), counted
            up to ``unhealthy_threshold``.
        probing: whether a probe is reserved now.
        next_probe_at: when the next probe is due (balancer clock), or None.
        probes: results accepted.
        failures: accepted results that failed, timeouts included.
        timeouts: accepted results that timed out.
        cancelled: probes that ended without a result.
        stale: results dropped because their token was not the reserved one.
    """

    status: HealthStatus
    generation: int
    consecutive_passes: int
    consecutive_failures: int
    probing: bool
    next_probe_at: float | None
    probes: int
    failures: int
    timeouts: int
    cancelled: int
    stale: int


@attrs.frozen(kw_only=True)
class HealthVerdict:
    """What a settled probe means for its endpoint; the shell applies it to the pool.

    Attributes:
        status: the classification after the result.
        changed: whether the result changed the classification.
        refusal: why the endpoint may not serve under AUTO, or None (see :func:`refusal`).
        uneject: whether to close the endpoint's passively ejected circuit.
    """

    status: HealthStatus
    changed: bool
    refusal: IneligibleReason | None
    uneject: bool


def refusal(check: HealthCheck, status: HealthStatus) -> IneligibleReason | None:
    """What a classification means for eligibility under AUTO (None: it may serve)."""
    if status is HealthStatus.UNHEALTHY:
        return IneligibleReason.UNHEALTHY
    if status is HealthStatus.UNKNOWN and not check.admit_unknown:
        return IneligibleReason.UNCLASSIFIED
    return None


def verdict(
    check: HealthCheck,
    before: HealthStatus | None,
    status: HealthStatus,
    result: ProbeResult,
    *,
    epoch: int,
    current_epoch: int,
) -> HealthVerdict:
    """Map a probe's settled result to eligibility and un-ejection.

    ``epoch`` is the circuit epoch when the probe started and ``current_epoch`` the one
    now: a passing probe of a HEALTHY endpoint un-ejects only a circuit still in the epoch
    it probed, so a probe that began before the circuit opened (or moved on) cannot close it.
    """
    return HealthVerdict(
        status=status,
        changed=status is not before,
        refusal=refusal(check, status),
        uneject=(
            result is ProbeResult.PASSED and status is HealthStatus.HEALTHY and check.uneject and current_epoch == epoch
        ),
    )


class _Track:
    """One endpoint's active-health state (private to the scheduler)."""

    __slots__ = (
        "admin",
        "cancelled",
        "due_at",
        "endpoint_id",
        "failures",
        "generation",
        "live",
        "passes",
        "probes",
        "reserved",
        "run_failures",
        "stale",
        "stamp",
        "status",
        "timeouts",
    )

    def __init__(self, endpoint_id: str) -> None:
        self.endpoint_id = endpoint_id
        self.status = HealthStatus.UNKNOWN
        self.admin = AdminStatus.AUTO
        self.generation = 0
        self.passes = 0
        self.run_failures = 0
        self.reserved: ProbeToken | None = None
        self.due_at: float | None = None
        self.stamp = 0
        """Bumped whenever the schedule changes; a heap entry with another stamp is void."""
        self.live = True
        self.probes = 0
        self.failures = 0
        self.timeouts = 0
        self.cancelled = 0
        self.stale = 0


_FORCED: dict[AdminStatus, HealthStatus] = {
    AdminStatus.FORCED_HEALTHY: HealthStatus.HEALTHY,
    AdminStatus.FORCED_UNHEALTHY: HealthStatus.UNHEALTHY,
}


class HealthScheduler:
    """Probe scheduling and classification for a pool of endpoints. See the module docstring.

    Args:
        check: the knobs (the probe itself is the shell's business).
        unit: returns a float uniform in [0, 1) for jitter (a seeded rng's ``random``).
    """

    def __init__(self, check: HealthCheck, unit: Callable[[], float]) -> None:
        self.check = check
        self._unit = unit
        self._tracks: dict[str, _Track] = {}
        self._heap: list[tuple[float, int, _Track, int]] = []
        self._seq = 0
        self._numbers = 0
        self.stale = 0
        """Stale results pool-wide, including those for endpoints that have left."""

    # -- membership --------------------------------------------------------------------

    def add(self, endpoint_id: str, now: float) -> None:
        """Start tracking an endpoint: UNKNOWN, first probe within the initial jitter."""
        if endpoint_id in self._tracks:
            raise KeyError(f"endpoint {endpoint_id!r} is already tracked")
        track = self._tracks[endpoint_id] = _Track(endpoint_id)
        self._schedule(track, now + self._initial_delay())

    def remove(self, endpoint_id: str) -> None:
        """Stop tracking an endpoint; a probe of it in flight becomes stale."""
        track = self._tracks.pop(endpoint_id)
        track.live = False
        track.reserved = None
        track.stamp += 1

    def __contains__(self, endpoint_id: object) -> bool:
        return endpoint_id in self._tracks

    def __iter__(self) -> Iterator[str]:
        return iter(self._tracks)

    # -- probes ------------------------------------------------------------------------

    def due(self, now: float) -> list[ProbeToken]:
        """Reserve and return a token for every endpoint whose probe is due at ``now``."""
        heap = self._heap
        tokens: list[ProbeToken] = []
        while heap and heap[0][0] <= now:
            _, _, track, stamp = heapq.heappop(heap)
            if track.live and track.stamp == stamp:
                tokens.append(self._reserve(track))
        return tokens

    def next_deadline(self) -> float | None:
        """When :meth:`due` next has a probe to hand out, or None (nothing scheduled)."""
        heap = self._heap
        while heap:
            _, _, track, stamp = heap[0]
            if track.live and track.stamp == stamp:
                return heap[0][0]
            heapq.heappop(heap)
        return None

    def record(self, token: ProbeToken, result: ProbeResult, now: float) -> HealthStatus | None:
        """Settle a probe with its result; return the classification, or None if stale.

        A stale token (another generation, already settled, endpoint gone) is counted and
        changes nothing else.
        """
        track = self._current(token)
        if track is None:
            return None
        check = self.check
        track.reserved = None
        track.probes = sat_add(track.probes)
        if result is ProbeResult.PASSED:
            track.run_failures = 0
            track.passes = min(track.passes + 1, check.healthy_threshold)
            if track.passes >= check.healthy_threshold:
                track.status = HealthStatus.HEALTHY
        else:
            track.failures = sat_add(track.failures)
            if result is ProbeResult.TIMED_OUT:
                track.timeouts = sat_add(track.timeouts)
            track.passes = 0
            track.run_failures = min(track.run_failures + 1, check.unhealthy_threshold)
            if track.run_failures >= check.unhealthy_threshold:
                track.status = HealthStatus.UNHEALTHY
        self._schedule(track, now + self._interval(track))
        return track.status

    def cancel(self, token: ProbeToken, now: float) -> bool:
        """Settle a probe that ended without a result: reschedule, classify nothing.

        Returns False (and changes nothing) for a stale token.
        """
        track = self._current(token)
        if track is None:
            return False
        track.reserved = None
        track.cancelled = sat_add(track.cancelled)
        self._schedule(track, now + self._interval(track))
        return True

    # -- operators ---------------------------------------------------------------------

    def set_admin(self, endpoint_id: str, status: AdminStatus, now: float) -> bool:
        """Apply an operator status; returns False if it was already the status.

        A change bumps the generation (a probe in flight becomes stale). FORCED_HEALTHY
        and FORCED_UNHEALTHY become the classification; DRAINING and DISABLED keep it; all
        four park the track. AUTO starts afresh from UNKNOWN with a probe due at once.
        """
        track = self._tracks[endpoint_id]
        if status is track.admin:
            return False
        track.admin = status
        track.generation += 1
        track.reserved = None
        track.stamp += 1
        track.due_at = None
        forced = _FORCED.get(status)
        if forced is not None:
            track.status = forced
        if status is AdminStatus.AUTO:
            track.status = HealthStatus.UNKNOWN
            track.passes = track.run_failures = 0
            self._schedule(track, now + self._initial_delay())
        return True

    # -- views -------------------------------------------------------------------------

    def status(self, endpoint_id: str) -> HealthStatus:
        """The endpoint's classification (KeyError if it is not tracked)."""
        return self._tracks[endpoint_id].status

    def generation(self, endpoint_id: str) -> int:
        """The endpoint's probe generation (KeyError if it is not tracked)."""
        return self._tracks[endpoint_id].generation

    def reserved(self, endpoint_id: str) -> ProbeToken | None:
        """The endpoint's reserved probe, if any (KeyError if it is not tracked)."""
        return self._tracks[endpoint_id].reserved

    def snapshot(self, endpoint_id: str) -> HealthSnapshot:
        """A frozen view of one endpoint's active health (KeyError if not tracked)."""
        t = self._tracks[endpoint_id]
        return HealthSnapshot(
            status=t.status,
            generation=t.generation,
            consecutive_passes=t.passes,
            consecutive_failures=t.run_failures,
            probing=t.reserved is not None,
            next_probe_at=t.due_at,
            probes=t.probes,
            failures=t.failures,
            timeouts=t.timeouts,
            cancelled=t.cancelled,
            stale=t.stale,
        )

    # -- internals ---------------------------------------------------------------------

    def _current(self, token: ProbeToken) -> _Track | None:
        track = self._tracks.get(token.endpoint_id)
        if track is None or track.generation != token.generation or track.reserved != token:
            self.stale = sat_add(self.stale)
            if track is not None:
                track.stale = sat_add(track.stale)
            return None
        return track

    def _reserve(self, track: _Track) -> ProbeToken:
        self._numbers += 1
        token = ProbeToken(track.endpoint_id, track.generation, self._numbers)
        track.reserved = token
        track.due_at = None
        track.stamp += 1
        return token

    def _schedule(self, track: _Track, at: float) -> None:
        track.stamp += 1
        track.due_at = at
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, track, track.stamp))

    def _interval(self, track: _Track) -> float:
        check = self.check
        base = check.interval if track.status is HealthStatus.HEALTHY else check.fast_interval
        jitter = check.jitter
        return base * (1.0 + jitter * (2.0 * self._unit() - 1.0)) if jitter else base

    def _initial_delay(self) -> float:
        check = self.check
        return check.jitter * check.interval * self._unit() if check.jitter else 0.0
