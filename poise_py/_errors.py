"""The typed error family.

Every error poise_py raises is a :class:`PoiseError`. Callers match on the type, never on
the message (error-handling rule 1): each class says who raises it and when.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType


class IneligibleReason(enum.Enum):
    """Why an endpoint could not be selected; the keys of :attr:`NoEligibleEndpoints.reasons`."""

    OPEN = "open"
    """Its circuit is open (ejected) and its cool-down has not ended."""
    PROBES_TAKEN = "probes_taken"
    """Its circuit is half-open and every probe slot is reserved."""
    PERMANENT = "permanent"
    """A PERMANENT fault blocked it until discovery or an operator changes it."""
    RETIRED = "retired"
    """It hit the hard cap on ejections and waits for discovery to re-emit it."""
    UNHEALTHY = "unhealthy"
    """Active health checks, or an operator, classify it unhealthy."""
    UNCLASSIFIED = "unclassified"
    """Active health has not classified it yet and ``HealthCheck(admit_unknown=False)``."""
    DRAINING = "draining"
    """An operator set it DRAINING: in-flight permits finish, no new ones."""
    DISABLED = "disabled"
    """An operator set it DISABLED."""
    QUARANTINED = "quarantined"
    """Its readiness check failed and it is cooling down."""
    NOT_READY = "not_ready"
    """It has just joined and its first readiness check has not passed yet."""
    QUOTA = "quota"
    """Its provider said its quota is spent (rate-limit headers): it rests, with no strike, until the quota resets."""
    EXCLUDED = "excluded"
    """The caller excluded it (``acquire(exclude=...)``), usually as already tried."""
    SCOPE = "scope"
    """Eligible, but routing kept it out of the selected scope (another tier or zone)."""
    PANIC = "panic"
    """Eligible, but its tier is panicking under ``PanicMode.FAIL_CLOSED``, which refuses the tier."""


class PoiseError(Exception):
    """Base class of every error poise_py raises."""


class SelectionError(PoiseError):
    """Raised by ``LoadBalancer.acquire`` when no permit can be issued."""


class EmptyPool(SelectionError):  # noqa: N818 - the contract's name
    """Raised by ``acquire`` when discovery has not delivered any endpoint yet.

    Expected at start-up; distinct from :class:`NoEligibleEndpoints`.
    """


class NoEligibleEndpoints(SelectionError):  # noqa: N818 - the contract's name
    """Raised by ``acquire`` when endpoints exist but none may take a permit now.

    Attributes:
        reasons: how many endpoints were ineligible for each :class:`IneligibleReason`.
        total: how many endpoints the pool holds.
        retry_after: the earliest time any of them may take a permit again (an OPEN
            circuit's end, on the balancer's clock: the clock ``LoadBalancer(clock=...)``
            was given, else the async backend's ``current_time()``), or None when no
            such time is known (blocked, retired, drained, unhealthy, or probes taken).
            Back off until then, like interlock's ``CircuitOpenError.retry_after``.
    """

    def __init__(
        self, reasons: Mapping[IneligibleReason, int], total: int, *, retry_after: float | None = None
    ) -> None:
        self.reasons: Mapping[IneligibleReason, int] = MappingProxyType(dict(reasons))
        self.total = total
        self.retry_after = retry_after
        parts = ", ".join(f"{r.value}={n}" for r, n in self.reasons.items() if n)
        super().__init__(f"none of {total} endpoints is eligible ({parts or 'no reason'})")


class Overloaded(SelectionError):  # noqa: N818 - reads as a state, like the contract's names
    """Raised by ``acquire`` when every candidate endpoint is at its concurrency limit.

    A call shed at once instead of queueing into a timeout: the endpoints are healthy but
    full (``max_in_flight``, or the limit :class:`~poise_py.AdaptiveConcurrency` learned).
    Back off, or shed the request upstream (HTTP 503, gRPC RESOURCE_EXHAUSTED).

    Attributes:
        at_limit: how many candidate endpoints were at their limit.
        retry_after: when a slot is likely to free up, on the balancer's clock: now plus
            the shortest typical call measured among the endpoints at their limit (the
            long-term latency of a :class:`~poise_py.Gradient2` limit, else the latency
            average of :class:`~poise_py.PeakEwma`), or None when none of them has a
            measured call duration (a fixed cap on a policy that times nothing, say).
    """

    def __init__(self, at_limit: int, *, retry_after: float | None = None) -> None:
        self.at_limit = at_limit
        self.retry_after = retry_after
        super().__init__(f"every candidate endpoint is at its concurrency limit ({at_limit} at their limit)")


class DiscoveryClosed(SelectionError):  # noqa: N818 - the contract's name
    """Raised by ``acquire`` after the discovery stream ended under ``DiscoveryEnd.FAIL_CLOSED``."""


DISCOVERY_CLOSED = "the discovery stream ended and the balancer fails closed"
""":class:`DiscoveryClosed`'s message, for ``acquire`` and for the callers that were waiting."""


class NotDraining(PoiseError):  # noqa: N818 - reads as a state
    """Raised by ``LoadBalancer.drained`` when the endpoint is not DRAINING or DISABLED.

    Also raised to a waiting caller when an operator moves the endpoint out of those
    statuses while permits are still in flight: it takes new permits again, so its
    in-flight count may never reach zero.
    """


class ProbeFailed(PoiseError):  # noqa: N818 - reads as an outcome
    """Raised by the ready-made probes in ``poise_py.probes`` when an endpoint answers unhealthily.

    The health runner counts any exception from a probe as an unhealthy result; this one
    says the endpoint answered, but not as the probe expects (say, HTTP 503).

    Attributes:
        endpoint_id: the probed endpoint's id.
    """

    def __init__(self, endpoint_id: str, problem: str) -> None:
        self.endpoint_id = endpoint_id
        super().__init__(f"endpoint {endpoint_id!r}: {problem}")


class PermitError(PoiseError):
    """Raised on misuse of a :class:`Permit`: reporting twice, or an invalid report."""


class ConfigError(PoiseError, ValueError):
    """Raised at construction when a knob is invalid; the message names the knob.

    Attributes:
        knob: the name of the offending knob.
    """

    def __init__(self, knob: str, problem: str) -> None:
        self.knob = knob
        super().__init__(f"{knob}: {problem}")


class CapacityOverflow(PoiseError):  # noqa: N818 - the contract's name
    """Raised when bounded-load or weight arithmetic cannot hold without overflowing."""


class NotRunning(PoiseError):  # noqa: N818 - reads as a state
    """Raised by ``acquire`` and friends on a balancer outside its ``async with`` block."""


class WrongThread(PoiseError, RuntimeError):  # noqa: N818 - reads as a state
    """Raised by ``acquire`` called from a thread other than the one the balancer runs in.

    A balancer belongs to the event loop (and so the thread) whose ``async with lb`` block
    runs it: from another thread, hand the call to that loop (``anyio.from_thread.run``).
    """


class AlreadyRunning(PoiseError):  # noqa: N818 - reads as a state
    """Raised by ``async with lb`` when the balancer is already running (it is not re-entrant)."""


class DiscoveryError(PoiseError):
    """Base of the errors that reject a discovery update; the live pool is left as it was."""


class StaleRevision(DiscoveryError):  # noqa: N818 - the contract's name
    """An update's revision is older than the live one."""


class DuplicateRevision(DiscoveryError):  # noqa: N818 - the contract's name
    """An update repeats the live revision."""


class DuplicateIdentity(DiscoveryError):  # noqa: N818 - the contract's name
    """An update names one endpoint id twice, or a Delta adds an id that is already live."""


class RevisionOverflow(DiscoveryError):  # noqa: N818 - the contract's name
    """An update's revision is past the maximum revision; nothing was applied."""


class UnknownIdentity(DiscoveryError):  # noqa: N818 - reads as a state
    """A Delta updates an id that is not live; the whole batch is rejected."""


class EndpointFactoryError(DiscoveryError):
    """The endpoint factory raised; the previous pool (if any) stays live and the cause is chained.

    Raised while applying an update (reported, and the stream goes on) or by ``async
    with lb`` for a static list. Nothing of the update was applied, and whatever the
    factory had already built for it was handed to ``endpoint_close``. The message ends
    with the cause's type and message (redacted and bounded), which usually says what to
    do.

    Attributes:
        endpoint_id: the endpoint whose construction failed.
    """

    def __init__(self, endpoint_id: str, problem: str = "the previous pool stays live") -> None:
        self.endpoint_id = endpoint_id
        super().__init__(f"the endpoint factory failed for {endpoint_id!r}; {problem}")


class WeightOverflow(ConfigError, DiscoveryError):  # noqa: N818 - reads as a state
    """An update would take the pool's total weight past ``Routing.max_total_weight``.

    Raised by the pool when a change is planned, before any endpoint is built or
    anything applied: the update is rejected whole and the previous pool stays live
    (a streaming source logs it and goes on; a static list raises it from ``async with
    lb``). It is a :class:`ConfigError` (``knob`` is ``"Endpoint.weight"``: the weights
    are configuration, and a retry cannot fix them) and a :class:`DiscoveryError`.
    """

    def __init__(self, total: int, bound: int) -> None:
        self.total = total
        self.bound = bound
        super().__init__("Endpoint.weight", f"the pool's total weight would be {total}, past the bound {bound}")


class PublisherClosed(DiscoveryError):  # noqa: N818 - reads as a state
    """Raised by ``DiscoveryPublisher.publish`` after the publisher was closed."""


class EndpointsFileError(DiscoveryError):
    """A ``FileDiscovery`` file could not be read or is malformed; the last good pool stays live.

    Reported through ``FileDiscovery(on_error=...)``, its ``error`` attribute and a log
    line; the source keeps watching the file. Raised by ``FileDiscovery.load()``.

    Attributes:
        path: the file, as given.
        problem: what is wrong, for people.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class ReadyTimeout(PoiseError, TimeoutError):  # noqa: N818 - reads as a state
    """Raised by ``LoadBalancer.wait_ready`` when no endpoint became usable within its timeout."""


class ReadinessError(SelectionError):
    """A readiness failure exhausted the usable pool.

    Attributes:
        index: the endpoint's position in the pool at the time (diagnostic, ephemeral).
        endpoint_id: the endpoint's stable id.
    """

    def __init__(self, index: int, endpoint_id: str) -> None:
        self.index = index
        self.endpoint_id = endpoint_id
        super().__init__(f"readiness failed for endpoint {endpoint_id!r} (index {index})")


class CoordinationError(PoiseError):
    """Raised when shared circuit state cannot be read or written as the protocol requires."""


class CoordinationUnavailable(CoordinationError):  # noqa: N818 - reads as a state
    """Raised by a coordination ``Storage`` when its backend cannot be reached or did not answer.

    The balancer never passes it to a caller: it falls back to each endpoint's local
    circuit, logs once, counts it, and resynchronises when the storage answers again.
    """
