"""Test helpers shared by the suites."""

from __future__ import annotations

import attrs

import poise_py as poise

TRIP_AT_ONCE = poise.CircuitPolicy(
    consecutive_failures=1,
    minimum_volume=1,
    max_ejection_percent=1.0,
    escalation=poise.Escalation(base=30.0, jitter=0.0),
)
"""A circuit that opens on the first strike, for 30 s exactly, with no ejection guard."""


@attrs.define
class FakeClock:
    """A clock that only moves when told to: inject with ``LoadBalancer(clock=clock)``."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def endpoints(*ids: str, **kwargs: object) -> list[poise.Endpoint]:
    """Endpoints with the given ids (keyword arguments apply to each)."""
    return [poise.Endpoint(i, **kwargs) for i in ids]  # type: ignore[arg-type]


def static_lb(*ids: str, **kwargs: object) -> poise.LoadBalancer:
    """A balancer over a static list of endpoints (``kwargs`` go to the balancer)."""
    return poise.LoadBalancer(poise.StaticDiscovery(endpoints(*ids)), **kwargs)  # type: ignore[arg-type]
