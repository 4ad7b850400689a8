"""Endpoints and the operator's status for them."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ._errors import ConfigError

MAX_WEIGHT = 2**32
"""The largest weight one endpoint may carry; totals are checked against overflow."""


def _freeze_metadata(value: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError("Endpoint.metadata", f"must be a mapping (a dict), got {type(value).__name__}: {value!r:.80}")
    return MappingProxyType(dict(value))


@attrs.frozen
class Endpoint:
    """One backend the balancer may route to.

    ``id`` is the stable identity: two updates naming the same id describe the same
    endpoint, whose health state survives the update.

    Attributes:
        id: stable identity, unique in the pool.
        address: where to call; opaque to the balancer (a ``(host, port)`` pair, a URL...).
        weight: relative share for weighted policies, 1 to ``2**32``.
        tier: priority level, 0 first; traffic spills to higher tiers as health falls.
        zone: optional locality label.
        metadata: free-form, read-only; compared by equality (an update that changes it is an
            update), not hashed.
    """

    id: str
    address: Any = attrs.field(default=None, kw_only=True)
    weight: int = attrs.field(default=1, kw_only=True)
    tier: int = attrs.field(default=0, kw_only=True)
    zone: str | None = attrs.field(default=None, kw_only=True)
    metadata: Mapping[str, Any] = attrs.field(
        factory=dict, kw_only=True, converter=_freeze_metadata, eq=True, hash=False
    )

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ConfigError("Endpoint.id", f"must be a non-empty string, got {self.id!r}")
        if isinstance(self.weight, bool) or not isinstance(self.weight, int) or not 1 <= self.weight <= MAX_WEIGHT:
            raise ConfigError("Endpoint.weight", f"must be an int in [1, 2**32], got {self.weight!r}")
        if isinstance(self.tier, bool) or not isinstance(self.tier, int) or self.tier < 0:
            raise ConfigError("Endpoint.tier", f"must be an int >= 0, got {self.tier!r}")
        if self.zone is not None and not isinstance(self.zone, str):
            raise ConfigError("Endpoint.zone", f"must be a string or None, got {self.zone!r:.80}")


class AdminStatus(enum.Enum):
    """What an operator has said about an endpoint (``LoadBalancer.set_status``)."""

    AUTO = "auto"
    """Probes and the circuit decide."""
    DRAINING = "draining"
    """No new permits; in-flight ones finish."""
    DISABLED = "disabled"
    """No permits at all, in any mode, panic included."""
    FORCED_HEALTHY = "forced_healthy"
    """Eligible whatever probes say; the passive circuit still applies."""
    FORCED_UNHEALTHY = "forced_unhealthy"
    """Ineligible whatever probes and the circuit say (panic may still use it)."""


def check_duration(knob: str, value: float, *, allow_zero: bool = False) -> float:
    """Validate a duration knob in seconds, raising :class:`ConfigError` naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(knob, f"must be a number of seconds, got {value!r}")
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        raise ConfigError(knob, f"must be finite, got {value!r}")
    if v < 0 or (v == 0 and not allow_zero):
        raise ConfigError(knob, f"must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return v


def check_share(
    knob: str,
    value: float,
    *,
    high: float = 1.0,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Validate a share knob: a *fraction* (0.5 means half), raising :class:`ConfigError` naming it.

    Every share knob takes a fraction (``docs/knobs.md`` lists them). A value that reads
    as a percent (past ``high``, up to ``100 * high``) gets an error saying so and giving
    the fraction to write instead.
    """
    low_mark, high_mark = "(" if low_open else "[", ")" if high_open else "]"
    span = f"{low_mark}0, {high:g}{high_mark}"
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ConfigError(knob, f"must be a fraction in {span} (0.5 = 50%), got {value!r}")
    v = float(value)
    if v < 0 or (low_open and v == 0) or v > high or (high_open and v == high):
        hint = ""
        if high < v <= 100 * high:
            hint = f": {value!r} looks like a percent; shares are fractions, so write {v / 100:g}"
        raise ConfigError(knob, f"must be a fraction in {span} (0.5 = 50%), got {value!r}{hint}")
    return v
