"""Typed events: what the balancer tells observers and ``lb.events()`` subscribers.

Every event is a frozen value carrying ``at``, the balancer clock's reading when it
happened. Match them by type (``match event: case poise.CircuitOpened(): ...``); the
fields say what happened, never a message to parse.

An event's ``error`` and ``storage`` are text from outside (a storage's value, a
discovery source's complaint): they are redacted and bounded as the event is made
(:mod:`poise_py._redact`), so an event never holds a 4 MB message or a password however
it is shown. Endpoint ids are left whole: they are the keys a program matches on.

The base class and the no-eligible alert's two events are values the pure core makes,
so they are defined in :mod:`poise_py._core._event_values` and exported from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import attrs

from ._core._circuit import Cause, CircuitState
from ._core._event_values import BalancerEvent
from ._errors import DiscoveryError, IneligibleReason, SelectionError
from ._redact import shown, shown_error


def _frozen_reasons(value: Mapping[IneligibleReason, int]) -> Mapping[IneligibleReason, int]:
    return MappingProxyType(dict(value))


def _shown_error(error: BaseException) -> BaseException:
    return shown_error(error)


def _shown_discovery_error(error: DiscoveryError) -> DiscoveryError:
    return shown_error(error)


def _shown_selection_error(error: SelectionError) -> SelectionError:
    return shown_error(error)


def _shown_text(text: str) -> str:
    return shown(text)


@attrs.frozen(kw_only=True)
class CircuitOpened(BalancerEvent):
    """An endpoint's circuit moved to OPEN (a trip, a failed probe, or a Retry-After).

    Attributes:
        endpoint_id: the endpoint.
        epoch: the circuit's new epoch.
        cause: why it opened.
        previous: CLOSED (a trip) or HALF_OPEN (a failed probe).
        reopen_at: when it becomes HALF_OPEN (balancer clock).
    """

    endpoint_id: str
    epoch: int
    cause: Cause
    previous: CircuitState
    reopen_at: float | None


@attrs.frozen(kw_only=True)
class CircuitHalfOpened(BalancerEvent):
    """An endpoint's open window ended: its circuit is HALF_OPEN and takes probes.

    Attributes:
        endpoint_id: the endpoint.
        epoch: the circuit's new epoch.
        cause: COOLDOWN_ELAPSED (its window ran out), or RECALLED (ejected for a
            load-shaped failure, it is probed early because the pool shows load:
            docs/overload.md).
    """

    endpoint_id: str
    epoch: int
    cause: Cause = Cause.COOLDOWN_ELAPSED


@attrs.frozen(kw_only=True)
class CircuitClosed(BalancerEvent):
    """An endpoint's circuit moved to CLOSED (a probe succeeded, a reset, or an ejection undone).

    Attributes:
        endpoint_id: the endpoint.
        epoch: the circuit's new epoch.
        cause: PROBE_SUCCEEDED, RESET, HEALTH_CHECK_PASSED, or POOL_LOADED (ejected for a
            load-shaped failure, it is back because an endpoint in rotation failed the same
            way soon after: docs/overload.md).
        previous: the state it left.
    """

    endpoint_id: str
    epoch: int
    cause: Cause
    previous: CircuitState


@attrs.frozen(kw_only=True)
class EndpointEjected(BalancerEvent):
    """An endpoint that took traffic left rotation because of its health.

    Emitted when a CLOSED circuit opens, blocks (PERMANENT) or retires (hard cap), and by
    active health checks when they mark an endpoint unhealthy (``cause`` None).

    Attributes:
        endpoint_id: the endpoint.
        cause: the circuit's cause, or None when active health checks took it out.
        state: the circuit's state after the move (OPEN, BLOCKED or RETIRED), or None.
        until: when it may be probed again, if that is known.
    """

    endpoint_id: str
    cause: Cause | None
    state: CircuitState | None = None
    until: float | None = None


@attrs.frozen(kw_only=True)
class EndpointReadmitted(BalancerEvent):
    """An ejected endpoint is back in rotation.

    Emitted when its circuit closes again (a successful probe, an operator's reset, an
    ejection for load undone), and by active health checks when they mark it healthy again
    (``cause`` None).

    Attributes:
        endpoint_id: the endpoint.
        cause: the circuit's cause (PROBE_SUCCEEDED, RESET, POOL_LOADED...), or None for
            active health.
    """

    endpoint_id: str
    cause: Cause | None


@attrs.frozen(kw_only=True)
class EndpointDegraded(BalancerEvent):
    """``max_ejection_percent`` refused an endpoint's ejection: it is DEGRADED instead.

    Its circuit stays CLOSED, but it leaves its tier's healthy set and becomes reserve
    capacity, taking traffic only while the healthy endpoints lack capacity (decision
    mode ``DEGRADED``). It is ejected as soon as the guard has room again.

    Attributes:
        endpoint_id: the endpoint.
        cause: the trip the guard refused.
    """

    endpoint_id: str
    cause: Cause | None


@attrs.frozen(kw_only=True)
class EndpointDegradationEnded(BalancerEvent):
    """A degraded endpoint is no longer degraded.

    Attributes:
        endpoint_id: the endpoint.
        ejected: True when it left by being ejected (the guard had room again, or another
            move such as a Retry-After opening or a fleet's shared OPEN); False when it
            is back in the healthy set (a success with no trip condition left, a reset).
    """

    endpoint_id: str
    ejected: bool


@attrs.frozen(kw_only=True)
class DiscoveryApplied(BalancerEvent):
    """A discovery update was applied.

    Attributes:
        revision: the update's revision.
        added: ids that joined.
        removed: ids that left.
        updated: ids whose attributes changed (their health state was kept).
        size: how many endpoints the pool holds now.
    """

    revision: int
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    size: int


@attrs.frozen(kw_only=True)
class DiscoveryRejected(BalancerEvent):
    """A discovery update was rejected whole; the live pool is as it was.

    Attributes:
        revision: the rejected update's revision (None if it carried none).
        error: the typed reason (:class:`StaleRevision`, :class:`DuplicateIdentity`...),
            its message redacted and bounded.
    """

    revision: int | None
    error: DiscoveryError = attrs.field(converter=_shown_discovery_error)


@attrs.frozen(kw_only=True)
class PanicStarted(BalancerEvent):
    """Panic routing began in a scope whose healthy share fell under the threshold.

    Attributes:
        tier: the tier (scope) in panic, or None for the whole pool.
        healthy_share: the healthy share that triggered it, in [0, 1].
    """

    tier: int | None
    healthy_share: float


@attrs.frozen(kw_only=True)
class PanicEnded(BalancerEvent):
    """Panic routing ended: the scope's healthy share is back over the threshold.

    Attributes:
        tier: the tier (scope), or None for the whole pool.
        healthy_share: the healthy share now, in [0, 1].
    """

    tier: int | None
    healthy_share: float


@attrs.frozen(kw_only=True)
class CoordinationFallback(BalancerEvent):
    """The fleet coordinator could not be reached: this instance uses its local circuit.

    No call fails because of it; this says the fleet is not sharing state meanwhile.

    Attributes:
        endpoint_id: None when the storage is unreachable (every endpoint falls back);
            an endpoint's id when only its shared record is unusable (a key of another
            type, an unknown state, a field that is not a number: ``error`` says which
            key and what), reported once until the record is usable again.
        error: what the storage raised, or what is wrong with the record; its message is
            redacted and bounded (a record's 4 MB field shows as its first 500
            characters and its length).
        storage: the storage, as its ``repr`` names it (redacted and bounded too).
    """

    endpoint_id: str | None
    error: BaseException = attrs.field(eq=False, hash=False, converter=_shown_error)
    storage: str = attrs.field(default="", converter=_shown_text)


@attrs.frozen(kw_only=True)
class SlowStartBegan(BalancerEvent):
    """An endpoint began its slow start (``LoadBalancer(slow_start=...)``, or after a recall).

    It joined a serving pool, or came back (its circuit closed after an ejection, active
    health let it back, an operator re-enabled it); its share of the traffic now ramps up
    over the window. Without ``slow_start``, an endpoint recalled for the pool's load whose
    probe passes ramps up over the circuit policy's ``overload_window`` (docs/overload.md).

    Attributes:
        endpoint_id: the endpoint.
    """

    endpoint_id: str


@attrs.frozen(kw_only=True)
class SlowStartEnded(BalancerEvent):
    """An endpoint's slow start is over: it gets its full weight (or it left, or was ejected again).

    Attributes:
        endpoint_id: the endpoint.
    """

    endpoint_id: str


@attrs.frozen(kw_only=True)
class ConcurrencyLimitChanged(BalancerEvent):
    """An endpoint's concurrency limit in force moved by more than a step, as its adaptive limit moved.

    The limit in force is the least of its cap, its adaptive limit and its quota's (the
    snapshot's ``concurrency_limit``); it is reported when it differs from the last reported
    one by at least a quarter of that, rounded down, and by at least 2, so a limit that
    creeps up one call at a time is not an event per call. An adaptive limit moving above a
    fixed cap changes nothing in force and is not reported.

    Attributes:
        endpoint_id: the endpoint.
        limit: the new limit in force (calls in flight).
        previous: the limit in force last reported (at first, the one it started with).
    """

    endpoint_id: str
    limit: int
    previous: int
