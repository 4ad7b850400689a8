"""The passive breaker's knobs (pure core): ``CircuitPolicy``, validated once at construction with ``_knobs``."""

from __future__ import annotations

import attrs

from .._errors import ConfigError
from .._knobs import RESOLUTION, check_count, check_duration, check_share, optional
from ._ejection import Escalation, HardCap
from ._outlier import SuccessRateEjection
from ._window import CountRing, TimeRing, Window


@attrs.frozen
class CountWindow:
    """Configuration of a sliding count window over the last ``size`` outcomes."""

    size: int = 100

    def __attrs_post_init__(self) -> None:
        check_count("CountWindow.size", self.size, maximum=1_000_000)

    def build(self) -> Window:
        """Return a fresh window of this shape."""
        return CountRing(self.size)


@attrs.frozen
class TimeWindow:
    """Configuration of a sliding time window of ``duration`` seconds in ``buckets`` slices."""

    duration: float = 30.0
    buckets: int = 10

    def __attrs_post_init__(self) -> None:
        check_duration("TimeWindow.duration", self.duration)
        check_count("TimeWindow.buckets", self.buckets, maximum=10_000)
        if self.duration / self.buckets < RESOLUTION:  # a slice any shorter is lost in the clock's rounding
            raise ConfigError(
                "TimeWindow.duration",
                f"must give each of its {self.buckets} buckets at least {RESOLUTION:g} s, got {self.duration!r:.80}",
            )

    def build(self) -> Window:
        """Return a fresh window of this shape."""
        return TimeRing(float(self.duration), self.buckets)


@attrs.frozen(kw_only=True)
class CircuitPolicy:
    """Passive health: when an endpoint's circuit opens, for how long, and how it recovers.

    Defaults are chosen so that one ambiguous error never costs a live endpoint and a dead
    one stops receiving traffic within a handful of calls; ``docs/circuit.md`` gives the
    reason for each.

    Attributes:
        consecutive_failures: trip after this many SUSPECT faults in a row (a success
            resets the run); ``None`` disables the condition.
        consecutive_transient_failures: trip after this many TRANSIENT faults with no
            success in between (their own run: a SUSPECT fault does not end it, nor a
            TRANSIENT one the SUSPECT run); one TRANSIENT fault never trips. ``None``
            disables the condition. Envoy's ``consecutive_gateway_failure``.
        failure_rate: trip when failures / volume over the window reaches this fraction;
            ``None`` (default) disables it.
        minimum_hosts: with ``failure_rate``, the rate trip applies only while at least
            this many endpoints (closed circuits) have ``minimum_volume`` outcomes in their
            window; ``None`` (default): always. Envoy's
            ``failure_percentage_minimum_hosts``.
        success_rate: opt-in pool-relative outlier detection, :class:`SuccessRateEjection`
            (Envoy's success-rate ejection); ``None`` (default) disables it.
        slow_call_rate: trip when slow calls / volume reaches this fraction; needs
            ``slow_call_duration``.
        slow_call_duration: a call that takes at least this long counts as slow.
        minimum_volume: no rate or consecutive trip until the window holds this many
            outcomes: the cold-start gate. FATAL faults are not gated.
        window: the outcome window, :class:`CountWindow` or :class:`TimeWindow`.
        permitted_probes: half-open probe slots, reserved atomically at selection.
        success_threshold: successful probes that close a half-open circuit.
        escalation: the open window and how it grows (:class:`Escalation`).
        max_ejection_percent: at most this share of the pool is ejected at once, a
            fraction like every share knob (0.5, the default, is half; 1.0 all); always at
            least one endpoint may be. A trip past it is suppressed and counted. A value
            over 1 (``50``, a percent) is a :class:`ConfigError` giving the fraction.
        max_retry_after: a server's ``retry_after`` is honoured up to this many seconds.
        hard_cap: optional :class:`HardCap` retiring an endpoint until rediscovered.
        overload_window: seconds. A load-shaped failure (``Classification.overload``: a
            timeout, HTTP 503 or 504, gRPC DEADLINE_EXCEEDED) while
            another endpoint had one within this window is the pool's load, not this
            endpoint's fault: no strike, so queueing across the pool never ejects one
            endpoint after another. A failure one endpoint has alone still counts, but
            an endpoint ejected for one is restored when an endpoint in rotation fails
            the same way within this window after, and one recalled for the pool's load
            ramps back over this long (docs/overload.md). ``None``: every failure is the
            endpoint's own (the behaviour before 0.3).
    """

    consecutive_failures: int | None = 5
    consecutive_transient_failures: int | None = 5
    failure_rate: float | None = None
    minimum_hosts: int | None = None
    success_rate: SuccessRateEjection | None = None
    slow_call_rate: float | None = None
    slow_call_duration: float | None = None
    minimum_volume: int = 5
    window: CountWindow | TimeWindow = attrs.field(factory=CountWindow)
    permitted_probes: int = 1
    success_threshold: int = 1
    escalation: Escalation = attrs.field(factory=Escalation)
    max_ejection_percent: float = 0.5
    max_retry_after: float = 600.0
    hard_cap: HardCap | None = None
    overload_window: float | None = 10.0

    @property
    def tracks_rates(self) -> bool:
        """Whether a rate condition needs per-outcome failure and slow counts."""
        return self.failure_rate is not None or self.slow_call_rate is not None

    @property
    def measures_latency(self) -> bool:
        """Whether outcomes need the call's latency (a slow-call threshold is set)."""
        return self.slow_call_duration is not None

    def __attrs_post_init__(self) -> None:
        optional(check_count, "CircuitPolicy.consecutive_failures", self.consecutive_failures)
        optional(
            check_count,
            "CircuitPolicy.consecutive_transient_failures",
            self.consecutive_transient_failures,
            minimum=2,
            why="one TRANSIENT fault never ejects",
        )
        optional(check_share, "CircuitPolicy.failure_rate", self.failure_rate, low_open=True)
        optional(check_count, "CircuitPolicy.minimum_hosts", self.minimum_hosts)
        if self.minimum_hosts is not None and self.failure_rate is None:
            raise ConfigError("CircuitPolicy.minimum_hosts", "applies to failure_rate: set failure_rate too")
        if self.success_rate is not None and not isinstance(self.success_rate, SuccessRateEjection):
            raise ConfigError(
                "CircuitPolicy.success_rate", f"must be a SuccessRateEjection or None, got {self.success_rate!r}"
            )
        optional(check_share, "CircuitPolicy.slow_call_rate", self.slow_call_rate, low_open=True)
        optional(check_duration, "CircuitPolicy.slow_call_duration", self.slow_call_duration)
        if self.slow_call_rate is not None and self.slow_call_duration is None:
            raise ConfigError("CircuitPolicy.slow_call_duration", "is required when slow_call_rate is set")
        check_count("CircuitPolicy.minimum_volume", self.minimum_volume)
        if not isinstance(self.window, CountWindow | TimeWindow):
            raise ConfigError("CircuitPolicy.window", f"must be a CountWindow or TimeWindow, got {self.window!r}")
        if isinstance(self.window, CountWindow) and self.minimum_volume > self.window.size:
            size = self.window.size
            raise ConfigError(
                "CircuitPolicy.minimum_volume",
                f"must be at most the CountWindow's size ({size}): {self.minimum_volume} outcomes never fit in it,"
                " so no consecutive or rate trip could happen",
            )
        check_count("CircuitPolicy.permitted_probes", self.permitted_probes)
        check_count("CircuitPolicy.success_threshold", self.success_threshold)
        if not isinstance(self.escalation, Escalation):
            raise ConfigError("CircuitPolicy.escalation", f"must be an Escalation, got {self.escalation!r}")
        check_share("CircuitPolicy.max_ejection_percent", self.max_ejection_percent)
        check_duration("CircuitPolicy.max_retry_after", self.max_retry_after)
        optional(check_duration, "CircuitPolicy.overload_window", self.overload_window)
        if self.hard_cap is not None and not isinstance(self.hard_cap, HardCap):
            raise ConfigError("CircuitPolicy.hard_cap", f"must be a HardCap or None, got {self.hard_cap!r}")
        if (
            self.consecutive_failures is None
            and self.failure_rate is None
            and self.slow_call_rate is None
            and self.consecutive_transient_failures is None
            and self.success_rate is None
        ):
            raise ConfigError(
                "CircuitPolicy",
                "set at least one trip condition (consecutive_failures, consecutive_transient_failures,"
                " failure_rate, slow_call_rate, success_rate)",
            )
