"""``Coordination``: the knob that shares a balancer's circuits with a fleet, and its views."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import attrs

from .._core._circuit_policy import CircuitPolicy
from .._core._ejection import Escalation
from .._errors import ConfigError
from .._knobs import RESOLUTION, check_duration, is_number
from ._memory import InMemoryStorage
from ._protocol import BACKOFF_PROTOCOL_VERSION, MIN_PROTOCOL_VERSION, Storage


@attrs.frozen(kw_only=True)
class CoordinationChange:
    """Passed to ``Coordination(on_change=...)`` when the storage is lost or regained.

    Attributes:
        connected: True when the balancer (re)synchronised, False when it fell back to
            its local circuits.
        at: the balancer clock's reading.
        reason: why the storage was lost (the error or the timeout), None on reconnect.
    """

    connected: bool
    at: float
    reason: str | None = None


@attrs.frozen(kw_only=True)
class CoordinationStatistics:
    """Counters of one balancer's coordination, from ``lb.coordination_statistics()``.

    Attributes:
        connected: whether the balancer currently follows the shared state (False before
            the first successful sync and while it falls back to local circuits).
        protocol_version: the protocol the storage speaks.
        operations: storage operations issued (each is one round trip; a Redis script
            call is one command).
        failures: operations that failed (a ``CoordinationError``) or timed out; anything
            else a storage raises is a bug, logged with its traceback, ending the round as a
            fallback.
        fallbacks: times the balancer fell back to its local circuits: one per outage,
            as many as the ``CoordinationFallback`` events for the whole storage (a
            storage that cannot be reached at start-up counts one).
        resyncs: times it resynchronised after a fallback.
        published: local trips the storage accepted.
        adopted: shared state changes mirrored into a local circuit.
        leases: probe leases this balancer obtained.
        released: leases it handed back unused (held ``sync_interval`` without a call, a
            cancelled probe's, or the endpoint's status excludes it here).
        poisoned: shared records found unusable (once per record per episode: a field
            out of range, a deadline past the fleet's largest wait, a storage clock that
            moved back); each such endpoint decided locally until its record was usable
            again. Also counts a damaged change log (once per episode), while which polls
            read every record.
        declined: shared ejections not mirrored because ``max_ejection_percent`` of this
            balancer's pool was already ejected.
    """

    connected: bool
    protocol_version: int
    operations: int
    failures: int
    fallbacks: int
    resyncs: int
    published: int
    adopted: int
    leases: int
    declined: int
    released: int = 0
    poisoned: int = 0


def _check_storage(instance: Coordination, attribute: attrs.Attribute[Storage], value: Storage) -> None:
    if not isinstance(value, Storage):
        raise ConfigError("Coordination.storage", f"must implement the Storage protocol, got {value!r}")
    version = value.protocol_version
    if not is_number(version) or not isinstance(version, int):
        raise ConfigError("Coordination.storage", f"protocol_version must be an int, got {version!r}")
    if version < MIN_PROTOCOL_VERSION:
        raise ConfigError(
            "Coordination.storage",
            f"speaks protocol {version}; poise_py needs at least protocol {MIN_PROTOCOL_VERSION}",
        )


def _check_duration(instance: Coordination, attribute: attrs.Attribute[float], value: float) -> None:
    check_duration(f"Coordination.{attribute.name}", value, minimum=RESOLUTION)  # periods and leases the timer keeps


def _check_cap(instance: Coordination, attribute: object, value: float | None) -> None:
    if value is not None:
        check_duration("Coordination.max_open_wait", value, minimum=RESOLUTION)


def _check_hook(
    instance: Coordination,
    attribute: attrs.Attribute[Callable[[CoordinationChange], None] | None],
    value: Callable[[CoordinationChange], None] | None,
) -> None:
    if value is not None and not callable(value):
        raise ConfigError("Coordination.on_change", f"must be callable or None, got {value!r}")
    if inspect.iscoroutinefunction(value):  # called, never awaited: the hook would never run
        raise ConfigError("Coordination.on_change", f"must be a plain function, not async: got {value!r:.80}")


@attrs.frozen
class Coordination:
    """Share each endpoint's circuit with every balancer using the same storage.

    ``LoadBalancer(coordination=poise.Coordination(storage))``. The hot path never waits
    for the storage: each balancer keeps a local view, refreshed when a circuit moves and
    every ``sync_interval``; a local trip is published; OPEN -> HALF_OPEN is the storage
    clock's decision; probe slots are fleet leases, taken where a caller wants one. When the storage
    is unreachable or slower than ``timeout``, each balancer falls back to its local
    circuits (a log line, a counter, ``on_change``) and resynchronises when it answers.

    Attributes:
        storage: a :class:`Storage`; default a fresh :class:`InMemoryStorage`, which
            balancers sharing this ``Coordination`` object share.
        sync_interval: seconds between polls of the shared state (and between attempts
            to reach a lost storage).
        timeout: seconds one storage operation may take before the balancer falls back.
        probe_lease: seconds a half-open round's leases stay valid: a round whose probes
            did not report by then (an instance died holding one) starts afresh.
        max_open_wait: caps the shared open wait (default 30 s; None: the circuit
            policy's ``Escalation.maximum``). A shared round sends ``permitted_probes``
            probes to the endpoint for the whole fleet, where local circuits send that
            many per instance, so the long local maximum, which spares a dead endpoint
            the whole fleet's probes, is not needed for that; and every second of open
            wait is up to a second of readmission delay after the endpoint recovers. A
            server's Retry-After still floors the wait. See ``docs/coordination.md``.
        full_poll_interval: with a storage speaking protocol 3, a poll reads only the
            records written since the last one (one command and no record when nothing
            changed); every ``full_poll_interval`` seconds a poll reads every record
            instead, which catches what the change log cannot show (an expired record,
            a write by an instance speaking an older protocol).
        on_change: called with a :class:`CoordinationChange` when the storage is lost or
            regained; must not block.
    """

    storage: Storage = attrs.field(factory=InMemoryStorage, validator=_check_storage)
    sync_interval: float = attrs.field(default=1.0, kw_only=True, validator=_check_duration)
    timeout: float = attrs.field(default=0.5, kw_only=True, validator=_check_duration)
    probe_lease: float = attrs.field(default=30.0, kw_only=True, validator=_check_duration)
    max_open_wait: float | None = attrs.field(default=30.0, kw_only=True, validator=_check_cap)
    full_poll_interval: float = attrs.field(default=30.0, kw_only=True, validator=_check_duration)
    on_change: Callable[[CoordinationChange], None] | None = attrs.field(
        default=None, kw_only=True, validator=_check_hook
    )

    def shared_escalation(self, escalation: Escalation) -> Escalation:
        """The escalation a shared circuit's open wait follows: ``escalation`` capped at ``max_open_wait``."""
        cap = self.max_open_wait
        if cap is None or escalation.maximum <= cap:
            return escalation
        return attrs.evolve(escalation, base=min(escalation.base, cap), maximum=cap)

    def check(self, policy: CircuitPolicy) -> None:
        """Refuse a circuit policy the storage cannot honour, instead of degrading silently.

        Raises:
            ConfigError: the escalation grows the open wait but the storage speaks a
                protocol without coordinated backoff; or the policy needs something a
                shared circuit does not do (see ``docs/coordination.md``).
        """
        version = self.storage.protocol_version
        esc = self.shared_escalation(policy.escalation)
        if esc.maximum > esc.base and version < BACKOFF_PROTOCOL_VERSION:
            raise ConfigError(
                "CircuitPolicy.escalation",
                f"the coordination storage speaks protocol {version}, which keeps a constant open "
                f"wait, but this escalation grows it from {esc.base} s to {esc.maximum} s; use a "
                f"storage speaking protocol {BACKOFF_PROTOCOL_VERSION}, or Escalation(maximum=base)",
            )
        if not esc.reset_on_success:
            raise ConfigError(
                "CircuitPolicy.escalation",
                "reset_on_success=False cannot be shared: the fleet's failed-round count resets "
                "when the shared circuit closes",
            )
        if policy.hard_cap is not None:
            raise ConfigError(
                "CircuitPolicy.hard_cap",
                "a hard cap retires an endpoint in one balancer; a shared circuit has no such state",
            )
        if policy.success_threshold > policy.permitted_probes:
            raise ConfigError(
                "CircuitPolicy.success_threshold",
                f"a shared half-open round leases {policy.permitted_probes} probe(s) fleet-wide; "
                f"success_threshold={policy.success_threshold} could never close it",
            )
