"""The per-endpoint record the pool keeps, and why an endpoint is out (pure core).

:class:`Member` holds one endpoint's circuit, its circuit's counts, the pool's
counters and its routing positions;
:func:`gate`, :func:`refusal` and :func:`no_eligible` say why an endpoint may not take a
permit, for the pool's eligibility and for the error a failed selection raises.

The record's layout
-------------------
Every call reads and writes one record, so the record is laid out for a call, and this is
the one place that says how (``docs/performance.md``, scaling; ``tests/shell/test_build.py``
holds the sizes):

- **One object per call.** A :class:`Member` *is* its circuit's
  :class:`~poise_py._core._tally.Tally` (a subclass): a call reads and writes the
  circuit's counts, the fast path's gate and the pool's counters in one allocation and
  never touches the :class:`~poise_py._core._circuit.Circuit` (``member.circuit``, the
  state machine, reached only when something moves). Composition would put a second
  object, a second cache line, on every call.
- **Hot fields first.** In both builds a subclass's fields come after all of its base's,
  so the pool's per-call counters (``inflight``, ``successes_low``, ``is_candidate``,
  ``pos``, ``loads``) are declared on the tally, beside the circuit's hot fields, not on the
  record. The compiled build lays fields out in the order their types are declared: first
  what a CLOSED call reads and writes, then what only some pools read (the load slot), then
  what only a configured circuit reads (``slow_limit``, ``window``), then the cold parts of
  the counts; a CLOSED call's fields end before byte 64, one cache line. The interpreted
  build lays them out in ``__slots__`` order (sorted), the tally's first.
- **Small values where they are hot.** The success count a call writes is its low byte
  (``successes_low``, a ``u8``, carried into ``successes_high`` one call in 256): compiled,
  it shares one word with the four flags; interpreted, it stays a cached small int, where
  a count above 256 would be a new object at every success. On the record, the three flags
  come first (the word of the attribute bitmap mypyc puts ahead of a subclass's fields)
  and the two scheduling positions share a word (``i32``): the compiled record takes 256
  bytes with its garbage collector's header (``sys.getsizeof``), so the allocator's
  256-byte blocks start every record at a cache line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from .._decision import DecisionMode
from .._endpoint import AdminStatus, Endpoint
from .._errors import EmptyPool, IneligibleReason, NoEligibleEndpoints
from .._faults import Fault
from ._circuit import Circuit
from ._tally import SATURATED, Tally

if TYPE_CHECKING:
    from mypy_extensions import i32

    from ._circuit_policy import CircuitPolicy
    from ._limits import LoadControl
    from ._routing import Scope

UNMEASURED = -math.inf
"""``Member.ewma_at`` of an endpoint whose latency was never observed."""

FAULT_INDEX: dict[Fault, int] = {f: i for i, f in enumerate(Fault)}

MODE_INDEX: dict[DecisionMode, int] = {m: i for i, m in enumerate(DecisionMode)}

UNCOUNTED_FAULTS: list[int] = [0] * len(FAULT_INDEX)
"""Every record's ``faults`` until its first fault, and ``mode_selections`` below until its
first rerouted selection: shared lists of zeros, never written (:func:`count_fault` and
:func:`count_selection` give a record its own list first). Most records never need their
own, and a record that allocates none costs the garbage collector two objects fewer."""
UNCOUNTED_SELECTIONS: list[int] = [0] * len(MODE_INDEX)


def sat_add(value: int, n: int = 1) -> int:
    """Add ``n`` to a counter, saturating at ``2**64 - 1``."""
    total = value + n
    return total if total < SATURATED else SATURATED


_ADMIN_REFUSAL: dict[AdminStatus, IneligibleReason | None] = {
    AdminStatus.AUTO: None,
    AdminStatus.FORCED_HEALTHY: None,
    AdminStatus.DRAINING: IneligibleReason.DRAINING,
    AdminStatus.DISABLED: IneligibleReason.DISABLED,
    AdminStatus.FORCED_UNHEALTHY: IneligibleReason.UNHEALTHY,
}
_AUTO = AdminStatus.AUTO


def gate(member: Member) -> IneligibleReason | None:
    """Readiness, a spent quota, then the operator's and active health's verdict (health only under AUTO)."""
    admin = member.admin
    return member.readiness or (member.health_refusal if admin is _AUTO else _ADMIN_REFUSAL[admin])


def refusal(member: Member) -> IneligibleReason | None:
    """Why ``member`` may not take a permit now (the operator, its circuit, then :func:`gate`), or None."""
    return _ADMIN_REFUSAL[member.admin] or member.circuit.refusal() or gate(member)


def no_eligible(
    members: Collection[Member], exclude: Collection[str], refused: int | None
) -> EmptyPool | NoEligibleEndpoints:
    """The error for a selection that found no endpoint: each member's reason, counted.

    ``refused`` is the tier a FAIL_CLOSED panic refused, if any. The earliest end of an
    open window that nothing else keeps out becomes the error's ``retry_after``.
    """
    if not members:
        return EmptyPool("discovery has not delivered any endpoint yet")
    reasons = dict.fromkeys(IneligibleReason, 0)
    retry_after: float | None = None
    for member in members:
        reason = refusal(member)
        if reason is IneligibleReason.OPEN and gate(member) is None:
            # Nothing else keeps it out: it takes a probe once its open window ends.
            reopen_at = member.circuit.reopen_at
            if reopen_at is not None and (retry_after is None or reopen_at < retry_after):
                retry_after = reopen_at
        if reason is None:
            if member.endpoint.id in exclude:
                reason = IneligibleReason.EXCLUDED
            elif member.endpoint.tier == refused:
                reason = IneligibleReason.PANIC
            else:
                reason = IneligibleReason.SCOPE
        reasons[reason] += 1
    return NoEligibleEndpoints(reasons, len(members), retry_after=retry_after)


def count_selection(member: Member, mode: DecisionMode, n: int = 1) -> None:
    """Count ``n`` selections of ``member`` made in ``mode`` (a no-op for HEALTHY, which is derived).

    Routing calls this on its SPILLOVER and PANIC paths only, so telemetry costs the
    healthy hot path nothing; ``n=-1`` takes back one it counted (never below zero).
    """
    if mode is not DecisionMode.HEALTHY:
        counts = member.mode_selections
        if counts is UNCOUNTED_SELECTIONS:
            if n < 0:
                return
            counts = member.mode_selections = [0] * len(MODE_INDEX)
        i = MODE_INDEX[mode]
        counts[i] = max(0, sat_add(counts[i], n))


def count_fault(member: Member, fault: Fault) -> None:
    """Count one ``fault`` of ``member``."""
    faults = member.faults
    if faults is UNCOUNTED_FAULTS:
        faults = member.faults = [0] * len(FAULT_INDEX)
    i = FAULT_INDEX[fault]
    faults[i] = sat_add(faults[i])


class Member(Tally):
    """Everything the pool knows about one live endpoint: its circuit, and the pool's bookkeeping.

    The record *is* its circuit's :class:`~poise_py._core._tally.Tally` (a subclass): a
    call reads and writes the circuit's counts, the fast path's gate and the pool's
    counters (all declared on the tally) in one allocation, in its first cache lines, and never
    touches the circuit (:attr:`circuit`, a separate object that holds the state machine
    and is reached only when something moves; ``docs/performance.md``, scaling).

    Identity is the object: a member that leaves the pool is marked not ``live`` and never
    reused, so a late result for it can never touch a re-added endpoint of the same id.
    """

    # Declared types (for type checkers and the public type surface); values are set in __init__.
    # Their order is the layout the module docstring describes ("The record's layout").
    was_ejected: bool
    was_degraded: bool
    counted: bool
    circuit: Circuit
    endpoint: Endpoint
    admin: AdminStatus
    ewma: float
    ewma_at: float
    home: Scope | None
    panic_pos: i32
    degraded_pos: i32
    faults: list[int]
    cancellations: int
    probes: int
    stale: int
    mode_selections: list[int]

    __slots__ = (
        "admin",
        "cancellations",
        "circuit",
        "control",
        "counted",
        "degraded_pos",
        "endpoint",
        "ewma",
        "ewma_at",
        "faults",
        "health_refusal",
        "home",
        "mode_selections",
        "panic_pos",
        "probes",
        "readiness",
        "stale",
        "was_degraded",
        "was_ejected",
    )

    def __init__(self, endpoint: Endpoint, policy: CircuitPolicy, unit: Callable[[], float], now: float) -> None:
        super().__init__()
        self.circuit = Circuit(policy, unit, now, self)
        """The endpoint's circuit, whose counts are this record (see the class docstring)."""
        self.endpoint = endpoint
        self.admin = AdminStatus.AUTO
        self.health_refusal: IneligibleReason | None = None
        """Active health's verdict for eligibility under AUTO (None: may serve)."""
        self.was_ejected = False
        self.ewma = 0.0
        self.ewma_at = UNMEASURED
        """When ``ewma`` was last observed; :data:`UNMEASURED` while it never was (a float,
        not None, so the picker reads it in place instead of from a boxed float)."""
        self.home = None
        """The routing scope this endpoint belongs to (its tier, and zone side)."""
        self.panic_pos = -1
        """Position among its tier's panic candidates, or -1."""
        self.degraded_pos = -1
        """Position among its tier's degraded candidates, or -1."""
        self.was_degraded = False
        """Whether the pool counts it as degraded (its circuit's flag, as last synced)."""
        self.counted = False
        """Whether it counts in its scope's capacity (an operator has not taken it out)."""
        self.faults = UNCOUNTED_FAULTS
        self.cancellations = 0
        self.probes = 0
        self.stale = 0
        self.mode_selections = UNCOUNTED_SELECTIONS
        """Selections made in SPILLOVER, PANIC and DEGRADED mode (the HEALTHY slot stays 0): the
        routing path counts them with :func:`count_selection`; HEALTHY selections are
        derived (issued minus these), so the healthy fast path counts nothing extra."""
        self.readiness: IneligibleReason | None = None
        """NOT_READY or QUARANTINED while its readiness check keeps it out, QUOTA while its
        provider's quota is spent (the pool's rest), else None."""
        self.control: LoadControl | None = None
        """Its concurrency limit and slow start, while any load knob is on (the pool's, kept
        here so that a selection reads it without a look-up)."""

    @property
    def id(self) -> str:
        """The endpoint's stable id."""
        return self.endpoint.id

    @property
    def weight(self) -> int:
        """The endpoint's weight."""
        return self.endpoint.weight

    def __repr__(self) -> str:
        return f"<Member {self.endpoint.id!r} {self.circuit.state.value} inflight={self.inflight}>"
