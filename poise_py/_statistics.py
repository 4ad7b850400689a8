"""Frozen counters from ``LoadBalancer.statistics()``.

Cardinality is bounded: one :class:`EndpointCounters` per live endpoint, and pool-wide
totals keyed by enums only. When an endpoint leaves, its counters are folded into the
pool totals once its last permit ends, so the totals never go backwards. Every count
saturates at ``2**64 - 1`` instead of wrapping.

Statistics are counts; the state they come from is in ``LoadBalancer.snapshot()``. So
load control shows here as what it did: ``selections[DecisionMode.LIMITED]`` (calls that
passed over an endpoint at its concurrency limit, counted on the endpoint that took them,
and pool-wide), and the
calls shed with :class:`~poise_py.Overloaded` among ``failed_selections``; an endpoint's
cap, adaptive limit, effective weight and slow-start progress are in its
:class:`~poise_py.EndpointSnapshot`.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ._decision import DecisionMode
from ._faults import Fault
from ._snapshot import EndpointCounters


@attrs.frozen(kw_only=True)
class PoolCounters:
    """Pool-wide totals since the balancer was built, departed endpoints included.

    Attributes:
        issued: permits issued.
        selections: permits issued in each decision mode.
        successes: calls reported successful.
        faults: calls that ended with each fault tier.
        cancellations: permits that ended without an outcome.
        stale: results dropped because their epoch had passed (or the endpoint left).
        probes: half-open probe permits issued.
        ejections: circuit openings with escalation.
        suppressed_ejections: trips held back by ``max_ejection_percent``.
        failed_selections: ``acquire`` calls that raised a :class:`SelectionError`.
        no_eligible_alerts: :class:`NoEligiblePersisting` events emitted.
        discovery_applied: discovery updates applied.
        discovery_rejected: discovery updates rejected (stale, duplicate, incoherent).
        coordination_fallbacks: times an instance fell back to its local circuit.
        panics: :class:`PanicStarted` events emitted.
        retries_denied: retries ``lb.call`` skipped because the retry budget was spent.
        readiness_failures: endpoint readiness checks that failed (and quarantined it).
        events_dropped: events a slow ``lb.events()`` subscriber lost (drop-oldest).
        log_lines_suppressed: log lines held back by the per-endpoint rate limit.
        hedged_requests: ``lb.call`` (transport, channel) requests made with a hedge policy.
        hedges_sent: hedges sent (the load hedging added is ``hedges_sent / hedged_requests``).
        hedges_won: hedges whose answer was the request's answer.
        waits: callers that found no eligible endpoint and waited (``acquire(wait=...)``).
        waits_expired: waiters whose wait ended before an endpoint became eligible.
    """

    issued: int
    selections: Mapping[DecisionMode, int]
    successes: int
    faults: Mapping[Fault, int]
    cancellations: int
    stale: int
    probes: int
    ejections: int
    suppressed_ejections: int
    failed_selections: int
    no_eligible_alerts: int
    discovery_applied: int
    discovery_rejected: int
    coordination_fallbacks: int
    panics: int
    retries_denied: int
    readiness_failures: int
    events_dropped: int
    log_lines_suppressed: int
    hedged_requests: int = 0
    hedges_sent: int = 0
    hedges_won: int = 0
    waits: int = 0
    waits_expired: int = 0

    @property
    def hedge_load(self) -> float:
        """The load hedging added: hedges sent per hedged request (0.0 before any)."""
        return self.hedges_sent / self.hedged_requests if self.hedged_requests else 0.0


@attrs.frozen(kw_only=True)
class BalancerStatistics:
    """Counters for the pool and for each live endpoint, from ``lb.statistics()``.

    Attributes:
        pool: pool-wide totals.
        endpoints: counters of each live endpoint, by id.
        size: how many endpoints the pool holds.
        available: how many could take a permit now.
        ejected: circuits OPEN or HALF_OPEN now.
        inflight: permits issued and not yet ended, pool-wide.
        taken_at: the balancer clock's reading.
        degraded: endpoints degraded by ``max_ejection_percent`` now (reserve capacity).
    """

    pool: PoolCounters
    endpoints: Mapping[str, EndpointCounters]
    size: int
    available: int
    ejected: int
    inflight: int
    taken_at: float
    degraded: int = 0
