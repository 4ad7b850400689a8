"""What a selection decided, recorded on every permit."""

from __future__ import annotations

import enum

import attrs


class DecisionMode(enum.Enum):
    """How the endpoint was chosen."""

    HEALTHY = "healthy"
    """From the lowest tier with healthy capacity, in its healthy set."""
    SPILLOVER = "spillover"
    """From a later tier, because earlier tiers lacked healthy capacity."""
    PANIC = "panic"
    """From a scope whose healthy share fell under the panic threshold (USE_ALL)."""


@attrs.frozen
class Decision:
    """The routing decision behind a permit.

    Attributes:
        mode: HEALTHY, SPILLOVER or PANIC.
        tier: the tier the endpoint was chosen from.
    """

    mode: DecisionMode
    tier: int
