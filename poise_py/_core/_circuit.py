"""One endpoint's passive circuit, as a pure state machine.

Theory of operation
-------------------
A circuit is CLOSED (calls flow and outcomes are counted), OPEN (ejected until
``reopen_at``), HALF_OPEN (a fixed number of probe slots), BLOCKED (a PERMANENT fault:
no traffic and no probes until :meth:`Circuit.reset`) or RETIRED (the hard cap was hit;
also until :meth:`Circuit.reset`). A passing active health check may close an OPEN or
HALF_OPEN circuit early (:meth:`Circuit.uneject`). The legal moves are the table
``TRANSITIONS``; any other move is a bug and raises without changing anything.

Every move increments ``epoch``. A caller gets a :class:`Ticket` from
:meth:`Circuit.try_acquire` carrying the epoch it was issued in, and hands it back to
:meth:`Circuit.record` or :meth:`Circuit.cancel`. A ticket from any other epoch is
*stale*: it is counted and has no other effect, so a late result from before
OPEN -> HALF_OPEN -> CLOSED can neither close, reopen nor strike the current circuit.
Probe slots are reserved inside ``try_acquire`` (there is no await between the check
and the reservation), so ``permitted_probes`` is a hard limit on concurrency, not a
spacing. Cancellation releases a slot and touches no window.

The counts live in the circuit's :class:`~poise_py._core._tally.Tally`: two runs kept in
one int (SUSPECT/FATAL strikes and TRANSIENT faults; a success ends both, a fault of one
class never ends the other's) and the volume or outcome window. The tally also carries
what the CLOSED-success fast path reads (``fast_ticket``, ``success_needs_now``, ``slow_limit``), which
the circuit sets at every move; a pool's endpoint record is its circuit's tally, so a
call never touches the circuit itself. A trip the pool's
``max_ejection_percent`` refuses leaves the circuit CLOSED but *degraded* (reserve
capacity for the router) with the refused cause, until a success finds no trip condition
left, any move, or :meth:`Circuit.eject_degraded` once the pool has room. The guard only
refuses when the pool does not *vouch* (``record``'s ``vouch``, asked only then): when the
endpoints still in rotation are answering, the fault is the endpoint's own and it trips.

Nothing here reads a clock: ``now`` comes in, :meth:`Circuit.next_deadline` goes out,
and the async shell calls :meth:`Circuit.handle_timer` when that deadline passes (or
``try_acquire`` notices it first).

Fleet coordination (``poise_py._coordination``) adds one mode, *leased*, and three moves.
While a circuit is leased, the fleet's shared state owns the two decisions that must be
taken once for the whole fleet: OPEN -> HALF_OPEN (the circuit never half-opens on its own
timer) and the probe budget (a HALF_OPEN circuit starts with no slot; :meth:`Circuit.grant`
adds the slots the coordinator leased, and each completed probe consumes its slot).
Successful probes do not close a leased circuit: the fleet counts them and closes the
shared state. The coordinator mirrors the shared state with :meth:`Circuit.adopt` (the
``SHARED_*`` causes of the table), each adoption a move with its own epoch, so permits of
a round the fleet has left are stale like any other. Everything else (windows, trips,
escalation, probe failures) stays local and is published by the coordinator. Unleasing
(the coordinator is unreachable) hands both decisions back to the circuit.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable

import attrs

from .._errors import IneligibleReason
from .._faults import Fault
from ._circuit_policy import CircuitPolicy, CountWindow, TimeWindow
from ._ejection import MAX_LEVEL
from ._native import mypyc_attr
from ._tally import LOW, Tally
from ._window import FAILED, SLOW


class CircuitState(enum.Enum):
    """Where a circuit is."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"
    BLOCKED = "blocked"
    RETIRED = "retired"


class Cause(enum.Enum):
    """Why a circuit moved."""

    CONSECUTIVE_FAILURES = "consecutive_failures"
    CONSECUTIVE_TRANSIENT = "consecutive_transient"
    """A run of ``consecutive_transient_failures`` TRANSIENT faults with no success."""
    SUCCESS_RATE = "success_rate"
    """Its success rate was an outlier in the pool (``SuccessRateEjection``)."""
    FAILURE_RATE = "failure_rate"
    SLOW_CALL_RATE = "slow_call_rate"
    FATAL = "fatal"
    RETRY_AFTER = "retry_after"
    PERMANENT = "permanent"
    COOLDOWN_ELAPSED = "cooldown_elapsed"
    RECALLED = "recalled"
    """The pool is loaded and needs its capacity: an endpoint ejected for a load-shaped
    failure is probed before its open window ends (``Pool.complete``, docs/overload.md)."""
    POOL_LOADED = "pool_loaded"
    """Its ejection is undone: the load-shaped failures it was ejected for were the pool's
    load, as an endpoint in rotation failed the same way within ``overload_window`` after it
    (``Pool.complete``, docs/overload.md). Back to CLOSED at once, its escalation as before."""
    PROBE_SUCCEEDED = "probe_succeeded"
    PROBE_FAILED = "probe_failed"
    HARD_CAP = "hard_cap"
    RESET = "reset"
    HEALTH_CHECK_PASSED = "health_check_passed"
    SHARED_OPEN = "shared_open"
    """The fleet's shared state is OPEN (another instance tripped, or a new round)."""
    SHARED_HALF_OPEN = "shared_half_open"
    """The fleet's shared state began a half-open round."""
    SHARED_CLOSED = "shared_closed"
    """The fleet closed the shared state (probes passed elsewhere), or it was lost."""


_C, _O, _H, _B, _R = (
    CircuitState.CLOSED,
    CircuitState.OPEN,
    CircuitState.HALF_OPEN,
    CircuitState.BLOCKED,
    CircuitState.RETIRED,
)

TRANSITIONS: dict[tuple[CircuitState, Cause], CircuitState] = {
    (_C, Cause.CONSECUTIVE_FAILURES): _O,
    (_C, Cause.CONSECUTIVE_TRANSIENT): _O,
    (_C, Cause.SUCCESS_RATE): _O,
    (_C, Cause.FAILURE_RATE): _O,
    (_C, Cause.SLOW_CALL_RATE): _O,
    (_C, Cause.FATAL): _O,
    (_C, Cause.RETRY_AFTER): _O,
    (_C, Cause.PERMANENT): _B,
    (_C, Cause.HARD_CAP): _R,
    (_O, Cause.COOLDOWN_ELAPSED): _H,
    (_O, Cause.RECALLED): _H,
    (_O, Cause.POOL_LOADED): _C,
    (_O, Cause.PERMANENT): _B,
    (_H, Cause.PROBE_SUCCEEDED): _C,
    (_H, Cause.PROBE_FAILED): _O,
    (_H, Cause.RETRY_AFTER): _O,
    (_H, Cause.PERMANENT): _B,
    (_H, Cause.HARD_CAP): _R,
    (_O, Cause.HEALTH_CHECK_PASSED): _C,
    (_H, Cause.HEALTH_CHECK_PASSED): _C,
    **{(s, Cause.RESET): _C for s in CircuitState},
    # Adopting the fleet's shared state (coordination). BLOCKED and RETIRED are local
    # verdicts about this instance's view of the endpoint: the fleet does not lift them.
    (_C, Cause.SHARED_OPEN): _O,
    (_O, Cause.SHARED_OPEN): _O,
    (_H, Cause.SHARED_OPEN): _O,
    (_C, Cause.SHARED_HALF_OPEN): _H,
    (_O, Cause.SHARED_HALF_OPEN): _H,
    (_H, Cause.SHARED_HALF_OPEN): _H,
    (_O, Cause.SHARED_CLOSED): _C,
    (_H, Cause.SHARED_CLOSED): _C,
}
"""Every legal move: (from, cause) -> to. Anything else raises ``IllegalMoveError``."""


@mypyc_attr(native_class=False)
class IllegalMoveError(RuntimeError):
    """An illegal circuit move was attempted; the circuit is unchanged. Always a bug."""


@attrs.frozen
class Ticket:
    """What :meth:`Circuit.try_acquire` hands out: the epoch, and whether it is a probe.

    Tickets are values: every ticket of one epoch and kind is the same object, so issuing
    one allocates nothing.
    """

    epoch: int
    probe: bool


@attrs.frozen
class PanicTicket(Ticket):
    """The ticket of a panic permit on an endpoint whose circuit would refuse one.

    A panic pick may land on an OPEN circuit (or a HALF_OPEN one whose probe slots are
    taken). Such a permit carries the circuit's epoch but no slot: its outcome is
    counted on the endpoint (successes, faults, latency) and never reaches the circuit,
    so a panic call can neither close an OPEN circuit early, nor reopen, strike or block
    it; only the circuit's own probe decides.
    """


_TICKETS: dict[tuple[int, bool], Ticket] = {}


def _refused(may_eject: bool, vouch: Callable[[], bool] | None) -> bool:  # noqa: FBT001
    """Whether the guard refuses a trip: no room, and the rest of the pool does not vouch."""
    return not may_eject and (vouch is None or not vouch())


def ticket(epoch: int, *, probe: bool) -> Ticket:
    """The ticket for ``(epoch, probe)``; early epochs share one object across circuits."""
    if epoch >= 4096:
        return Ticket(epoch, probe)
    found = _TICKETS.get((epoch, probe))
    if found is None:
        found = _TICKETS[epoch, probe] = Ticket(epoch, probe)
    return found


@attrs.frozen(kw_only=True)
class Transition:
    """A move the circuit made, for events and telemetry."""

    source: CircuitState
    target: CircuitState
    cause: Cause
    epoch: int
    at: float
    reopen_at: float | None = None
    retry_after: float | None = None
    """The (capped) Retry-After wait this move honoured, if a server asked for one."""


_SHARED_CAUSE = {
    CircuitState.OPEN: Cause.SHARED_OPEN,
    CircuitState.HALF_OPEN: Cause.SHARED_HALF_OPEN,
    CircuitState.CLOSED: Cause.SHARED_CLOSED,
}


class Circuit:
    """The passive circuit of one endpoint. See the module docstring.

    Args:
        policy: the knobs.
        unit: returns a float uniform in [0, 1) for jitter (a seeded rng's ``random``).
        now: the creation time, for escalation decay.
        tally: where to keep the counts (a pool passes the endpoint's record); a fresh
            :class:`Tally` if None.
    """

    # Declared types (for type checkers and the public type surface); values are set in __init__.
    tally: Tally
    policy: CircuitPolicy
    state: CircuitState
    epoch: int
    reopen_at: float | None
    probes_in_flight: int
    probe_successes: int
    level: int
    closed_at: float
    ejections_in_row: int
    ejected_time: float
    ejections: int
    stale_results: int
    suppressed_ejections: int
    leased: bool
    probe_limit: int
    degraded: bool
    degraded_cause: Cause | None

    __slots__ = (
        "_closed_ticket",
        "_probe_ticket",
        "_recalled_reopen",
        "_slow_base",
        "_times_every_success",
        "_unit",
        "closed_at",
        "degraded",
        "degraded_cause",
        "ejected_time",
        "ejections",
        "ejections_in_row",
        "epoch",
        "leased",
        "level",
        "policy",
        "probe_limit",
        "probe_successes",
        "probes_in_flight",
        "reopen_at",
        "stale_results",
        "state",
        "suppressed_ejections",
        "tally",
    )

    def __init__(
        self, policy: CircuitPolicy, unit: Callable[[], float], now: float, tally: Tally | None = None
    ) -> None:
        self.tally = tally = Tally() if tally is None else tally
        """The counts, and the fast path's gate (``fast_ticket``, ``success_needs_now``, ``counts_only``,
        ``slow_limit``), which every move sets."""
        self.policy = policy
        self._unit = unit
        # With no rate condition and a count window only the volume matters (for the
        # minimum-volume gate): count it in the tally instead of in a ring buffer.
        window = policy.window
        self._slow_base = policy.slow_call_duration
        tally.set_rules(
            self._slow_base, None if (isinstance(window, CountWindow) and not policy.tracks_rates) else window.build()
        )
        tally.set_volume_cap(window.size if isinstance(window, CountWindow) else 0)
        tally.runs = 0
        self._times_every_success = isinstance(window, TimeWindow)
        """Whether every success needs the time: a time window, or a pool that times every call."""
        self.state = CircuitState.CLOSED
        self.epoch = 0
        self._closed_ticket = ticket(0, probe=False)
        self._probe_ticket = ticket(0, probe=True)
        tally.fast_ticket = self._closed_ticket
        self.reopen_at: float | None = None
        self.leased = False
        self.probe_limit = 0
        self.probes_in_flight = 0
        self.probe_successes = 0
        self.level = 0
        self.closed_at = now
        self.ejections_in_row = 0
        self.ejected_time = 0.0
        self.ejections = 0
        self.stale_results = 0
        self.suppressed_ejections = 0
        self.degraded = False
        """A trip ``max_ejection_percent`` refused: CLOSED, but reserve capacity only."""
        self.degraded_cause: Cause | None = None
        """The refused trip's cause while degraded (used if it is ejected later)."""
        self._recalled_reopen: float | None = None
        """While a recalled circuit is half-open: when its interrupted open window would have ended."""
        self._reclock()

    # -- queries -----------------------------------------------------------------------

    @property
    def accepting(self) -> bool:
        """Whether :meth:`try_acquire` would hand out a ticket without a timer firing."""
        state = self.state
        return state is _C or (state is _H and self.probes_in_flight < self.probe_limit)

    @property
    def ejected(self) -> bool:
        """OPEN or HALF_OPEN: counted against ``max_ejection_percent``."""
        return self.state is _O or self.state is _H

    @property
    def parked(self) -> bool:
        """BLOCKED or RETIRED: only :meth:`reset` (an operator, or rediscovery) brings it back."""
        return self.state is _B or self.state is _R

    @property
    def fast_ticket(self) -> Ticket | None:
        """The ticket every call gets while CLOSED, else None (kept in the tally, for the hot path)."""
        return self.tally.fast_ticket

    @property
    def success_needs_now(self) -> bool:
        """Whether recording a success needs a real ``now`` (see :meth:`record_success`)."""
        return self.tally.success_needs_now

    @property
    def consecutive_failures(self) -> int:
        """The current run of SUSPECT (and FATAL) faults."""
        return self.tally.consecutive_failures

    @property
    def consecutive_transient_failures(self) -> int:
        """The current run of TRANSIENT faults (a success ends it; other faults do not)."""
        return self.tally.consecutive_transient_failures

    def escalation_level(self, now: float) -> int:
        """The level the next ejection would use: decayed while the circuit stays CLOSED."""
        if self.state is _C:
            return self.policy.escalation.decayed(self.level, now - self.closed_at)
        return self.level

    def refusal(self) -> IneligibleReason | None:
        """Why :meth:`try_acquire` would refuse now (ignoring due timers), or None."""
        state = self.state
        if state is _C:
            return None
        if state is _O:
            return IneligibleReason.OPEN
        if state is _H:
            return None if self.accepting else IneligibleReason.PROBES_TAKEN
        if state is _B:
            return IneligibleReason.PERMANENT
        return IneligibleReason.RETIRED

    def answering(self, now: float) -> bool:
        """CLOSED and not degraded, with its latest outcome a success since it closed.

        The evidence a pool's ``vouch`` reads: no SUSPECT, FATAL or TRANSIENT fault since
        the last success, and at least one outcome in the window.
        """
        return self.state is _C and not self.degraded and not self.tally.runs and self.tally.counts(now)[0] > 0

    def window_counts(self, now: float) -> tuple[int, int, int]:
        """``(volume, failures, slow)`` of the outcome window."""
        return self.tally.counts(now)

    def next_deadline(self) -> float | None:
        """When the shell must call :meth:`handle_timer`, or None."""
        return self.reopen_at if self.state is _O else None

    # -- tickets -----------------------------------------------------------------------

    def try_acquire(self, now: float) -> Ticket | IneligibleReason:
        """Hand out a ticket, reserving a probe slot if half-open; or say why not."""
        state = self.state
        if state is _C:
            return self._closed_ticket
        if state is _O:
            reopen_at = self.reopen_at
            if reopen_at is None or now < reopen_at or self.leased:
                return IneligibleReason.OPEN
            self._move(Cause.COOLDOWN_ELAPSED, now)
            state = _H
        if state is _H:
            if self.probes_in_flight < self.probe_limit:
                self.probes_in_flight += 1
                return self._probe_ticket
            return IneligibleReason.PROBES_TAKEN
        return IneligibleReason.PERMANENT if state is _B else IneligibleReason.RETIRED

    def record_success(self, ticket: Ticket, now: float, started: float) -> bool:
        """Record a success on the CLOSED fast path; False if it needs :meth:`record`.

        See :meth:`Tally.record_success <poise_py._core._tally.Tally.record_success>`: the
        pool calls it on the endpoint's record, which is this circuit's tally.
        """
        return self.tally.record_success(ticket, now, started)

    def clock_every_success(self) -> None:
        """Ask for the time with every success (a pool whose policy measures latency).

        The success is still recorded in place; the pool feeds its latency to the policy.
        """
        self._times_every_success = True
        self._reclock()

    def _reclock(self) -> None:
        tally = self.tally
        tally.success_needs_now = tally.fast_ticket is None or self._times_every_success or tally.slow_limit is not None

    def cancel(self, ticket: Ticket) -> None:
        """Give a ticket back unused: releases a probe slot, changes no window."""
        if ticket.probe and ticket.epoch == self.epoch:
            self.probes_in_flight -= 1

    def record(
        self,
        ticket: Ticket,
        fault: Fault | None,
        now: float,
        *,
        latency: float | None = None,
        retry_after: float | None = None,
        may_eject: bool = True,
        shared: bool = False,
        quorum: Callable[[float], bool] | None = None,
        vouch: Callable[[], bool] | None = None,
    ) -> Transition | None:
        """Record a completed call's outcome (``fault`` None means success).

        ``shared``: the pool judged this load-shaped SUSPECT or TRANSIENT failure the pool's
        load, not this endpoint's (see ``Pool.complete``): a CLOSED circuit counts no strike
        and no failure for it, and only honours its ``retry_after``.

        ``may_eject`` is the pool's max-ejection-percent verdict: when False, a trip from
        CLOSED is suppressed (counted in ``suppressed_ejections``), the circuit stays
        closed and degrades, unless ``vouch`` (asked only then) says the rest of the pool
        is answering, so the fault is this endpoint's own and the trip is carried out.
        ``quorum`` (with ``minimum_hosts``) says whether enough of the pool has the volume
        for the failure-rate trip to apply. Returns the transition made, if any. A stale
        ticket is counted and otherwise ignored.
        """
        if ticket.epoch != self.epoch:
            self.stale_results += 1
            return None
        if ticket.probe:
            self.probes_in_flight -= 1
            return self._record_probe(fault, now, retry_after)
        if shared and (fault is Fault.SUSPECT or fault is Fault.TRANSIENT):
            return self._retry_after_open(now, retry_after)
        return self._record_closed(fault, now, latency, retry_after, may_eject=may_eject, quorum=quorum, vouch=vouch)

    def handle_timer(self, now: float) -> Transition | None:
        """Move OPEN -> HALF_OPEN once ``reopen_at`` has passed (never while leased)."""
        if self.state is _O and self.reopen_at is not None and now >= self.reopen_at and not self.leased:
            return self._move(Cause.COOLDOWN_ELAPSED, now)
        return None

    def recall(self, now: float) -> Transition | None:
        """End an OPEN window early, moving to HALF_OPEN now; None when not OPEN, or leased.

        The pool recalls an endpoint ejected for a load-shaped failure once the pool shows
        load: its capacity is needed. A recall is an extra chance, never a cost: a probe
        that fails puts the circuit back as it was, OPEN until its interrupted window ends,
        at the same escalation level (once that window has ended, it fails as any probe).
        """
        if self.state is _O and not self.leased:
            resume = self.reopen_at
            transition = self._move(Cause.RECALLED, now)
            self._recalled_reopen = resume
            return transition
        return None

    def restore(self, now: float) -> Transition | None:
        """Undo the ejection that opened this circuit: CLOSED now; None when not OPEN, or leased.

        The pool restores an endpoint ejected for a load-shaped failure when an endpoint in
        rotation fails the same way soon after: the failure was the pool's load, judged the
        endpoint's own only because it came first. The escalation step and the ejection in
        a row it took are given back; the runs and the window start empty.
        """
        if self.state is not _O or self.leased:
            return None
        self.tally.clear()
        self.level = max(0, self.level - 1)
        self.ejections_in_row = max(0, self.ejections_in_row - 1)
        return self._move(Cause.POOL_LOADED, now)

    def block(self, now: float) -> Transition | None:
        """Block as if a PERMANENT fault arrived (operator or tests); None if already."""
        if self.state is _B or self.state is _R:
            return None
        return self._move(Cause.PERMANENT, now)

    def uneject(self, now: float) -> Transition | None:
        """An active health check passed: close an OPEN or HALF_OPEN circuit at a new epoch.

        Envoy's un-eject. The window and the runs start empty and the hard cap's tallies
        restart (a recovery), but the escalation level stays and only decays while the
        circuit stays closed, so an endpoint that passes probes and fails traffic is
        ejected for longer each time. BLOCKED and RETIRED are left alone (None): only an
        operator or discovery clears them. Permits of the ejected epoch become stale.
        """
        if self.state is not _O and self.state is not _H:
            return None
        self.tally.clear()
        self.ejections_in_row = 0
        self.ejected_time = 0.0
        self.closed_at = now
        return self._move(Cause.HEALTH_CHECK_PASSED, now)

    def reset(self, now: float) -> Transition:
        """Start afresh, CLOSED at a new epoch: clears windows, escalation and blocks."""
        self.tally.clear()
        self.level = 0
        self.ejections_in_row = 0
        self.ejected_time = 0.0
        self.closed_at = now
        return self._move(Cause.RESET, now)

    # -- fleet coordination ------------------------------------------------------------

    def set_leased(self, leased: bool, now: float) -> Transition | None:  # noqa: FBT001
        """Enter or leave leased mode (see the module docstring); not a move.

        Entering it takes back the free local probe slots (probes in flight finish).
        Leaving it hands the circuit its own slots again, and closes a half-open circuit
        whose probes already passed the threshold, which the fleet would have closed.
        """
        if leased == self.leased:
            return None
        self.leased = leased
        if self.state is not _H:
            return None
        if leased:
            self.probe_limit = self.probes_in_flight
            return None
        self.probe_limit = self.policy.permitted_probes
        if self.probe_successes >= self.policy.success_threshold:
            return self._close_after_probes(now)
        return None

    def adopt(self, target: CircuitState, now: float, *, reopen_at: float | None = None, level: int = 0) -> Transition:
        """Move to the fleet's shared state: OPEN, HALF_OPEN or CLOSED, at a new epoch.

        Args:
            target: the shared state to mirror.
            now: the time of the move.
            reopen_at: for OPEN, the shared deadline in this circuit's clock (an estimate
                the coordinator keeps fresh); used only if the circuit is unleased later.
            level: the escalation level the fleet reached (failed rounds + 1 for OPEN and
                HALF_OPEN), so a fallback to local decisions escalates from there.

        Raises:
            IllegalMoveError: the move is not in ``TRANSITIONS`` (for instance from
                BLOCKED); the circuit is unchanged.
        """
        cause = _SHARED_CAUSE.get(target)
        source = self.state
        if cause is None or (source, cause) not in TRANSITIONS:
            raise IllegalMoveError(f"illegal circuit move {source.value} --adopt {target.value}-->")
        if target is _C:
            self.tally.clear()
            self.ejections_in_row = 0
            self.ejected_time = 0.0
            self.closed_at = now
        elif target is _O and source is not _O:
            self.ejections += 1
        self.level = min(max(level, 0), MAX_LEVEL)
        return self._move(cause, now, reopen_at=reopen_at)

    def retime(self, reopen_at: float) -> bool:
        """Set an OPEN circuit's deadline to the fleet's; the same round, so not a move.

        Returns False, changing nothing, if the circuit is not OPEN.
        """
        if self.state is not _O:
            return False
        self.reopen_at = reopen_at
        return True

    def grant(self, slots: int) -> bool:
        """Add ``slots`` leased probe slots to a HALF_OPEN circuit (capped at the policy's).

        Returns False, changing nothing, if the circuit is not HALF_OPEN.
        """
        if self.state is not _H:
            return False
        self.probe_limit = min(self.probe_limit + slots, self.policy.permitted_probes)
        return True

    def revoke(self) -> int:
        """Take back a leased HALF_OPEN circuit's free probe slots, to hand them back to the fleet.

        Returns how many were free (0, changing nothing, if none or not leased HALF_OPEN);
        probes in flight keep their slots.
        """
        free = self.probe_limit - self.probes_in_flight
        if self.state is not _H or not self.leased or free <= 0:
            return 0
        self.probe_limit = self.probes_in_flight
        return free

    # -- internals ---------------------------------------------------------------------

    def _record_closed(
        self,
        fault: Fault | None,
        now: float,
        latency: float | None,
        retry_after: float | None,
        *,
        may_eject: bool,
        quorum: Callable[[float], bool] | None,
        vouch: Callable[[], bool] | None = None,
    ) -> Transition | None:
        policy = self.policy
        slow_limit = policy.slow_call_duration
        flags = SLOW if (slow_limit is not None and latency is not None and latency >= slow_limit) else 0
        if fault is None:
            self.tally.runs = 0
            self.tally.add(flags, now)
            if flags and policy.slow_call_rate is not None:
                return self._maybe_trip(now, retry_after, may_eject=may_eject, quorum=quorum, vouch=vouch)
            if self.degraded and self._trip_cause(now, quorum) is None:
                self._set_degraded(None)  # the refused trip's condition no longer holds
            return None
        if fault is Fault.SUSPECT:
            self.tally.strike()
            self.tally.add(flags | FAILED, now)
            return self._maybe_trip(now, retry_after, may_eject=may_eject, quorum=quorum, vouch=vouch)
        if fault is Fault.FATAL:
            self.tally.strike()
            self.tally.add(flags | FAILED, now)
            if _refused(may_eject, vouch):
                self._suppress(Cause.FATAL)
                return self._retry_after_open(now, retry_after)
            return self._eject(Cause.FATAL, now, retry_after)
        if fault is Fault.PERMANENT:
            return self._move(Cause.PERMANENT, now)
        if fault is Fault.TRANSIENT:
            run = self.tally.transient()
            n = policy.consecutive_transient_failures
            if n is not None and run >= n:
                if _refused(may_eject, vouch):
                    self._suppress(Cause.CONSECUTIVE_TRANSIENT)
                    return self._retry_after_open(now, retry_after)
                return self._eject(Cause.CONSECUTIVE_TRANSIENT, now, retry_after)
            return self._retry_after_open(now, retry_after)
        return None  # CALLER: no effect on health

    def _suppress(self, cause: Cause) -> None:
        """``max_ejection_percent`` refused a trip: count it, and degrade (a later cause wins)."""
        self.suppressed_ejections += 1
        self._set_degraded(cause)

    def _set_degraded(self, cause: Cause | None) -> None:
        """Degrade for ``cause``, or (None) stop being degraded.

        While degraded every success takes the pool's long path (an infinite slow limit)
        so it can end the degradation.
        """
        self.degraded = cause is not None
        self.degraded_cause = cause
        tally = self.tally
        tally.set_rules(-math.inf if cause is not None else self._slow_base, tally.window)
        self._reclock()

    def trip(self, cause: Cause, now: float, *, may_eject: bool) -> Transition | None:
        """A pool-level verdict (``SUCCESS_RATE``) trips a CLOSED circuit; else None.

        Like any trip: escalated, jittered and capped when ``may_eject``; suppressed and
        degraded when not.
        """
        if self.state is not _C:
            return None
        if not may_eject:
            self._suppress(cause)
            return None
        return self._eject(cause, now, None)

    def eject_degraded(self, now: float) -> Transition | None:
        """Eject a degraded circuit now that ``max_ejection_percent`` allows it; else None.

        The pool calls this when an ejection ends and the guard has room again: the
        refused trip is carried out (with escalation, jitter and the hard cap).
        """
        cause = self.degraded_cause
        if not self.degraded or cause is None or self.state is not _C:
            return None
        return self._eject(cause, now, None)

    def _maybe_trip(
        self,
        now: float,
        retry_after: float | None,
        *,
        may_eject: bool,
        quorum: Callable[[float], bool] | None,
        vouch: Callable[[], bool] | None = None,
    ) -> Transition | None:
        cause = self._trip_cause(now, quorum)
        if cause is None:
            return self._retry_after_open(now, retry_after)
        if _refused(may_eject, vouch):
            self._suppress(cause)
            return self._retry_after_open(now, retry_after)
        return self._eject(cause, now, retry_after)

    def _trip_cause(self, now: float, quorum: Callable[[float], bool] | None = None) -> Cause | None:
        policy = self.policy
        volume, failures, slow = self.window_counts(now)
        if volume < policy.minimum_volume:
            return None
        n = policy.consecutive_failures
        if n is not None and self.tally.runs & LOW >= n:
            return Cause.CONSECUTIVE_FAILURES
        # The rates as divisions, not ``rate * volume``: 55 of 100 is exactly the float 0.55,
        # where 0.55 * 100 is 55.00000000000001 and would not trip (volume >= 1 here).
        rate = policy.failure_rate
        if rate is not None and failures / volume >= rate and (quorum is None or quorum(now)):
            return Cause.FAILURE_RATE
        rate = policy.slow_call_rate
        if rate is not None and slow / volume >= rate:
            return Cause.SLOW_CALL_RATE
        return None

    def _retry_after_open(self, now: float, retry_after: float | None) -> Transition | None:
        """Honour a server's Retry-After: open that long, without escalating."""
        if not retry_after:
            return None
        wait = min(retry_after, self.policy.max_retry_after)
        return self._move(Cause.RETRY_AFTER, now, reopen_at=now + wait, retry_after=wait)

    def _eject(self, cause: Cause, now: float, retry_after: float | None) -> Transition:
        """Open with escalation (from CLOSED or after a failed probe), or retire."""
        policy = self.policy
        honoured = min(retry_after, policy.max_retry_after) if retry_after else None
        resume = self._recalled_reopen
        if resume is not None and resume > now:  # a recalled probe failed: back as it was
            return self._move(cause, now, reopen_at=max(resume, now + (honoured or 0.0)), retry_after=honoured)
        escalation = policy.escalation
        if self.state is _C:
            self.level = escalation.decayed(self.level, now - self.closed_at)
        wait = escalation.jittered(self.level, self._unit())
        if honoured is not None:
            wait = max(wait, honoured)
        self.level = min(self.level + 1, MAX_LEVEL)
        self.ejections_in_row += 1
        self.ejected_time += wait
        cap = policy.hard_cap
        if cap is not None and (
            (cap.max_ejections is not None and self.ejections_in_row > cap.max_ejections)
            or (cap.max_ejected_time is not None and self.ejected_time > cap.max_ejected_time)
        ):
            return self._move(Cause.HARD_CAP, now)  # retired: not an opening, not counted as one
        self.ejections += 1
        return self._move(cause, now, reopen_at=now + wait, retry_after=honoured)

    def _record_probe(self, fault: Fault | None, now: float, retry_after: float | None) -> Transition | None:
        if fault is None:
            self.tally.runs = 0
            self.probe_successes += 1
            if self.leased:
                # The slot was one fleet lease, now spent; the fleet counts the success.
                self.probe_limit -= 1
                return None
            if self.probe_successes < self.policy.success_threshold:
                return None
            return self._close_after_probes(now)
        if fault is Fault.SUSPECT or fault is Fault.FATAL:
            return self._eject(Cause.PROBE_FAILED, now, retry_after)
        if fault is Fault.PERMANENT:
            return self._move(Cause.PERMANENT, now)
        if fault is Fault.TRANSIENT:
            # The run did not end at the ejection: a TRANSIENT probe that completes it
            # fails the probe like a strike would.
            run = self.tally.transient()
            n = self.policy.consecutive_transient_failures
            if n is not None and run >= n:
                return self._eject(Cause.PROBE_FAILED, now, retry_after)
            return self._retry_after_open(now, retry_after)
        return None  # CALLER

    def _close_after_probes(self, now: float) -> Transition:
        if self.policy.escalation.reset_on_success:
            self.level = 0
        self.ejections_in_row = 0
        self.ejected_time = 0.0
        self.closed_at = now
        self.tally.clear()
        return self._move(Cause.PROBE_SUCCEEDED, now)

    def _move(
        self, cause: Cause, now: float, *, reopen_at: float | None = None, retry_after: float | None = None
    ) -> Transition:
        source = self.state
        target = TRANSITIONS.get((source, cause))
        if target is None:
            raise IllegalMoveError(f"illegal circuit move {source.value} --{cause.value}-->")
        epoch = self.epoch + 1
        self.epoch = epoch
        self.state = target
        if self.degraded:
            self._set_degraded(None)
        self._closed_ticket = ticket(epoch, probe=False)
        self._probe_ticket = ticket(epoch, probe=True)
        self.tally.fast_ticket = self._closed_ticket if target is _C else None
        self._reclock()
        self.probes_in_flight = 0
        self.probe_successes = 0
        self.probe_limit = (0 if self.leased else self.policy.permitted_probes) if target is _H else 0
        self.reopen_at = reopen_at if target is _O else None
        self._recalled_reopen = None
        return Transition(
            source=source,
            target=target,
            cause=cause,
            epoch=epoch,
            at=now,
            reopen_at=self.reopen_at,
            retry_after=retry_after,
        )
