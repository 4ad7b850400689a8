"""Endpoints and the operator's status for them (values shared by the core and the shell)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ._errors import ConfigError
from ._knobs import check_count

MAX_WEIGHT = 2**32
"""The largest weight one endpoint may carry; totals are checked against overflow."""
MAX_IN_FLIGHT = "max_in_flight"
"""The metadata key that sets one endpoint's concurrency cap (over the balancer's ``max_in_flight``)."""
MAX_IN_FLIGHT_LIMIT = 1 << 20
"""The largest cap a balancer or an endpoint may set."""


_NO_METADATA: Mapping[str, Any] = MappingProxyType({})
"""The metadata of every endpoint given none: one shared read-only mapping, not two objects each."""


def _freeze_metadata(value: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError("Endpoint.metadata", f"must be a mapping (a dict), got {type(value).__name__}: {value!r:.80}")
    return MappingProxyType(dict(value)) if value else _NO_METADATA


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
            update), not hashed. One key is read: ``"max_in_flight"`` (an int >= 1), this
            endpoint's concurrency cap over the balancer's ``max_in_flight``.
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
        check_count("Endpoint.weight", self.weight, maximum=MAX_WEIGHT)
        check_count("Endpoint.tier", self.tier, minimum=0)
        if self.zone is not None and not isinstance(self.zone, str):
            raise ConfigError("Endpoint.zone", f"must be a string or None, got {self.zone!r:.80}")
        cap = self.metadata.get(MAX_IN_FLIGHT)
        if cap is not None:
            check_count(f"Endpoint.metadata[{MAX_IN_FLIGHT!r}]", cap, maximum=MAX_IN_FLIGHT_LIMIT)


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
