"""Frozen views of the balancer's state, from ``LoadBalancer.snapshot()``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import cast

import attrs

from ._core._circuit import CircuitState
from ._core._health_schedule import HealthSnapshot
from ._core._limits import UNLIMITED
from ._core._load_signals import LoadSignal
from ._core._pool import Pool
from ._core._record import FAULT_INDEX, MODE_INDEX, Member
from ._core._routing import TRAFFIC_UNITS
from ._core._tally import SATURATED
from ._decision import DecisionMode
from ._endpoint import AdminStatus, Endpoint
from ._errors import IneligibleReason
from ._faults import Fault
from ._load_report import LoadReport

HealthView = Callable[[str], HealthSnapshot | None]
"""Endpoint id -> its active-health view (the balancer's health runner)."""


@attrs.frozen(kw_only=True)
class EndpointCounters:
    """Per-endpoint observation counters; each saturates at ``2**64 - 1``.

    Attributes:
        issued: permits issued.
        selections: permits issued in each decision mode (HEALTHY, SPILLOVER, PANIC, DEGRADED).
        successes: calls reported successful.
        faults: calls that ended with each fault tier.
        cancellations: permits that ended without an outcome (cancelled or dropped).
        probes: half-open probe permits issued.
        stale: results dropped because their epoch had passed (or the endpoint left).
        ejections: times the circuit opened with escalation.
        suppressed_ejections: trips held back by ``max_ejection_percent``.
        load_reports: ORCA load reports its backend sent (``permit.report_load``).
        quota_rests: times its provider said its quota was spent (it rested until the reset).
    """

    issued: int
    selections: Mapping[DecisionMode, int]
    successes: int
    faults: Mapping[Fault, int]
    cancellations: int
    probes: int
    stale: int
    ejections: int
    suppressed_ejections: int
    load_reports: int = 0
    quota_rests: int = 0


@attrs.frozen(kw_only=True)
class EndpointSnapshot:
    """One endpoint as of the snapshot.

    Attributes:
        endpoint: the endpoint itself.
        state: its circuit's state.
        epoch: its circuit's epoch.
        inflight: permits issued and not yet ended.
        admin: the operator's status.
        eligible_reason: why it could not take a permit now, or None if it could.
        reopen_at: when an OPEN circuit becomes HALF_OPEN (balancer clock), else None.
        consecutive_failures: the current run of strikes.
        escalation_level: the escalation level the next ejection would use (ejections in
            the current episode, decayed while the circuit stays closed).
        counters: the observation counters.
        health: active health (``HealthCheck``), or None when the balancer has none.
        degraded: whether ``max_ejection_percent`` refused its ejection, making it reserve
            capacity (its circuit stays CLOSED; see ``DecisionMode.DEGRADED``).
        effective_weight: its weight times its slow-start ramp factor and the share of its
            provider's quota left: the weight every policy gives it now (its weight when it
            is not in slow start and no provider said its quota is partly spent).
        ramp_progress: how far through its slow start it is, ``elapsed / window`` in
            [0, 1], or None when it is not in slow start (1.0: the window has passed and
            its next pick ends the ramp, with :class:`SlowStartEnded`).
        max_in_flight: its fixed concurrency cap (its metadata's ``max_in_flight``, else
            the balancer's), or None when it has none.
        concurrency_limit: the limit :class:`AdaptiveConcurrency` has learned for it, or
            None without adaptive limits. It is not a candidate while as many calls as the
            lesser of this and ``max_in_flight`` are in flight.
        load_report: the latest ORCA load report its backend sent (:class:`LoadReport`), or None.
        load_reported_at: when it arrived (balancer clock), or None.
        load_weight: the weight its reports make (gRPC's weighted round robin: ``qps /
            (utilization + eps / qps * error_utilization_penalty)``), or None before a report
            with both qps and utilization. :class:`WeightedByLoad` uses it once its blackout
            period has passed and until it expires.
        held_failures: failed calls still counted in its load by a
            ``PowerOfTwoChoices(failure_penalty=...)`` (0 without one).
        quota_remaining: the requests its provider's last answer said are left (at most
            that many calls are in flight to it), 0 while it rests on a spent quota, or
            None when no answer said.
        quota_resets_at: when its spent quota resets (balancer clock) while it rests on it
            (``eligible_reason`` QUOTA), else None.
    """

    endpoint: Endpoint
    state: CircuitState
    epoch: int
    inflight: int
    admin: AdminStatus
    eligible_reason: IneligibleReason | None
    reopen_at: float | None
    consecutive_failures: int
    escalation_level: int
    counters: EndpointCounters
    health: HealthSnapshot | None = None
    degraded: bool = False
    effective_weight: float = attrs.field(
        default=attrs.Factory(lambda self: float(self.endpoint.weight), takes_self=True)
    )
    ramp_progress: float | None = None
    max_in_flight: int | None = None
    concurrency_limit: int | None = None
    load_report: LoadReport | None = None
    load_reported_at: float | None = None
    load_weight: float | None = None
    held_failures: int = 0
    quota_remaining: int | None = None
    quota_resets_at: float | None = None

    @property
    def id(self) -> str:
        """The endpoint's id."""
        return self.endpoint.id


@attrs.frozen(kw_only=True)
class TierSnapshot:
    """One tier's routing state as of the snapshot.

    Attributes:
        tier: the tier number.
        endpoints: live endpoints in the tier.
        capacity: those an operator has not taken out (DRAINING, DISABLED).
        healthy: those that may take a permit now.
        share: the fraction of new traffic routed to the tier (0.0 to 1.0).
        panicking: whether the tier is in panic (its healthy share is under the threshold).
        degraded: its degraded endpoints that could take a permit (reserve capacity).
    """

    tier: int
    endpoints: int
    capacity: int
    healthy: int
    share: float
    panicking: bool
    degraded: int = 0


@attrs.frozen(kw_only=True)
class PoolSnapshot:
    """The whole pool as of the snapshot.

    Attributes:
        endpoints: every live endpoint, in discovery order.
        available: endpoints that could take a permit now.
        ejected: circuits OPEN or HALF_OPEN.
        suppressed_ejections: trips held back by ``max_ejection_percent``, pool-wide.
        taken_at: the balancer clock's reading.
        tiers: each tier's routing state, lowest tier first.
        degraded: endpoints degraded by ``max_ejection_percent`` (reserve capacity).
    """

    endpoints: tuple[EndpointSnapshot, ...]
    available: int
    ejected: int
    suppressed_ejections: int
    taken_at: float
    tiers: tuple[TierSnapshot, ...] = ()
    degraded: int = 0

    def __getitem__(self, endpoint_id: str) -> EndpointSnapshot:
        """The snapshot of one endpoint by id (KeyError if absent).

        Raises:
            KeyError: no endpoint has this id.
            TypeError: ``endpoint_id`` is not a string (``snapshot[0]``, or iterating the
                snapshot itself): the message says to iterate ``snapshot.endpoints``.
        """
        if not isinstance(endpoint_id, str):
            raise TypeError(
                f"a PoolSnapshot is looked up by endpoint id (snapshot['a']), not by {endpoint_id!r:.40}: "
                "to go through every endpoint, iterate snapshot.endpoints"
            )
        for e in self.endpoints:
            if e.endpoint.id == endpoint_id:
                return e
        raise KeyError(endpoint_id)

    def __contains__(self, endpoint_id: object) -> bool:
        """True if an endpoint of the snapshot has this id."""
        return any(e.endpoint.id == endpoint_id for e in self.endpoints)

    @property
    def size(self) -> int:
        """How many endpoints the pool holds."""
        return len(self.endpoints)


def endpoint_snapshot(
    pool: Pool, member: Member, health: HealthView | None = None, *, now: float | None = None
) -> EndpointSnapshot:
    """Freeze one endpoint's state (``health`` gives its active-health view by id).

    ``now`` decays the escalation level of a closed circuit to the one its next
    ejection would use, and places a slow start in its window; without it the level is
    reported undecayed and a ramp at its start.
    """
    circuit = member.circuit
    signal = pool.signal(member)
    weight = float(member.endpoint.weight)
    ramp_progress: float | None = None
    max_in_flight: int | None = None
    concurrency_limit: int | None = None
    control = pool.control(member)
    resets_at = pool.resting_until(member)
    quota_remaining: int | None = 0 if resets_at is not None else None
    if control is not None:
        if resets_at is None and control.quota < UNLIMITED:
            quota_remaining = control.quota
        max_in_flight = None if control.cap >= UNLIMITED else control.cap
        limiter = control.limiter
        concurrency_limit = None if limiter is None else limiter.limit
        since = control.ramp_since
        shape = control.shape
        if since is not None and shape is not None:
            at = since if now is None or not now >= since else now  # NaN off the balancer's thread
            ramp_progress = min(1.0, (at - since) / shape.window)
            weight *= pool.ramp_factor(member, at)
        else:
            weight *= control.share
    return EndpointSnapshot(
        endpoint=member.endpoint,
        state=circuit.state,
        epoch=circuit.epoch,
        inflight=member.inflight,
        admin=member.admin,
        eligible_reason=pool.refusal(member),
        reopen_at=circuit.next_deadline(),
        consecutive_failures=circuit.consecutive_failures,
        escalation_level=circuit.level if now is None else circuit.escalation_level(now),
        counters=endpoint_counters(member, signal),
        health=None if health is None else health(member.endpoint.id),
        degraded=circuit.degraded,
        effective_weight=weight,
        ramp_progress=ramp_progress,
        max_in_flight=max_in_flight,
        concurrency_limit=concurrency_limit,
        load_report=None if signal is None else cast("LoadReport | None", signal.report),
        load_reported_at=None if signal is None or not signal.reports else signal.reported_at,
        load_weight=None if signal is None or signal.weight <= 0.0 else signal.weight,
        held_failures=0 if now is None else pool.held(member, now),
        quota_remaining=quota_remaining,
        quota_resets_at=resets_at,
    )


def endpoint_counters(member: Member, signal: LoadSignal | None) -> EndpointCounters:
    """Freeze one endpoint's counters (each saturating at ``2**64 - 1``); ``signal``: what its backend said."""
    circuit = member.circuit
    issued = min(SATURATED, member.successes + sum(member.faults) + member.cancellations + member.inflight)
    modes = member.mode_selections
    rerouted = sum(modes)
    selections = {m: min(SATURATED, modes[i]) for m, i in MODE_INDEX.items()}
    selections[DecisionMode.HEALTHY] = max(0, issued - rerouted)
    return EndpointCounters(
        issued=issued,
        selections=MappingProxyType(selections),
        successes=member.successes,
        faults=MappingProxyType({f: member.faults[i] for f, i in FAULT_INDEX.items()}),
        cancellations=member.cancellations,
        probes=member.probes,
        stale=member.stale,
        ejections=min(SATURATED, circuit.ejections),
        suppressed_ejections=min(SATURATED, circuit.suppressed_ejections),
        load_reports=0 if signal is None else min(SATURATED, signal.reports),
        quota_rests=0 if signal is None else min(SATURATED, signal.quota_rests),
    )


def pool_snapshot(pool: Pool, now: float, *, health: HealthView | None = None) -> PoolSnapshot:
    """Freeze the whole pool."""
    return PoolSnapshot(
        endpoints=tuple(endpoint_snapshot(pool, s, health, now=now) for s in pool.members.values()),
        available=pool.available_count,
        ejected=pool.ejected_count,
        suppressed_ejections=pool.suppressed_ejections,
        taken_at=now,
        tiers=tuple(
            TierSnapshot(
                tier=t.number,
                endpoints=t.members,
                capacity=t.capacity,
                healthy=t.healthy,
                share=pool.router.shares.get(t.number, 0) / TRAFFIC_UNITS,
                panicking=t.panicking,
                degraded=t.reserve,
            )
            for t in pool.router.order
        ),
        degraded=pool.degraded_count,
    )
