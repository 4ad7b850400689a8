"""The pool: membership, eligibility and the ejection guard, as pure bookkeeping.

The pool keeps a list of the endpoints that may take a permit right now (CLOSED, or
HALF_OPEN with a free probe slot, and allowed by the operator and by active health). It is updated in O(1)
whenever a circuit moves or a probe slot is taken or released, so a pick never scans
the pool. OPEN circuits wait in a heap of deadlines; :meth:`Pool.handle_timer` (called
by the shell's timer, and lazily by :meth:`Pool.select`) moves the due ones to
HALF_OPEN. Ineligibility reasons are counted only when a selection fails.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Collection, Hashable, Iterable
from typing import TypeAlias

from .._decision import Decision, DecisionMode
from .._endpoint import AdminStatus, Endpoint
from .._errors import EmptyPool, IneligibleReason, NoEligibleEndpoints
from .._faults import Fault
from ._circuit import Circuit, CircuitState, Ticket, Transition
from ._ejection import ejection_allowance
from ._policies import Picker, Policy
from ._policy import CircuitPolicy
from ._state import FAULT_INDEX, SATURATED, EndpointState, sat_add

TransitionHook: TypeAlias = Callable[[EndpointState, Transition], None]
LeaveHook: TypeAlias = Callable[[EndpointState], None]
IdleHook: TypeAlias = Callable[[EndpointState], None]
ProbeHook: TypeAlias = Callable[[EndpointState], None]

_ADMIN_REFUSAL: dict[AdminStatus, IneligibleReason | None] = {
    AdminStatus.AUTO: None,
    AdminStatus.FORCED_HEALTHY: None,
    AdminStatus.DRAINING: IneligibleReason.DRAINING,
    AdminStatus.DISABLED: IneligibleReason.DISABLED,
    AdminStatus.FORCED_UNHEALTHY: IneligibleReason.UNHEALTHY,
}
_OPEN = CircuitState.OPEN
_CLOSED = CircuitState.CLOSED
_AUTO = AdminStatus.AUTO
_REDISCOVERY_CLEARS = frozenset({IneligibleReason.PERMANENT, IneligibleReason.RETIRED})


def _ignore(state: EndpointState, transition: Transition) -> None:
    return None


def _ignore_idle(state: EndpointState) -> None:
    return None


def _gate(state: EndpointState) -> IneligibleReason | None:
    """Readiness, then the operator's and active health's verdict; active health counts only under AUTO."""
    admin = state.admin
    return state.readiness or (state.health_refusal if admin is _AUTO else _ADMIN_REFUSAL[admin])


class Pool:
    """Live endpoints and their circuits. Pure: every method takes ``now``.

    Args:
        circuit: the circuit knobs every endpoint gets.
        policy: the selection policy.
        rng: the seeded source of every random choice (jitter, picks).
        on_transition: called for every circuit move (events, logs).
        on_idle: called when the last permit of an endpoint that takes no new ones ends
            (``LoadBalancer.drained``).
    """

    # Declared types (for type checkers and the public type surface); values are set in __init__.
    timed: bool
    suppressed_ejections: int

    def __init__(
        self,
        circuit: CircuitPolicy,
        policy: Policy,
        rng: random.Random,
        *,
        on_transition: TransitionHook = _ignore,
        on_idle: IdleHook = _ignore_idle,
    ) -> None:
        self.circuit_policy = circuit
        self._rng = rng
        self._unit = rng.random
        self._picker: Picker = policy.bind(rng)
        self._pick = self._picker.pick
        self.timed = circuit.measures_latency or bool(getattr(policy, "measures_latency", False))
        """Whether a selection must read the clock to time the call."""
        self.members: dict[str, EndpointState] = {}
        self._available: list[EndpointState] = []
        self._loads: list[int] = []
        """``inflight`` of ``_available[i]``: a compact copy, so load-aware picks stay in cache."""
        self._deadlines: list[tuple[float, int, EndpointState, int]] = []
        self._seq = 0
        self._ejected = 0
        self._allowance = 1
        self._decisions: dict[int, Decision] = {}
        self.on_transition = on_transition
        self.on_idle = on_idle
        self.orphans: list[tuple[EndpointState, Ticket]] = []
        """Permits garbage-collected unreported; released at the next pool operation."""
        self.suppressed_ejections = 0
        self.on_leave: LeaveHook | None = None
        """Called for each endpoint removed from the pool (telemetry folds its counters)."""
        self.on_probe_result: ProbeHook | None = None
        """Called after a current-epoch probe result that moved nothing (coordination)."""

    # -- membership --------------------------------------------------------------------

    def apply(
        self,
        now: float,
        *,
        added: Iterable[Endpoint] = (),
        removed: Iterable[str] = (),
        updated: Iterable[Endpoint] = (),
    ) -> None:
        """Apply a validated membership change in O(changes).

        ``removed`` ids leave (their in-flight permits finish and their results are
        ignored); ``updated`` endpoints keep their state with new attributes; ``added``
        start fresh. The caller (the directory) has already checked the change is coherent.
        """
        for endpoint_id in removed:
            state = self.members.pop(endpoint_id)
            state.live = False
            self._set_available(state, available=False)
            if state.was_ejected:
                self._ejected -= 1
                state.was_ejected = False
            if self.on_leave is not None:
                self.on_leave(state)
        for endpoint in updated:
            state = self.members[endpoint.id]
            state.endpoint = endpoint
            state.decision = self._decision(endpoint.tier)
            # Re-emitted with a new definition (a rotated key, a moved address): a block
            # or a retirement was about the old one, so the circuit starts afresh.
            if state.circuit.refusal() in _REDISCOVERY_CLEARS:
                self._moved(state, state.circuit.reset(now))
        for endpoint in added:
            state = EndpointState(endpoint, Circuit(self.circuit_policy, self._unit, now))
            state.decision = self._decision(endpoint.tier)
            self.members[endpoint.id] = state
            self._set_available(state, available=True)
        self._allowance = ejection_allowance(len(self.members), self.circuit_policy.max_ejection_percent)

    # -- selection ---------------------------------------------------------------------

    def select(
        self, clock: Callable[[], float], key: Hashable | None = None, exclude: Collection[str] = ()
    ) -> tuple[EndpointState, Ticket, float]:
        """Choose an endpoint and reserve its ticket, or raise a :class:`SelectionError`.

        ``clock`` is read only when something needs the time (a circuit due to leave
        OPEN, or a policy that measures latency); the reading is returned (0.0 if none).
        """
        if self.orphans:
            self.release_orphans()
        deadlines = self._deadlines
        now = clock() if (self.timed or deadlines) else 0.0
        if deadlines and deadlines[0][0] <= now:
            self.handle_timer(now)
        available = self._available
        if not available:
            raise self._no_eligible(exclude)
        state = self._pick(available, self._loads, key)
        if exclude and state.endpoint.id in exclude:
            state = self._pick_excluding(key, exclude)
        circuit = state.circuit
        if circuit.state is _CLOSED:
            ticket = circuit._closed_ticket  # the hot path; see Circuit.try_acquire
        else:
            got = circuit.try_acquire(now)
            if type(got) is not Ticket:  # available implies accepting; a bug otherwise
                raise AssertionError(f"{state!r} was available but refused: {got}")
            ticket = got
            if ticket.probe:
                state.probes = sat_add(state.probes)
                if not circuit.accepting:
                    self._set_available(state, available=False)
        n = state.inflight = state.inflight + 1
        if state.pos >= 0:
            self._loads[state.pos] = n
        return state, ticket, now

    def _decision(self, tier: int) -> Decision:
        decision = self._decisions.get(tier)
        if decision is None:
            decision = self._decisions[tier] = Decision(DecisionMode.HEALTHY, tier)
        return decision

    def _pick_excluding(self, key: Hashable | None, exclude: Collection[str]) -> EndpointState:
        pick = self._pick
        available = self._available
        for _ in range(2 * len(exclude) + 2):
            state = pick(available, self._loads, key)
            if state.endpoint.id not in exclude:
                return state
        candidates = [s for s in available if s.endpoint.id not in exclude]
        if not candidates:
            raise self._no_eligible(exclude)
        return pick(candidates, [s.inflight for s in candidates], key)

    def _no_eligible(self, exclude: Collection[str]) -> EmptyPool | NoEligibleEndpoints:
        if not self.members:
            return EmptyPool("discovery has not delivered any endpoint yet")
        reasons = dict.fromkeys(IneligibleReason, 0)
        for state in self.members.values():
            reason = self.refusal(state)
            if reason is None and state.endpoint.id in exclude:
                reason = IneligibleReason.EXCLUDED
            if reason is not None:
                reasons[reason] += 1
        return NoEligibleEndpoints(reasons, len(self.members))

    def refusal(self, state: EndpointState) -> IneligibleReason | None:
        """Why ``state`` may not take a permit now, or None if it may."""
        return _ADMIN_REFUSAL[state.admin] or state.circuit.refusal() or _gate(state)

    # -- completion --------------------------------------------------------------------

    def succeed(self, state: EndpointState, ticket: Ticket, clock: Callable[[], float], started: float) -> None:
        """Record a successful call; reads ``clock`` only if the outcome needs the time."""
        n = state.inflight = state.inflight - 1
        if state.pos >= 0:
            self._loads[state.pos] = n
        elif not n:
            self.on_idle(state)  # off the hot path: only endpoints that take no permits
        n = state.successes
        state.successes = n + 1 if n < SATURATED else n
        circuit = state.circuit
        # Circuit._record_closed for a success, inlined: this is the hot path of every
        # call. A slow-call threshold needs the latency, so that case takes the long way.
        if ticket is circuit._closed_ticket and state.live:
            slow_limit = circuit._slow_limit
            if slow_limit is None:
                circuit._consecutive = 0
                window = circuit._window
                if window is None:
                    if circuit._volume < circuit._volume_cap:
                        circuit._volume += 1
                else:
                    window.add(0, clock() if circuit._window_timed else 0.0)
                return
            now = clock()
            if now - started < slow_limit:  # a success in time: no trip can follow
                circuit._consecutive = 0
                circuit._add(0, now)
                return
        else:
            now = clock()
        self._record(state, ticket, None, now, latency=now - started, retry_after=None)

    def complete(
        self,
        state: EndpointState,
        ticket: Ticket,
        fault: Fault | None,
        now: float,
        *,
        latency: float | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Record a finished call. A returned error is completed work, like a success."""
        n = state.inflight = state.inflight - 1
        if state.pos >= 0:
            self._loads[state.pos] = n
        elif not n:
            self.on_idle(state)  # off the hot path: only endpoints that take no permits
        if fault is None:
            state.successes = sat_add(state.successes)
        else:
            i = FAULT_INDEX[fault]
            state.faults[i] = sat_add(state.faults[i])
        self._record(state, ticket, fault, now, latency=latency, retry_after=retry_after)

    def _record(
        self,
        state: EndpointState,
        ticket: Ticket,
        fault: Fault | None,
        now: float,
        *,
        latency: float | None,
        retry_after: float | None,
    ) -> None:
        if self.orphans:
            self.release_orphans()
        circuit = state.circuit
        if not state.live or ticket.epoch != circuit.epoch:
            state.stale = sat_add(state.stale)
            if not state.live:
                return
        before = circuit.suppressed_ejections
        transition = circuit.record(
            ticket,
            fault,
            now,
            latency=latency,
            retry_after=retry_after,
            may_eject=self._ejected < self._allowance,
        )
        if circuit.suppressed_ejections != before:
            self.suppressed_ejections = sat_add(self.suppressed_ejections)
        if transition is not None:
            self._moved(state, transition)
        elif ticket.probe:
            self._sync(state)
            if self.on_probe_result is not None and ticket.epoch == circuit.epoch:
                self.on_probe_result(state)

    def cancel(self, state: EndpointState, ticket: Ticket) -> None:
        """Release a permit that ended without an outcome. No window changes."""
        n = state.inflight = state.inflight - 1
        if state.pos >= 0:
            self._loads[state.pos] = n
        elif not n:
            self.on_idle(state)  # off the hot path: only endpoints that take no permits
        state.cancellations = sat_add(state.cancellations)
        if state.live:
            state.circuit.cancel(ticket)
            if ticket.probe:
                self._sync(state)

    def release_orphans(self) -> None:
        """Cancel the permits that were garbage-collected without a report."""
        orphans, self.orphans = self.orphans, []
        for state, ticket in orphans:
            self.cancel(state, ticket)

    # -- timers and operators ----------------------------------------------------------

    def next_deadline(self) -> float | None:
        """The earliest time :meth:`handle_timer` has work, or None."""
        deadlines = self._deadlines
        while deadlines:
            _, _, state, epoch = deadlines[0]
            if state.live and state.circuit.epoch == epoch:
                return deadlines[0][0]
            heapq.heappop(deadlines)
        return None

    def handle_timer(self, now: float) -> None:
        """Move every circuit whose open window has ended to HALF_OPEN."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            _, _, state, epoch = heapq.heappop(deadlines)
            if state.live and state.circuit.epoch == epoch:
                transition = state.circuit.handle_timer(now)
                if transition is not None:
                    self._moved(state, transition)

    def set_admin(self, endpoint_id: str, status: AdminStatus) -> EndpointState:
        """Set an operator status; raises KeyError for an unknown id."""
        state = self.members[endpoint_id]
        state.admin = status
        self._sync(state)
        return state

    def reset_circuit(self, state: EndpointState, now: float) -> None:
        """Reset one circuit to a fresh CLOSED epoch (operator action, rediscovery)."""
        self._moved(state, state.circuit.reset(now))

    def set_health(self, state: EndpointState, refusal: IneligibleReason | None) -> None:
        """Record active health's verdict for one endpoint (None: it may serve); O(1)."""
        if refusal is not state.health_refusal:
            state.health_refusal = refusal
            if state.live:
                self._sync(state)

    def set_readiness(self, state: EndpointState, reason: IneligibleReason | None) -> None:
        """Keep ``state`` out as NOT_READY or QUARANTINED, or (None) let the rest decide; O(1)."""
        if reason is not state.readiness:
            state.readiness = reason
            if state.live:
                self._sync(state)

    def uneject(self, state: EndpointState, now: float) -> bool:
        """Close a passively ejected circuit after a passing active check; False if not ejected."""
        if not state.live:
            return False
        transition = state.circuit.uneject(now)
        if transition is None:
            return False
        self._moved(state, transition)
        return True

    # -- fleet coordination ------------------------------------------------------------

    def adopt(
        self, state: EndpointState, target: CircuitState, now: float, *, reopen_at: float | None, level: int
    ) -> Transition:
        """Move one circuit to the fleet's shared state (see :meth:`Circuit.adopt`)."""
        transition = state.circuit.adopt(target, now, reopen_at=reopen_at, level=level)
        self._moved(state, transition)
        return transition

    def retime(self, state: EndpointState, reopen_at: float) -> None:
        """Move an OPEN circuit's deadline to the fleet's (see :meth:`Circuit.retime`)."""
        circuit = state.circuit
        if circuit.retime(reopen_at) and not circuit.leased:
            self._arm(state)

    def grant(self, state: EndpointState, slots: int) -> bool:
        """Hand leased probe slots to a HALF_OPEN circuit; False if it is not HALF_OPEN."""
        granted = state.circuit.grant(slots)
        if granted:
            self._sync(state)
        return granted

    def set_leased(self, state: EndpointState, leased: bool, now: float) -> None:  # noqa: FBT001
        """Enter or leave leased mode; leaving it re-arms the circuit's own OPEN timer."""
        circuit = state.circuit
        transition = circuit.set_leased(leased, now)
        if transition is not None:
            self._moved(state, transition)
            return
        if not leased and circuit.state is _OPEN:
            self._arm(state)
        self._sync(state)

    # -- internals ---------------------------------------------------------------------

    def _arm(self, state: EndpointState) -> None:
        circuit = state.circuit
        if circuit.reopen_at is not None:
            self._seq += 1
            heapq.heappush(self._deadlines, (circuit.reopen_at, self._seq, state, circuit.epoch))

    def _moved(self, state: EndpointState, transition: Transition) -> None:
        if transition.target is _OPEN and transition.reopen_at is not None:
            self._seq += 1
            heapq.heappush(self._deadlines, (transition.reopen_at, self._seq, state, transition.epoch))
        self._sync(state)
        self.on_transition(state, transition)

    def _sync(self, state: EndpointState) -> None:
        circuit = state.circuit
        ejected = circuit.ejected
        if ejected != state.was_ejected:
            state.was_ejected = ejected
            self._ejected += 1 if ejected else -1
        available = circuit.accepting and _gate(state) is None
        self._set_available(state, available=available)

    def _set_available(self, state: EndpointState, *, available: bool) -> None:
        pos = state.pos
        if available and pos < 0:
            state.pos = len(self._available)
            self._available.append(state)
            self._loads.append(state.inflight)
        elif not available and pos >= 0:
            last = self._available.pop()
            last_load = self._loads.pop()
            if last is not state:
                self._available[pos] = last
                self._loads[pos] = last_load
                last.pos = pos
            state.pos = -1

    @property
    def available_count(self) -> int:
        """How many endpoints may take a permit now."""
        return len(self._available)

    @property
    def may_eject(self) -> bool:
        """Whether ``max_ejection_percent`` allows one more circuit to be ejected now."""
        return self._ejected < self._allowance

    @property
    def ejected_count(self) -> int:
        """How many circuits are OPEN or HALF_OPEN."""
        return self._ejected
