"""The values a fleet's shared circuits are made of (pure core): records, replies, waits, changes.

The fleet core (:mod:`poise_py._core._fleet`) decides with them and every storage
(:mod:`poise_py._coordination`) reads and writes them, so they live here, in the core,
and the storage protocol (``_coordination/_protocol.py``, which documents the wire and
its versions) imports them. Plain values: no clock, no I/O.
"""

from __future__ import annotations

import enum
import math

import attrs

from .._errors import ConfigError
from .._knobs import as_float, knob_repr
from ._circuit import CircuitState
from ._ejection import Backoff, Escalation

PROTOCOL_VERSION = 3
"""The newest protocol this library speaks."""

CHANGES_PROTOCOL_VERSION = 3
"""The first protocol whose writes keep the namespace's change log (incremental polls)."""

MIN_PROTOCOL_VERSION = 1
"""The oldest protocol this library can run a fleet on."""

BACKOFF_PROTOCOL_VERSION = 2
"""The first protocol whose storage escalates the open wait by failed rounds."""

FAILED_ROUNDS_CAP = 2**53
"""``failed_rounds`` saturates here (exact in a Lua double); the wait is capped long before."""

SHARED_STATES = frozenset({CircuitState.CLOSED, CircuitState.OPEN, CircuitState.HALF_OPEN})

CLOCK_SLACK = 1.0
"""Seconds a record's trip time may lie after the storage's clock (a failover to a server
whose clock is slightly behind), and a deadline past the fleet's largest wait, before the
record counts as damaged."""


class ProbeReport(enum.Enum):
    """What :meth:`Storage.report_probe` tells the storage about one leased probe."""

    SUCCEEDED = "succeeded"
    """The probe's call succeeded: ``probes_completed`` grows."""
    RELEASED = "released"
    """The lease went unused (cancelled, or the instance left the round): back to the budget."""


def _check_state(instance: SharedState, attribute: attrs.Attribute[CircuitState], value: CircuitState) -> None:
    if value not in SHARED_STATES:
        raise ConfigError("SharedState.state", f"must be CLOSED, OPEN or HALF_OPEN, got {value!r}")


@attrs.frozen(kw_only=True)
class SharedState:
    """One endpoint's shared circuit record, as the storage last answered.

    Attributes:
        state: CLOSED, OPEN or HALF_OPEN.
        version: incremented by every state change (trip, half-open round, close); the
            fence for every operation. 0 for an endpoint the storage has no record of.
        opened_at: storage time of the trip that opened the current episode's round.
        reopen_at: storage time at which OPEN may become HALF_OPEN; in HALF_OPEN, the time
            at which the round's unreported leases lapse and a new round may begin.
        failed_rounds: consecutive half-open rounds that failed (protocol 2; always 0 in
            a CLOSED record and under protocol 1).
        probes_permitted: the round's probe budget, fleet-wide.
        probes_remaining: leases still to give in the round.
        probes_completed: successful probes reported in the round.
        protocol_version: the protocol of the record's last writer; 0 if there is none.
        storage_time: the storage's clock when it answered, to translate the times above
            into an instance's own clock.
        problem: None for a usable record; for one the storage cannot parse (a key of
            another type, an unknown state, a field that is not a number), what is wrong
            with it, naming the key. The other fields are then meaningless: the balancer
            decides that endpoint locally until the record is usable again, and a
            ``trip_open`` replaces it (at expected version 0).
    """

    state: CircuitState = attrs.field(default=CircuitState.CLOSED, validator=_check_state)
    version: int = 0
    opened_at: float | None = None
    reopen_at: float | None = None
    failed_rounds: int = 0
    probes_permitted: int = 0
    probes_remaining: int = 0
    probes_completed: int = 0
    protocol_version: int = 0
    storage_time: float = 0.0
    problem: str | None = None

    def damage(self, *, horizon: float | None = None) -> str | None:
        """What makes this record unusable, or None if every field is in range.

        A record is usable only if its state is known; ``version``, ``failed_rounds``,
        the probe counts and ``protocol_version`` are integers in [0, 2**53], with no
        more leases remaining than permitted; an OPEN or HALF_OPEN record has both times,
        ``reopen_at`` no earlier than ``opened_at``, and ``opened_at`` no later than the
        storage's clock (plus :data:`CLOCK_SLACK`: a clock before the round's trip moved
        back); and, given ``horizon``, ``reopen_at`` at most ``horizon`` seconds after the
        storage's clock (the largest wait the fleet writes, plus slack). The storages
        report the first three as :attr:`problem`; the balancer applies the horizon.
        """
        if self.problem is not None:
            return self.problem
        for name in ("version", "failed_rounds", "probes_permitted", "probes_remaining", "probes_completed"):
            value = getattr(self, name)
            if not _count_in_range(value):
                return f"{name} is not an integer in [0, 2**53]: {value!r}"
        if not _count_in_range(self.protocol_version):
            return f"protocol_version is not an integer in [0, 2**53]: {self.protocol_version!r}"
        if self.probes_remaining > self.probes_permitted:
            return f"probes_remaining {self.probes_remaining} exceeds probes_permitted {self.probes_permitted}"
        now = self.storage_time
        for name in ("opened_at", "reopen_at"):
            value = getattr(self, name)
            if value is not None and not (_is_real(value) and math.isfinite(as_float(value))):
                return f"{name} is not a finite number: {value!r:.80}"
        if self.state is CircuitState.CLOSED:
            return None
        opened_at, reopen_at = self.opened_at, self.reopen_at
        if opened_at is None or reopen_at is None:
            return f"state {self.state.value} without opened_at and reopen_at"
        if reopen_at < opened_at:
            return f"reopen_at {reopen_at!r} is before opened_at {opened_at!r}"
        if opened_at > now + CLOCK_SLACK:
            return (
                f"opened_at {opened_at!r} is {opened_at - now:.6g} s after the storage's clock: "
                "the clock moved back, or the record was written by hand"
            )
        if horizon is not None and reopen_at - now > horizon:
            return (
                f"reopen_at {reopen_at!r} is {reopen_at - now:.6g} s after the storage's clock, "
                f"past the largest wait the fleet writes ({horizon:.6g} s)"
            )
        return None

    def remaining(self, time: float | None = None) -> float:
        """Seconds from ``time`` (default: when the storage answered) to ``reopen_at``; 0 if past."""
        if self.reopen_at is None:
            return 0.0
        return max(0.0, self.reopen_at - (self.storage_time if time is None else time))


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count_in_range(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= FAILED_ROUNDS_CAP


@attrs.frozen
class Reply:
    """The answer to every fenced operation.

    Attributes:
        applied: whether the operation changed the record (the version matched and the
            move was legal; for a lease, whether a slot was granted).
        state: the record after the operation, applied or not.
        problem: None, or a damaged bookkeeping key (the change log's sequence or sorted
            set) this operation found and replaced before writing, naming the key.
    """

    applied: bool
    state: SharedState
    problem: str | None = None


@attrs.frozen(kw_only=True)
class OpenWait:
    """The open-wait policy a trip hands the storage; the storage does the arithmetic.

    Attributes:
        escalation: base, maximum, backoff shape, multiplier and jitter, validated by
            :class:`~poise_py.Escalation`. Protocol 1 uses ``base`` only.
        unit: the caller's uniform draw in [0, 1) for the jitter, so one seeded rng
            drives a run.
        minimum: a floor in seconds (a server's capped Retry-After), applied after jitter.
        horizon: None, or the latest deadline, in seconds after the storage's clock, that
            the caller accepts in the record this trip would replace: a record whose
            ``reopen_at`` lies further out is damaged (:meth:`SharedState.damage`), and
            the trip replaces it as it replaces any unusable record.
    """

    escalation: Escalation
    unit: float = 0.5
    minimum: float = 0.0
    horizon: float | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.escalation, Escalation):
            raise ConfigError("OpenWait.escalation", f"must be an Escalation, got {self.escalation!r}")
        u = self.unit
        if isinstance(u, bool) or not isinstance(u, int | float) or not 0.0 <= u < 1.0:
            raise ConfigError("OpenWait.unit", f"must be in [0, 1), got {u!r}")
        m = self.minimum
        if isinstance(m, bool) or not isinstance(m, int | float) or not 0.0 <= as_float(m) < math.inf:
            raise ConfigError("OpenWait.minimum", f"must be a finite number >= 0, got {knob_repr(m):.80}")
        h = self.horizon
        if h is not None and (
            isinstance(h, bool) or not isinstance(h, int | float) or not 0.0 <= as_float(h) < math.inf
        ):
            raise ConfigError("OpenWait.horizon", f"must be None or a finite number >= 0, got {knob_repr(h):.80}")

    @property
    def escalates(self) -> bool:
        """Whether the wait can grow with failed rounds (``maximum > base``)."""
        return self.escalation.maximum > self.escalation.base

    def duration(self, failed_rounds: int, protocol_version: int = PROTOCOL_VERSION) -> float:
        """The open wait in seconds after ``failed_rounds`` failed rounds, as a storage computes it.

        This is the reference the Lua scripts transcribe: the core's clamped
        :meth:`Escalation.window`, the jitter, the cap, then the floor.
        """
        esc = self.escalation
        level = min(max(failed_rounds, 0), FAILED_ROUNDS_CAP) if protocol_version >= 2 else 0
        return max(esc.jittered(level, self.unit), float(self.minimum))

    def lua_args(self) -> list[str]:
        """The arguments the Redis scripts take, as exact decimal strings."""
        esc = self.escalation
        return [
            repr(float(esc.base)),
            repr(float(esc.maximum)),
            "1" if esc.backoff is Backoff.LINEAR else "0",
            repr(float(esc.multiplier)),
            repr(float(esc.jitter)),
            repr(float(self.unit)),
            repr(float(self.minimum)),
            "" if self.horizon is None else repr(float(self.horizon)),
        ]


@attrs.frozen
class Changes:
    """What changed in a namespace since a sequence number (protocol 3).

    Attributes:
        sequence: the namespace's sequence number now (0 when it has none).
        states: the records written since, by endpoint id; None when the caller must read
            everything instead (the sequence went backwards: the storage lost its keys;
            more changed than the caller's limit; or the change log is damaged).
        problem: None, or what is wrong with a damaged bookkeeping key (the sequence or
            the change log), naming the key; ``states`` is then None, and the next write
            replaces the key.
    """

    sequence: int
    states: dict[str, SharedState] | None
    problem: str | None = None
