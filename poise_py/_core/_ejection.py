"""Ejection, in one place (pure core): how long it lasts, and how many the pool allows.

:class:`Escalation` and :class:`HardCap` are the knobs of one circuit's ejections;
:class:`EjectionGuard` is the pool's ``max_ejection_percent`` bookkeeping (the ejected
count, the allowance, the degraded reserve, the suppressed-ejection tally).

The open window for the ``n``-th consecutive ejection (``n`` from 0) is
``base * f(n)``, where ``f`` is ``n + 1`` (linear, Envoy's outlier detection) or
``multiplier ** n`` (exponential, seed 001's doubling), capped at ``maximum``. Whether
the cap is reached is decided before any multiplication (in log space for the
exponential form), so no configuration and no count (up to and past ``2**64``) can overflow or wedge
a circuit open: the answer is always a finite number in ``[base, maximum]`` before
jitter, and jitter never takes it past ``maximum``.
"""

from __future__ import annotations

import enum
import math
from typing import TYPE_CHECKING

import attrs

from .._errors import ConfigError
from .._knobs import check_bool, check_count, check_duration, check_number, check_share, optional

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._circuit import Circuit
    from ._circuit_policy import CircuitPolicy
    from ._record import Member

MAX_LEVEL = 2**64
_SATURATED = 2**64 - 1
"""Escalation levels saturate here; any larger count gives the same (capped) answer."""


class Backoff(enum.Enum):
    """The shape of escalation."""

    LINEAR = "linear"
    """``base * (n + 1)``: Envoy's ``base_ejection_time * num_ejections``."""
    EXPONENTIAL = "exponential"
    """``base * multiplier ** n``: 60 s, 120 s, 240 s... as in seed 001."""


@attrs.frozen(kw_only=True)
class Escalation:
    """Open-window escalation knobs.

    Attributes:
        base: the first open window, seconds.
        maximum: no open window is longer (jitter included).
        backoff: LINEAR or EXPONENTIAL.
        multiplier: the exponential base (> 1); ignored for LINEAR.
        jitter: a fraction in [0, 1): each window is scaled by a uniform factor in
            ``[1 - jitter, 1 + jitter]`` so instances do not re-herd in lock-step.
        reset_on_success: a successful half-open probe resets escalation to level 0.
        decay_interval: while the circuit stays closed, escalation drops one level per
            interval (Envoy's behaviour); ``None`` means ``base``.
    """

    base: float = 30.0
    maximum: float = 300.0
    backoff: Backoff = Backoff.EXPONENTIAL
    multiplier: float = 2.0
    jitter: float = 0.1
    reset_on_success: bool = True
    decay_interval: float | None = None

    def __attrs_post_init__(self) -> None:
        check_duration("Escalation.base", self.base)
        check_duration("Escalation.maximum", self.maximum)
        if self.maximum < self.base:
            raise ConfigError("Escalation.maximum", f"must be >= base ({self.base}), got {self.maximum}")
        if not isinstance(self.backoff, Backoff):
            raise ConfigError("Escalation.backoff", f"must be a Backoff, got {self.backoff!r}")
        check_number("Escalation.multiplier", self.multiplier, low=1.0, low_open=True)
        check_share("Escalation.jitter", self.jitter, high_open=True)
        check_bool("Escalation.reset_on_success", self.reset_on_success)
        optional(check_duration, "Escalation.decay_interval", self.decay_interval)

    def window(self, level: int) -> float:
        """Return the un-jittered open window for escalation ``level`` (0 = first)."""
        n = min(max(level, 0), MAX_LEVEL)
        base = float(self.base)
        cap = float(self.maximum)
        if n == 0:
            return base
        if self.backoff is Backoff.LINEAR:
            # Compare before multiplying so a huge count never builds a huge float.
            return cap if n + 1 >= cap / base else min(base * (n + 1), cap)
        # Decide in log space whether the cap is reached (no huge power is ever built),
        # then compute the exact power only below it.
        growth = n * math.log(self.multiplier)
        if growth >= math.log(cap) - math.log(base):
            return cap
        if growth < 700.0:  # multiplier ** n < e**700: exact and finite
            return min(base * self.multiplier**n, cap)
        return min(math.exp(math.log(base) + growth), cap)

    def jittered(self, level: int, unit: float) -> float:
        """Return the open window for ``level`` with jitter; ``unit`` is uniform in [0, 1)."""
        w = self.window(level)
        if self.jitter:
            w *= 1.0 + self.jitter * (2.0 * unit - 1.0)
        return min(w, float(self.maximum))

    def decayed(self, level: int, closed_for: float) -> int:
        """Return ``level`` after the circuit stayed closed for ``closed_for`` seconds."""
        if level <= 0 or closed_for <= 0:
            return max(level, 0)
        interval = float(self.decay_interval if self.decay_interval is not None else self.base)
        steps = closed_for / interval
        return 0 if steps >= level else level - int(steps)


@attrs.frozen(kw_only=True)
class HardCap:
    """Remove an endpoint for good (until discovery re-emits it) past these limits.

    Attributes:
        max_ejections: ejections in a row without a successful recovery; ``None``: no cap.
        max_ejected_time: cumulative seconds ejected without a recovery; ``None``: no cap.
    """

    max_ejections: int | None = None
    max_ejected_time: float | None = None

    def __attrs_post_init__(self) -> None:
        optional(check_count, "HardCap.max_ejections", self.max_ejections)
        optional(check_duration, "HardCap.max_ejected_time", self.max_ejected_time)
        if self.max_ejections is None and self.max_ejected_time is None:
            raise ConfigError("HardCap", "set max_ejections, max_ejected_time or both")


def ejection_allowance(pool_size: int, max_share: float) -> int:
    """How many endpoints of a pool may be ejected at once (``max_share`` a fraction); always at least one."""
    return max(1, math.floor(pool_size * max_share + 1e-9))


class EjectionGuard:
    """The pool's ``max_ejection_percent`` bookkeeping: who is ejected, who is degraded.

    The pool tells the guard after every change to an endpoint's circuit
    (:meth:`update`) or membership (:meth:`leave`, :meth:`resize`); the guard keeps the
    count of ejected circuits against the allowance, the degraded endpoints in the order
    they degraded (the next to eject when there is room), and the suppressed-ejection
    total. Pure bookkeeping: no clock, no I/O.
    """

    __slots__ = ("_allowance", "_degraded", "_ejected", "_share", "suppressed")

    def __init__(self, max_share: float) -> None:
        self._share = max_share
        self._allowance = 1
        self._ejected = 0
        self._degraded: dict[Member, None] = {}
        """Degraded endpoints, longest degraded first: the next to eject when the guard has room."""
        self.suppressed: int = 0
        """Trips the guard refused, pool-wide (saturating)."""

    @property
    def may_eject(self) -> bool:
        """Whether one more circuit may be ejected now."""
        return self._ejected < self._allowance

    @property
    def ejected_count(self) -> int:
        """How many circuits are OPEN or HALF_OPEN."""
        return self._ejected

    @property
    def degraded_count(self) -> int:
        """How many endpoints are degraded."""
        return len(self._degraded)

    def resize(self, pool_size: int) -> None:
        """Recompute the allowance for a pool of ``pool_size`` endpoints."""
        self._allowance = ejection_allowance(pool_size, self._share)

    def update(self, member: Member) -> bool | None:
        """Bring the counts in line with ``member``'s circuit; the new degraded flag if it changed, else None."""
        circuit = member.circuit
        ejected = circuit.ejected
        if ejected != member.was_ejected:
            member.was_ejected = ejected
            self._ejected += 1 if ejected else -1
        degraded = circuit.degraded
        if degraded is member.was_degraded:
            return None
        member.was_degraded = degraded
        if degraded:
            self._degraded[member] = None
        else:
            del self._degraded[member]
        return degraded

    def leave(self, member: Member) -> None:
        """Forget an endpoint that left the pool."""
        if member.was_ejected:
            self._ejected -= 1
            member.was_ejected = False
        if member.was_degraded:
            member.was_degraded = False
            del self._degraded[member]

    def next_to_eject(self) -> Member | None:
        """The longest-degraded endpoint, if the guard has room to eject it now; else None."""
        if self._degraded and self._ejected < self._allowance:
            return next(iter(self._degraded))
        return None

    def count_suppressed(self, before: int, circuit: Circuit) -> None:
        """Count a trip the guard refused, if ``circuit``'s own tally moved from ``before``."""
        if circuit.suppressed_ejections != before:
            self.suppressed = min(self.suppressed + 1, _SATURATED)


def rotation_answers(members: Iterable[Member], member: Member, now: float) -> bool:
    """Whether the endpoints still in rotation vouch that ``member``'s fault is its own.

    Asked only when ``max_ejection_percent`` has no room for ``member``'s trip. The
    guard is there for a sick pool, where the endpoints still taking traffic fail
    too; when every endpoint in rotation (healthy, not ejected, not degraded, not
    ``member``) answered its latest call, and there is at least one, the pool is not
    sick and the dying endpoint leaves. Stops at the first one that failed.
    """
    vouched = False
    for other in members:
        if other is member or not other.is_candidate:
            continue
        if not other.circuit.answering(now):
            return False
        vouched = True
    return vouched


def rate_quorum(policy: CircuitPolicy, members: Iterable[Member], now: float) -> bool:
    """Whether ``minimum_hosts`` closed circuits have ``minimum_volume`` outcomes (stops early)."""
    needed = policy.minimum_hosts
    assert needed is not None  # noqa: S101 - only with minimum_hosts
    volume = policy.minimum_volume
    for member in members:
        circuit = member.circuit
        if circuit.fast_ticket is not None and circuit.window_counts(now)[0] >= volume:  # CLOSED, with the volume
            needed -= 1
            if not needed:
                return True
    return False
