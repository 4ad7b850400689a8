"""What a selection decided, recorded on every permit."""

from __future__ import annotations

import enum

import attrs


class DecisionMode(enum.Enum):
    """How the endpoint was chosen."""

    HEALTHY = "healthy"
    """From the preferred scope's healthy set: the first tier with capacity (its local zone,
    with a zone preference)."""
    SPILLOVER = "spillover"
    """From a later tier, or another zone, because the preferred scope lacked healthy capacity
    (its healthy share x the overprovisioning factor fell under 100%), or could not serve this
    call (every endpoint there excluded by the caller)."""
    PANIC = "panic"
    """From a tier whose healthy share fell under the panic threshold (``PanicMode.USE_ALL``):
    ejected and unhealthy endpoints included."""
    DEGRADED = "degraded"
    """From a tier's degraded endpoints (a trip ``max_ejection_percent`` refused): reserve
    capacity, used only when the healthy endpoints of every tier lack capacity."""
    LIMITED = "limited"
    """From another endpoint because the one picked first was at its concurrency limit
    (``max_in_flight`` or an adaptive limit): the call spilled instead of queueing."""


@attrs.frozen
class Decision:
    """The routing decision behind a permit.

    Decisions are interned: every permit with the same mode and tier shares one object.

    Attributes:
        mode: HEALTHY, SPILLOVER, PANIC, DEGRADED or LIMITED.
        tier: the tier the endpoint was chosen from.
    """

    mode: DecisionMode
    tier: int
