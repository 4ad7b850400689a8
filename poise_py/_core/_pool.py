"""The pool (pure core): membership, eligibility and routing state, as bookkeeping.

The pool keeps, per routing scope (a tier, or one zone side of it: see ``_routing``),
the list of the endpoints that may take a permit right now (CLOSED, or HALF_OPEN with a
free probe slot, ready, and allowed by the operator and by active health). The lists are
updated in O(1) whenever a circuit moves or a probe slot is taken or released, so a pick
never scans the pool, and the router's plan is recomputed in O(tiers) after each such
change. When the plan sends all traffic to one scope as HEALTHY (the single-tier pool, or
a healthy first tier), :meth:`Pool.select` picks from it directly; otherwise it draws the
scope first. Ineligibility reasons are counted only when a selection fails.

Time comes in as ``now`` and deadlines go out: OPEN circuits (and the success-rate
evaluation) wait in a heap that :meth:`Pool.next_deadline` reports and
:meth:`Pool.handle_timer` (the shell's timer, and lazily :meth:`Pool.select`) runs. So the
shell may skip its clock read on the hot path, :attr:`Pool.needs_now` and
``Circuit.success_needs_now`` say when ``select`` and ``succeed`` need a real ``now``.
Everything the shell must hear goes to one :class:`~poise_py._core._listener.PoolListener`;
the ``max_ejection_percent`` bookkeeping is the :class:`~poise_py._core._ejection.EjectionGuard`.
"""

from __future__ import annotations

import functools
import heapq
import math
import random
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import TypeAlias

from .._decision import Decision, DecisionMode
from .._endpoint import MAX_IN_FLIGHT, AdminStatus, Endpoint
from .._errors import EmptyPool, IneligibleReason, NoEligibleEndpoints, Overloaded, WeightOverflow
from .._faults import Fault
from ._circuit import Cause, CircuitState, PanicTicket, Ticket, Transition
from ._circuit_policy import CircuitPolicy
from ._concurrency import LoadPolicy, SlowStart
from ._ejection import EjectionGuard, rate_quorum, rotation_answers
from ._limits import UNLIMITED, LoadControl, LoadState, RampShape
from ._listener import NullListener, PoolListener
from ._load_signals import Answers, LoadSignal
from ._outlier import OutlierSampler
from ._pickers import PickFn, PoolView
from ._record import UNMEASURED, Member, count_fault, count_selection, gate, no_eligible, refusal, sat_add
from ._routing import TRAFFIC_UNITS, Panic, Router, Routing, Scope, decision, pick_in
from ._selection import Policy

Selection: TypeAlias = tuple[Member, Ticket, float, Decision]
"""What :meth:`Pool.select` returns: the endpoint, its ticket, the time it was given, the decision."""

_DRAINING = AdminStatus.DRAINING
_DISABLED = AdminStatus.DISABLED
_OPEN = CircuitState.OPEN
_CLOSED = CircuitState.CLOSED
_BLOCKED = CircuitState.BLOCKED
_RETIRED = CircuitState.RETIRED
_HEALTHY = DecisionMode.HEALTHY
_SPILLOVER = DecisionMode.SPILLOVER
_PANIC = DecisionMode.PANIC
_LIMITED = DecisionMode.LIMITED
_HALF_OPEN = CircuitState.HALF_OPEN
_POOL_LOADED = Cause.POOL_LOADED
_QUOTA = IneligibleReason.QUOTA
_RESTS = -2
"""The epoch slot of a deadline that ends a spent quota's rest (OPEN ends carry an epoch >= 0)."""
QUOTA_REST = 1.0
"""Seconds an endpoint rests when its provider said its quota is spent but not when it resets."""
_DROPS = frozenset({Fault.TRANSIENT, Fault.SUSPECT})
"""Faults an adaptive limit counts as drops (the caller's, and final verdicts, say nothing of load),
and a policy's ``failure_penalty`` charges."""
_AUTO = AdminStatus.AUTO
_FORCED_HEALTHY = AdminStatus.FORCED_HEALTHY


class Pool:
    """Live endpoints and their circuits. Pure: every method takes ``now``.

    Args:
        circuit: the circuit knobs every endpoint gets.
        policy: the selection policy.
        rng: the seeded source of every random choice (jitter, picks).
        routing: tier and zone knobs (default :class:`Routing`).
        panic: opt-in panic routing, or None (default: off).
        listener: hears circuit moves, idle endpoints, panic episodes, degradation,
            departures, new deadlines and probe results (default: :class:`NullListener`).
        load: concurrency caps, adaptive limits and slow start (default: all off; see
            ``_concurrency``). With any on, each endpoint keeps a
            :class:`~poise_py._core._concurrency.LoadControl` and :meth:`select` admits a
            pick only under its limit (and, while it ramps, with its slow-start share).
    """

    # Declared types (for type checkers and the public type surface); values are set in __init__.
    times_calls: bool
    needs_now: bool
    stores_loads: bool
    totals_loads: bool
    routing: Routing
    panic: Panic | None
    router: Router
    listener: PoolListener
    guard: EjectionGuard
    load: LoadState

    def __init__(
        self,
        circuit: CircuitPolicy,
        policy: Policy,
        rng: random.Random,
        *,
        routing: Routing | None = None,
        panic: Panic | None = None,
        listener: PoolListener | None = None,
        load: LoadPolicy | None = None,
    ) -> None:
        self.circuit_policy = circuit
        window = circuit.overload_window
        self.load = LoadState(
            load if load is not None else LoadPolicy(), None if window is None else SlowStart(window=window)
        )
        """The load knobs and the endpoints in slow start (one attribute: CPython shares an
        instance dict's keys only up to 30 of them, and the hot path reads this object's)."""
        self._rng = rng
        self._unit = rng.random
        measures = bool(getattr(policy, "measures_latency", False))
        self._measure: Callable[[Member, float, float], None] | None = (
            policy.observe if measures else None  # type: ignore[attr-defined]
        )
        """The policy's latency observer, if it measures latency."""
        penalty = float(getattr(policy, "failure_penalty", 0.0))
        self.answers: Answers = Answers(
            latency_floor=penalty if measures else 0.0,
            hold=0.0 if measures else penalty,
            error_utilization_penalty=float(getattr(policy, "error_utilization_penalty", 1.0)),
            weight_expiration_period=float(getattr(policy, "weight_expiration_period", 180.0)),
        )
        """Failure penalties, quota rests and load-report knobs (one attribute: see :class:`Answers`)."""
        self._observe = self._observe_adaptive if self.load.adaptive else self._measure
        """What a CLOSED success's latency feeds (the policy's observer, an adaptive limit's
        sample, or nothing): one hook, so the hot path tests one attribute for both."""
        self.times_calls = (
            circuit.measures_latency
            or measures
            or self.load.adaptive
            or self.answers.hold > 0
            or bool(getattr(policy, "reads_time", False))
        )
        """Whether a selection needs the time to time the call."""
        self.needs_now = self.times_calls
        """Whether :meth:`select` needs a real ``now``: a timed pool, or a deadline pending."""
        self.listener = listener if listener is not None else NullListener()
        self.stores_loads = bool(getattr(policy, "reads_loads", True))
        """Whether the hot path keeps the scopes' ``loads`` equal to in-flight counts: only
        when the policy reads them (a random store into a list as long as the pool is a
        cache miss at 100,000 endpoints)."""
        self.totals_loads = self.stores_loads and bool(getattr(policy, "tracks_load", False))
        """Whether the hot path also keeps each home scope's ``load_total`` (bounded-load hashing)."""
        self._view = PoolView()
        """The latest clock reading of a timed pool, for pickers that weigh time."""
        self.routing = routing if routing is not None else Routing()
        self.panic = panic
        self.router = Router(
            policy,
            rng,
            view=self._view,
            routing=self.routing,
            panic=panic,
            on_panic=self.listener.panic,
        )
        self.members: dict[str, Member] = {}
        # The hot path's view of the router: the scope that takes all traffic as HEALTHY.
        self._fast: list[Member] | None = None
        self._loads: list[int] = []
        self._pick: PickFn = _no_pick
        self._fast_decision = decision(_HEALTHY, 0)
        self._weight_total = 0
        self._deadlines: list[tuple[float, int, Member | None, int]] = []
        """OPEN circuits' ends ``(at, seq, member, epoch)``, and with success-rate detection
        its next evaluation ``(at, seq, None, -1)``."""
        self._outliers = None if circuit.success_rate is None else OutlierSampler(circuit.success_rate)
        self._outlier_armed = False
        self._quorum: Callable[[float], bool] | None = (
            None if circuit.minimum_hosts is None else functools.partial(rate_quorum, circuit, self.members.values())
        )
        self._seq = 0
        self.guard = EjectionGuard(circuit.max_ejection_percent)
        """``max_ejection_percent``: the ejected count, the allowance and the degraded reserve."""
        self.orphans: list[tuple[Member, Ticket]] = []
        """Permits garbage-collected unreported; released at the next pool operation."""

    def listen(self, listener: PoolListener) -> None:
        """Report to ``listener`` from now on (a shell builds its parts with the pool, then its listener with them)."""
        self.listener = listener
        self.router.on_panic = listener.panic

    # -- membership --------------------------------------------------------------------

    def apply(
        self,
        now: float,
        *,
        added: Iterable[Endpoint] = (),
        removed: Iterable[str] = (),
        updated: Iterable[Endpoint] = (),
        built: Mapping[str, Member] | None = None,
    ) -> list[Member]:
        """Apply a validated membership change in O(changes); returns the records that left.

        ``removed`` ids leave (their in-flight permits finish and their results are
        ignored); ``updated`` endpoints keep their state with new attributes; ``added``
        start fresh. The caller (the directory) has already checked the change is coherent.
        ``built``: the records :meth:`build` made for ``added``, by id in their order (None:
        built here).
        Many endpoints joining or leaving at once cost a pass per routing structure, not a
        call each (:meth:`_join_fresh`, :meth:`_detach_all`).
        """
        updated = list(updated)
        added = list(added)
        assert built is None or len(built) == len(added)  # noqa: S101 - one record per added endpoint
        members = self.members
        gone = self._leaving(removed)
        self._weight_total = self._weight_after(added, gone, updated)
        if not self.load.controlled:
            capped = [MAX_IN_FLIGHT in e.metadata for e in (*added, *updated)]  # a list: faster than a generator
            if any(capped):
                self._take_control()
        if gone:
            if len(gone) == len(members):
                members.clear()
            else:
                for member in gone:
                    del members[member.endpoint.id]
            self._leave(gone)
        slow_start = self.load.slow_start is not None and bool(members)
        for endpoint in updated:
            member = members[endpoint.id]
            old = member.endpoint
            control = member.control
            if control is not None:
                control.recap(self._cap(endpoint))
            if (old.tier, old.zone, old.weight) == (endpoint.tier, endpoint.zone, endpoint.weight):
                member.endpoint = endpoint
            else:  # routing structures key on these: leave them and come back
                self._detach(member)
                member.endpoint = endpoint
                self._attach(member)
            # Re-emitted with a new definition (a rotated key, a moved address): a block
            # or a retirement was about the old one, so the circuit starts afresh.
            if member.circuit.parked:
                self._moved(member, member.circuit.reset(now))
        fresh = self.build(added, now) if built is None else built
        if fresh:
            self._join_fresh(fresh)
            if self.load.controlled:
                for member in fresh.values():
                    member.control = self._new_control(member.endpoint)
                    if slow_start:  # the first members start together: nothing to ramp against
                        self._ramp(member, now)
        self.guard.resize(len(members))
        self._replan()
        self._promote(now)
        if self._outliers is not None and not self._outlier_armed:
            self._outlier_armed = True
            self._schedule_outliers(now)
            self.listener.armed()
        return gone

    def _take_control(self) -> None:
        """The first endpoint with its own ``max_in_flight`` arrived: every member gets a LoadControl."""
        self.load.controlled = True
        for member in self.members.values():
            member.control = self._new_control(member.endpoint)

    def _new_control(self, endpoint: Endpoint) -> LoadControl:
        """A fresh LoadControl for ``endpoint``: its fixed cap, and its own adaptive limiter if one is on."""
        adaptive = self.load.policy.adaptive
        return LoadControl(self._cap(endpoint), None if adaptive is None else adaptive.limiter())

    def build(self, endpoints: Iterable[Endpoint], now: float) -> dict[str, Member]:
        """Fresh records for ``endpoints`` by id, not yet members: :meth:`apply` takes them as ``built``.

        Constructing the records is most of what adding an endpoint costs, and touches
        nothing live, so a shell builds a large update's records a chunk at a time (the
        event loop runs between chunks) and commits them in one :meth:`apply`, which
        merges this table into its members in one step.
        """
        policy = self.circuit_policy
        unit = self._unit
        states = [Member(endpoint, policy, unit, now) for endpoint in endpoints]
        if self._observe is not None:
            # A latency-measuring policy (or an adaptive limit) needs every success's
            # latency: the exit reads the clock for each, and succeed() feeds it.
            for member in states:
                member.circuit.clock_every_success()
        return {member.endpoint.id: member for member in states}

    def check_weights(self, added: Iterable[Endpoint], removed: Iterable[str], updated: Iterable[Endpoint]) -> int:
        """The total weight after a change, or :class:`WeightOverflow` if it passes the bound.

        Changes nothing: discovery calls it when it plans an update, before building
        anything for it, and :meth:`apply` makes the same check before applying.
        """
        return self._weight_after(added, self._leaving(removed), updated)

    def _leaving(self, removed: Iterable[str]) -> list[Member]:
        """The members ``removed`` names (distinct live ids, as a validated change has them)."""
        members = self.members
        removed = removed if isinstance(removed, Collection) else list(removed)
        if len(removed) == len(members):  # every member leaves (a full replacement): no lookups
            return list(members.values())
        return [members[i] for i in removed]

    def _weight_after(self, added: Iterable[Endpoint], gone: list[Member], updated: Iterable[Endpoint]) -> int:
        members = self.members
        total = self._weight_total
        if len(gone) == len(members):
            total = 0  # everyone leaves: what is left of the total is nothing
        else:
            total -= sum([member.endpoint.weight for member in gone])
        total += sum([e.weight - members[e.id].endpoint.weight for e in updated])
        total += sum([e.weight for e in added])
        bound = self.routing.max_total_weight
        if total > bound:
            raise WeightOverflow(total, bound)
        return total

    # -- selection ---------------------------------------------------------------------

    def select(self, now: float, key: Hashable | None = None, exclude: Collection[str] = ()) -> Selection:
        """Choose an endpoint and reserve its ticket, or raise a :class:`SelectionError`.

        ``now`` is used only while :attr:`needs_now` (a deadline is pending, or the pool
        times its calls): the shell may pass 0.0 otherwise and skip its clock read. It
        is returned with the endpoint, its ticket and the routing decision.
        """
        if self.orphans:
            self.release_orphans()
        if self.needs_now:
            self._view.now = now
            deadlines = self._deadlines
            if deadlines and deadlines[0][0] <= now:
                self.handle_timer(now)
            holds = self.answers.holds
            if holds and holds[0][0] <= now:
                self._end_holds(now)
        available = self._fast
        if available:
            member = self._pick(available, self._loads, key)
            choice = self._fast_decision
            if exclude and member.endpoint.id in exclude:
                member, choice = self._pick_excluding(self.router.fast, choice, key, exclude)
        else:
            member, choice = self._route(key, exclude)
        load = self.load
        if load.controlled:
            control = member.control
            if control is not None and (member.inflight >= control.limit or control.thins):
                member, choice = self._admit(member, choice, key, exclude, now)
        ticket = member.fast_ticket  # the hot path: CLOSED (see Circuit.try_acquire)
        if ticket is None:
            circuit = member.circuit
            got = circuit.try_acquire(now)
            if type(got) is not Ticket:
                if choice.mode is not _PANIC:  # available implies accepting; a bug otherwise
                    raise AssertionError(f"{member!r} was available but refused: {got}")
                ticket = PanicTicket(circuit.epoch, probe=False)
            else:
                ticket = got
                if ticket.probe:
                    member.probes = sat_add(member.probes)
                    if not circuit.accepting:
                        self._sync(member)
        n = member.inflight = member.inflight + 1
        if self.stores_loads and member.is_candidate:
            member.loads[member.pos] = n
            if self.totals_loads:
                self._add_load(member, 1)
        return member, ticket, now, choice

    def _route(self, key: Hashable | None, exclude: Collection[str]) -> tuple[Member, Decision]:
        """The routed path: draw a scope by the plan, pick in it, count the decision."""
        router = self.router
        if not router.routes:
            raise self._no_eligible(exclude)
        _, scope, choice, tier = router.choose(int(self._unit() * TRAFFIC_UNITS))
        if scope is None:  # a panicking tier under PanicMode.FAIL_CLOSED
            raise self._no_eligible(exclude, refused=tier.number)
        member = scope.picker.pick(scope.candidates, scope.loads, key)
        if exclude and member.endpoint.id in exclude:
            return self._pick_excluding(scope, choice, key, exclude)
        count_selection(member, choice.mode)
        return member, choice

    def _pick_excluding(
        self, first: Scope | None, choice: Decision, key: Hashable | None, exclude: Collection[str]
    ) -> tuple[Member, Decision]:
        """Pick outside ``exclude``: in ``first`` if it can, else in the next scope by preference."""
        if first is not None:
            member = pick_in(first, key, exclude, self._unit)
            if member is not None:
                count_selection(member, choice.mode)
                return member, choice
        for scope, fallback in self.router.fallback:
            if scope is not first and scope.candidates:
                member = pick_in(scope, key, exclude, self._unit)
                if member is not None:
                    count_selection(member, fallback.mode)
                    return member, fallback
        raise self._no_eligible(exclude)

    # -- load: concurrency limits and slow start --------------------------------------

    def _cap(self, endpoint: Endpoint) -> int:
        """The endpoint's fixed cap: its metadata's ``max_in_flight``, else the balancer's, else none."""
        cap = endpoint.metadata.get(MAX_IN_FLIGHT)
        if cap is None:
            cap = self.load.policy.max_in_flight
        return UNLIMITED if cap is None else int(cap)

    def _keeps(self, member: Member, control: LoadControl, now: float) -> bool:
        """Keep a thinned pick with probability its share: its ramp factor times its quota's share.

        A ramp whose window has passed ends here.
        """
        factor = control.share
        if control.ramp_since is not None:
            ramp = control.factor(now)
            if ramp >= 1.0:
                self._end_ramp(member)
            else:
                factor *= ramp
        if factor >= 1.0:
            return True
        return self._unit() < factor

    def _admit(
        self, member: Member, choice: Decision, key: Hashable | None, exclude: Collection[str], now: float
    ) -> tuple[Member, Decision]:
        """Admit the pick under its limit, slow start and quota share, or pick again among the others.

        An endpoint at its limit is passed over (the call is LIMITED, or :class:`Overloaded`
        when every candidate is at its limit); one in slow start, or whose provider's quota
        is partly spent, is kept with probability its ramp factor times its quota's share,
        so every policy gives it that share of what it would get. Thinning alone never
        refuses a call (the first passed-over pick is the last resort), and a pick thinned by
        its quota alone is taken again in its own tier only: another tier's fallback would
        leave the quota unspent.
        """
        first, first_mode = member, choice.mode
        refused: set[str] = set(exclude)
        thinned: tuple[Member, Decision] | None = None
        full: list[Member] = []
        while True:
            control = member.control
            tier: int | None = None
            if control is not None and member.inflight >= control.limit:
                full.append(member)
            elif control is None or not control.thins or self._keeps(member, control, now):
                break
            else:
                if thinned is None:
                    thinned = (member, choice)
                if control.ramp_since is None:
                    tier = member.endpoint.tier
            refused.add(member.endpoint.id)
            found = self._pick_outside(refused, key, tier)
            if found is None:
                if thinned is not None:
                    member, choice = thinned
                    break
                raise Overloaded(len(full), retry_after=self._overload_retry(full, now))
            member, choice = found
        if member is not first:
            if first_mode is not _HEALTHY:  # the routed path counted the pick it passed over
                count_selection(first, first_mode, -1)
            if full:
                choice = decision(_LIMITED, choice.tier)
            count_selection(member, choice.mode)
        return member, choice

    def _pick_outside(
        self, refused: set[str], key: Hashable | None, tier: int | None = None
    ) -> tuple[Member, Decision] | None:
        """A pick outside ``refused`` (in ``tier`` if given), in the scopes' order of preference, not yet counted."""
        unit = self._unit
        for scope, fallback in self.router.fallback:
            if scope.candidates and (tier is None or scope.tier.number == tier):
                member = pick_in(scope, key, refused, unit)
                if member is not None:
                    return member, fallback
        return None

    def _overload_retry(self, full: list[Member], now: float) -> float | None:
        """When a slot of the endpoints at their limit (``full``) is likely to free, or None if no call was timed.

        Now plus the shortest typical call measured among them: the long-term latency of an
        adaptive limit (Gradient2), else the latency average of a policy that measures one
        (PeakEwma). ``now`` is a real reading whenever either is kept (the pool times its calls).
        """
        if not self.times_calls:
            return None
        shortest: float | None = None
        for member in full:
            control = member.control
            rtt = getattr(None if control is None else control.limiter, "long_rtt", 0.0)
            if not (isinstance(rtt, float) and rtt > 0.0) and member.ewma_at != UNMEASURED:
                rtt = member.ewma
            if isinstance(rtt, float) and rtt > 0.0 and (shortest is None or rtt < shortest):
                shortest = rtt
        return None if shortest is None else now + shortest

    def _ramp(self, member: Member, now: float, shape: RampShape | None = None) -> None:
        """Start ``member``'s slow start now, following ``shape`` (default: the balancer's slow start)."""
        if shape is None:
            shape = self.load.slow_start
            if shape is None:
                return
        if not self.load.controlled:
            self._take_control()  # a recall's ramp with no load knob on: every member gets a control
        control = member.control
        if control is None:
            return
        control.ramp(now, shape)
        self.load.ramping[member] = None
        self.needs_now = True
        self.listener.ramp(member, started=True)

    def _end_ramp(self, member: Member) -> None:
        control = member.control
        if control is not None and control.ramp_since is not None:
            control.ramp(None)
            self.load.ramping.pop(member, None)
            self._reclock()
            self.listener.ramp(member, started=False)

    def ramp_factor(self, member: Member, now: float) -> float:
        """The share of its weight ``member`` gets now: its slow-start factor times its quota's share."""
        control = member.control
        if control is None:
            return 1.0
        return control.factor(now) * control.share

    def _sample(self, member: Member, latency: float, in_flight: int, *, drop: bool) -> None:
        """Feed a completed call to ``member``'s adaptive limit (``drop``: an overload signal); report a move."""
        control = member.control
        if control is None:
            return
        limiter = control.limiter
        if limiter is None:
            return
        before = limiter.limit
        if limiter.sample(latency, in_flight, drop=drop) == before:
            return  # most calls: the endpoint's limit is not recomputed
        changed = control.relimited()
        if changed is not None:
            previous = control.reported
            if abs(changed - previous) >= max(2, previous // 4):  # a step, not every nudge
                control.reported = changed
                self.listener.limit_changed(member, changed, previous)

    def control(self, member: Member) -> LoadControl | None:
        """``member``'s concurrency limit and slow start, or None while no load knob is on."""
        return member.control

    def _no_eligible(self, exclude: Collection[str], *, refused: int | None = None) -> EmptyPool | NoEligibleEndpoints:
        return no_eligible(self.members.values(), exclude, refused)

    def refusal(self, member: Member) -> IneligibleReason | None:
        """Why ``member`` may not take a permit now, or None if it may."""
        return refusal(member)

    # -- completion --------------------------------------------------------------------

    def succeed(self, member: Member, ticket: Ticket, now: float, started: float) -> None:
        """Record a successful call, ``started`` being the time :meth:`select` was given.

        ``now`` is used only if ``member.success_needs_now`` (the success needs the time):
        the shell may pass 0.0 otherwise and skip its clock read.
        """
        n = member.inflight = member.inflight - 1
        if member.is_candidate:
            if self.stores_loads:
                member.loads[member.pos] = n
                if self.totals_loads:
                    self._add_load(member, -1)
        elif not n:
            self.listener.idle(member)  # off the hot path: only endpoints that take no permits
        n = member.successes_low
        if n < 255:
            member.successes_low = n + 1
        else:
            member.carry_success()  # one success in 256 (this inlines member.count_success())
        # The hot path of every call: a CLOSED circuit records it in place.
        if not (member.live and member.record_success(ticket, now, started)):
            self._record(member, ticket, None, now, latency=now - started, retry_after=None)
        elif self._observe is not None:  # a latency observer or limit (_record feeds them on the long way)
            if self.load.adaptive:
                self._observe_adaptive(member, now - started, now)  # a direct call (compiled: native)
            else:
                self._observe(member, now - started, now)

    def _observe_adaptive(self, member: Member, latency: float, now: float) -> None:
        """A CLOSED success's latency, with an adaptive limit on: sample it, then measure it."""
        self._sample(member, latency, member.inflight + 1, drop=False)  # in flight when it completed
        if self._measure is not None:
            self._measure(member, latency, now)

    def complete(
        self,
        member: Member,
        ticket: Ticket,
        fault: Fault | None,
        now: float,
        *,
        latency: float | None = None,
        retry_after: float | None = None,
        overload: bool = False,
    ) -> None:
        """Record a finished call. A returned error is completed work, like a success.

        ``overload``: the failure is load-shaped (a timeout, an overload answer). While
        another endpoint had one within the circuit policy's ``overload_window``, the pool
        is under load and this one is no strike: counted, fed to an adaptive limit, and
        the circuit hears it only as a skip (a Retry-After is still honoured).
        """
        self._release(member)
        if fault is None:
            member.count_success()
        else:
            count_fault(member, fault)
            hold = self.answers.hold
            if hold and fault in _DROPS and member.live and latency is not None and latency < hold:
                self._hold_failure(member, now - latency + hold)
        self._record(member, ticket, fault, now, latency=latency, retry_after=retry_after, overload=overload)

    def _hold_failure(self, member: Member, until: float) -> None:
        """Count a failed call in ``member``'s load until ``until``: its start plus the policy's ``failure_penalty``."""
        held = self._view.held
        held[member] = held.get(member, 0) + 1
        self._seq += 1
        heapq.heappush(self.answers.holds, (until, self._seq, member))
        self.needs_now = True  # the selection that passes its end ends it

    def _end_holds(self, now: float) -> None:
        """End every hold due at ``now`` (nothing for an endpoint that left the pool)."""
        holds = self.answers.holds
        held = self._view.held
        while holds and holds[0][0] <= now:
            member = heapq.heappop(holds)[2]
            n = held.get(member, 0)
            if n > 1:
                held[member] = n - 1
            elif n:
                del held[member]
        if not holds:
            self._reclock()

    def report_load(
        self, member: Member, report: object, now: float, *, utilization: float, qps: float, eps: float
    ) -> None:
        """Keep what ``member``'s backend said about its load at ``now`` (an ORCA report; ``report`` is kept as given).

        ``utilization``: the application utilization if reported, else the CPU utilization.
        A report for an endpoint that left the pool is dropped.
        """
        if not member.live:
            return
        signal = self._signal(member)
        signal.update(
            report,
            now,
            utilization=utilization,
            qps=qps,
            eps=eps,
            error_utilization_penalty=self.answers.error_utilization_penalty,
            weight_expiration_period=self.answers.weight_expiration_period,
        )

    def report_quota(
        self, member: Member, now: float, *, remaining: int | None, resets_in: float | None, share: float = 1.0
    ) -> None:
        """What ``member``'s provider said of its quota at ``now``: ``remaining`` calls left, ``share`` of it.

        With calls left, at most that many are in flight at once (its limit): every answer
        says how many are left after the calls the provider counted, so calls started after
        it cannot overrun the quota; ``remaining`` None says nothing of calls (a tokens-only
        quota) and sets no limit. Either way its effective weight is its weight times
        ``share`` (a pick of it is kept with that probability, else taken again in its
        tier). With none left (0) it rests (QUOTA: no strike, no ejection, no escalation)
        until ``resets_in`` seconds from now (:data:`QUOTA_REST` if not said; at most the
        circuit policy's ``max_retry_after``, as a Retry-After is), then comes back without a
        probe, a quota limit or a reduced share until its provider says more. A report for an
        endpoint that left the pool is dropped.
        """
        if not member.live:
            return
        if not self.load.controlled:
            self._take_control()
        control = member.control
        assert control is not None  # noqa: S101 - taken control of just above
        if remaining is None or remaining > 0:
            control.set_quota(UNLIMITED if remaining is None else remaining)
            control.set_share(share)
            return
        rest = QUOTA_REST if resets_in is None else min(resets_in, self.circuit_policy.max_retry_after)
        until = now + rest
        if self.answers.rests.get(member) == until:
            return
        resting = member in self.answers.rests
        self.answers.rests[member] = until
        control.set_quota(UNLIMITED)  # the rest keeps it out; after the reset its provider says anew
        control.set_share(1.0)
        self._push(until, member, _RESTS)
        self.listener.armed()  # a deadline no transition announced: the timer looks again
        if not resting:
            self._signal(member).quota_rests += 1
            if member.readiness is None:  # the gate readiness checks use; their own reason wins
                member.readiness = _QUOTA
                self._sync(member)

    def _wake(self, member: Member, at: float) -> None:
        """A spent quota reset at ``at``: ``member`` takes calls again (nothing if a later report moved its rest)."""
        if self.answers.rests.get(member) != at:
            return
        del self.answers.rests[member]
        control = member.control
        if control is not None:  # an answer that arrived during the rest is from before the reset
            control.set_quota(UNLIMITED)
            control.set_share(1.0)
        if member.live and member.readiness is _QUOTA:
            member.readiness = None
            self._sync(member)

    def _signal(self, member: Member) -> LoadSignal:
        """``member``'s signal, made at its backend's first word."""
        signals = self._view.signals
        signal = signals.get(member)
        if signal is None:
            signal = signals[member] = LoadSignal()
        return signal

    def signal(self, member: Member) -> LoadSignal | None:
        """What ``member``'s backend said of its load and quota, or None if it said nothing."""
        return self._view.signals.get(member)

    def resting_until(self, member: Member) -> float | None:
        """When ``member``'s spent quota resets, while it rests on it; else None."""
        return self.answers.rests.get(member)

    def held(self, member: Member, now: float) -> int:
        """Failed calls counted in ``member``'s load at ``now`` (the policy's ``failure_penalty``); a pure read."""
        if member not in self._view.held:
            return 0
        return sum(1 for at, _, s in self.answers.holds if s is member and at > now)

    def _record(
        self,
        member: Member,
        ticket: Ticket,
        fault: Fault | None,
        now: float,
        *,
        latency: float | None,
        retry_after: float | None,
        overload: bool = False,
    ) -> None:
        if self.orphans:
            self.release_orphans()
        if latency is not None and self._observe is not None and member.live:
            if self.load.adaptive:  # a completed call; cancellations are never sampled
                self._sample(member, latency, member.inflight + 1, drop=fault in _DROPS)  # in flight when it completed
            if self._measure is not None:
                if fault in _DROPS and latency < self.answers.latency_floor:
                    latency = self.answers.latency_floor  # a failure costs at least the penalty
                self._measure(member, latency, now)
        if type(ticket) is PanicTicket:
            return  # counted on the endpoint; never moves the circuit (see PanicTicket)
        circuit = member.circuit
        if not member.live or ticket.epoch != circuit.epoch:
            member.stale = sat_add(member.stale)
            if not member.live:
                return
        shared = overload and fault is not None and self._loaded(member, now, mark=not ticket.probe)
        before = circuit.suppressed_ejections
        degraded = circuit.degraded
        guard = self.guard
        may_eject = guard.may_eject
        transition = circuit.record(
            ticket,
            fault,
            now,
            latency=latency,
            retry_after=retry_after,
            may_eject=may_eject,
            shared=shared,
            quorum=self._quorum,
            vouch=None if may_eject else functools.partial(rotation_answers, self.members.values(), member, now),
        )
        guard.count_suppressed(before, circuit)
        if transition is not None:
            if transition.target is _OPEN:
                if overload and fault is not None and transition.retry_after is None and self._may_recall(member, now):
                    # Ejected for a load-shaped failure, no Retry-After. From rotation, the
                    # ejection may be undone (restored); after a probe, only recalled.
                    self.load.recallable[member] = now if transition.source is _CLOSED else -math.inf
                else:
                    self.load.recallable.pop(member, None)
            self._moved(member, transition)
        elif circuit.degraded is not degraded:
            self._sync(member)
        elif ticket.probe:
            self._sync(member)
            if ticket.epoch == circuit.epoch:
                self.listener.probe_result(member)
        if shared and self.load.recallable:
            self._recall(member, now, in_rotation=not ticket.probe)

    def _may_recall(self, member: Member, now: float) -> bool:
        """Whether ``member``, ejected for a load-shaped failure, may be recalled now.

        Recalls go on for ``overload_window`` seconds from an endpoint's first recall
        since it last closed: long enough for a backend that answers some of its calls to
        pass a probe, short enough that a dead one (a black hole's timeouts are load-shaped
        too) costs a few probes, not one per sign of load.
        """
        window = self.circuit_policy.overload_window
        first = self.load.recalls.get(member)
        return window is not None and (first is None or now - first < window)

    def _recall(self, by: Member, now: float, *, in_rotation: bool) -> None:
        """The pool shows load: restore or probe at once every endpoint ejected for a load-shaped failure.

        Its open window would keep capacity out of a pool that now needs it. When ``by`` is
        in rotation (not a probe) and failed within ``overload_window`` of an ejection, that
        ejection is undone (``Circuit.restore``, CLOSED at once): its failure was the
        pool's load, judged the endpoint's own only because it came first, as ``by``'s
        would have been had it come first. Otherwise the endpoint is recalled: probed at
        once, which costs it nothing (a failed probe puts its circuit back as it was, see
        ``Circuit.recall``); a load-shaped probe failure makes it recallable again, within
        :meth:`_may_recall`'s limit. A probe's failure restores nothing: an ejected
        endpoint failing is no sign that the ones in rotation are loaded (two black holes
        would restore each other). ``by`` is never recalled by its own failure.
        """
        recallable = self.load.recallable
        window = self.circuit_policy.overload_window
        for other in list(recallable):
            if other is by:
                continue
            ejected_at = recallable.pop(other)
            if not other.live:
                continue
            transition = None
            if in_rotation and window is not None and now - ejected_at <= window:
                transition = other.circuit.restore(now)
            if transition is None and self._may_recall(other, now):
                transition = other.circuit.recall(now)
                if transition is not None:
                    self.load.recalls.setdefault(other, now)
            if transition is not None:
                self._moved(other, transition)

    def _loaded(self, member: Member, now: float, *, mark: bool = True) -> bool:
        """Whether ``member``'s load-shaped failure is the pool's load: another endpoint had one recently.

        With ``mark``, marks ``member`` (the next endpoint to fail this way sees it); not for
        a probe's failure, which reads the marks but leaves none: an ejected endpoint's probe
        timing out is no sign that the ones in rotation are loaded (a dead endpoint's probes
        would shield another dead one still in rotation). Forgets marks older than the
        circuit policy's ``overload_window``; None there: never (every failure is the
        endpoint's own, as before 0.3).
        """
        window = self.circuit_policy.overload_window
        if window is None:
            return False
        marks = self.load.overloaded
        since = now - window
        loaded = False
        stale: list[Member] = []
        for other, at in marks.items():
            if at < since:
                stale.append(other)
            elif other is not member:
                loaded = True
                break
        for other in stale:
            del marks[other]
        if mark:
            marks.pop(member, None)
            marks[member] = now  # latest last: the freshest marks are found last, the stale first
        if loaded:
            self.load.shared_faults = sat_add(self.load.shared_faults)
        return loaded

    def cancel(
        self, member: Member, ticket: Ticket, *, counted: bool = True, mode: DecisionMode = DecisionMode.HEALTHY
    ) -> None:
        """Release a permit that ended without an outcome. No window changes.

        ``counted``: counted as a cancellation. Not for a hedge that lost its race, or a
        permit handed to a waiter that had gone: then no counter remembers the permit, so
        its probe and its selection in ``mode`` (the permit's decision) are taken back too.
        """
        self._release(member)
        if counted:
            member.cancellations = sat_add(member.cancellations)
        else:
            if ticket.probe and member.probes:
                member.probes -= 1
            count_selection(member, mode, -1)
        if member.live:
            circuit = member.circuit
            circuit.cancel(ticket)
            if ticket.probe:
                self._sync(member)
                if ticket.epoch == circuit.epoch:
                    self.listener.probe_result(member)  # a leased slot freed: coordination hands it back

    def release_orphans(self) -> None:
        """Cancel the permits that were garbage-collected without a report."""
        orphans, self.orphans = self.orphans, []
        for member, ticket in orphans:
            self.cancel(member, ticket)

    def _release(self, member: Member) -> None:
        """One permit fewer in flight on ``member``.

        :meth:`succeed`, every call's exit, inlines this: calling it there costs a pure-Python
        RoundRobin call 419 instructions more, 2.9% (``python bench/misses.py --sizes 10``).
        """
        n = member.inflight = member.inflight - 1
        if member.is_candidate:
            if self.stores_loads:
                member.loads[member.pos] = n
                if self.totals_loads:
                    self._add_load(member, -1)
        elif not n:
            self.listener.idle(member)  # off the hot path: only endpoints that take no permits

    def _add_load(self, member: Member, delta: int) -> None:
        """Bounded-load hashing: keep ``member``'s home scope's in-flight total (its loads' sum)."""
        home = member.home
        assert home is not None  # noqa: S101 - every live candidate has a home
        home.load_total += delta

    # -- timers and operators ----------------------------------------------------------

    def next_deadline(self) -> float | None:
        """The earliest time :meth:`handle_timer` has work, or None."""
        deadlines = self._deadlines
        while deadlines:
            at, _, member, epoch = deadlines[0]
            if member is None or (member.live and member.circuit.epoch == epoch):
                return at
            if epoch == _RESTS and self.answers.rests.get(member) == at:
                return at
            heapq.heappop(deadlines)
        self._reclock()
        return None

    def handle_timer(self, now: float) -> None:
        """Half-open circuits whose open window ended, end due quota rests, run due outlier evaluations."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            at, _, member, epoch = heapq.heappop(deadlines)
            if member is None:
                self._evaluate_outliers(now)
            elif epoch == _RESTS:
                self._wake(member, at)
            elif member.live and member.circuit.epoch == epoch:
                transition = member.circuit.handle_timer(now)
                if transition is not None:
                    self._moved(member, transition)
        self._reclock()

    def _reclock(self) -> None:
        """Say whether :meth:`select` needs a real ``now``: timed calls, a pending deadline or hold, or a ramp."""
        load = self.load
        self.needs_now = self.times_calls or bool(self._deadlines) or bool(self.answers.holds) or bool(load.ramping)

    def set_admin(self, endpoint_id: str, status: AdminStatus, now: float = 0.0) -> Member:
        """Set an operator status; raises KeyError for an unknown id.

        With slow start, an endpoint an operator takes back into service (from DRAINING,
        DISABLED or FORCED_UNHEALTHY) ramps up from ``now``.
        """
        member = self.members[endpoint_id]
        back = member.admin not in (_AUTO, _FORCED_HEALTHY) and status in (_AUTO, _FORCED_HEALTHY)
        member.admin = status
        self._sync(member)
        if back and self.load.slow_start is not None:
            self._ramp(member, now)
        return member

    def reset_circuit(self, member: Member, now: float) -> None:
        """Reset one circuit to a fresh CLOSED epoch (operator action, rediscovery)."""
        self._moved(member, member.circuit.reset(now))

    def set_health(self, member: Member, refusal: IneligibleReason | None, now: float = 0.0) -> None:
        """Record active health's verdict for one endpoint (None: it may serve); O(1).

        With slow start, an endpoint active health lets back in ramps up from ``now``.
        """
        if refusal is not member.health_refusal:
            back = refusal is None
            member.health_refusal = refusal
            if member.live:
                self._sync(member)
                if back and self.load.slow_start is not None:
                    self._ramp(member, now)

    def set_readiness(self, member: Member, reason: IneligibleReason | None) -> None:
        """Keep ``member`` out as NOT_READY or QUARANTINED, or (None) let the rest decide; O(1).

        A readiness check passing while its quota rests leaves it out as QUOTA until the reset.
        """
        if reason is None and member in self.answers.rests:
            reason = _QUOTA
        if reason is not member.readiness:
            member.readiness = reason
            if member.live:
                self._sync(member)

    def uneject(self, member: Member, now: float) -> bool:
        """Close a passively ejected circuit after a passing active check; False if not ejected."""
        if not member.live:
            return False
        transition = member.circuit.uneject(now)
        if transition is None:
            return False
        self._moved(member, transition)
        return True

    # -- fleet coordination ------------------------------------------------------------

    def adopt(
        self, member: Member, target: CircuitState, now: float, *, reopen_at: float | None, level: int
    ) -> Transition:
        """Move one circuit to the fleet's shared state (see :meth:`Circuit.adopt`)."""
        transition = member.circuit.adopt(target, now, reopen_at=reopen_at, level=level)
        self._moved(member, transition)
        return transition

    def retime(self, member: Member, reopen_at: float) -> None:
        """Move an OPEN circuit's deadline to the fleet's (see :meth:`Circuit.retime`)."""
        circuit = member.circuit
        if circuit.retime(reopen_at) and not circuit.leased:
            self._arm(member)

    def grant(self, member: Member, slots: int) -> bool:
        """Hand leased probe slots to a HALF_OPEN circuit; False if it is not HALF_OPEN."""
        granted = member.circuit.grant(slots)
        if granted:
            self._sync(member)
        return granted

    def revoke(self, member: Member) -> int:
        """Take back a leased circuit's free probe slots (see :meth:`Circuit.revoke`); how many."""
        taken = member.circuit.revoke()
        if taken:
            self._sync(member)
        return taken

    def excluded(self, member: Member) -> IneligibleReason | None:
        """Why readiness, active health or the operator's status keeps ``member`` out, or None."""
        return gate(member)

    def set_leased(self, member: Member, leased: bool, now: float) -> None:  # noqa: FBT001
        """Enter or leave leased mode; leaving it re-arms the circuit's own OPEN timer."""
        circuit = member.circuit
        transition = circuit.set_leased(leased, now)
        if transition is not None:
            self._moved(member, transition)
            return
        if not leased and circuit.state is _OPEN:
            self._arm(member)
        self._sync(member)

    # -- internals ---------------------------------------------------------------------

    def _push(self, at: float, member: Member | None, epoch: int) -> None:
        """Add a deadline: an OPEN circuit's end, or (``member`` None) an outlier evaluation."""
        self._seq += 1
        heapq.heappush(self._deadlines, (at, self._seq, member, epoch))
        self.needs_now = True

    def _arm(self, member: Member) -> None:
        circuit = member.circuit
        if circuit.reopen_at is not None:
            self._push(circuit.reopen_at, member, circuit.epoch)

    def _moved(self, member: Member, transition: Transition) -> None:
        load = self.load
        recalled = member in load.recalls  # recalled for the pool's load since it was ejected
        if transition.target is not _OPEN and transition.target is not _HALF_OPEN:
            load.recallable.pop(member, None)  # readmitted, blocked or retired: no longer ejected for load
            load.recalls.pop(member, None)
        if transition.target is _OPEN and member in load.ramping:
            self._end_ramp(member)  # ejected again mid-ramp: its next readmission ramps afresh
        if transition.target is _OPEN and transition.reopen_at is not None:
            self._push(transition.reopen_at, member, transition.epoch)
        elif transition.target is _CLOSED and transition.source is not _CLOSED and transition.cause is not _POOL_LOADED:
            # Readmitted after an ejection: ramp back up, with the balancer's slow start, or
            # (none configured) over the overload window after a recall: it was out while
            # the pool was loaded, and its full share at once would overload it again. An
            # ejection undone (POOL_LOADED) was the pool's load, never its own: it takes
            # its share back at once.
            self._ramp(member, transition.at, None if load.slow_start is not None or not recalled else load.recall_ramp)
        self._sync(member)
        self.listener.transition(member, transition)
        if self.guard.next_to_eject() is not None:
            self._promote(transition.at)

    def _schedule_outliers(self, now: float) -> None:
        sampler = self._outliers
        assert sampler is not None  # noqa: S101 - only with success-rate detection
        self._push(now + sampler.config.interval, None, -1)

    def _evaluate_outliers(self, now: float) -> None:
        """Success-rate detection (Envoy's): eject the interval's outliers, worst first.

        As far as ``max_ejection_percent`` allows the outliers are ejected, and the rest
        are degraded.
        """
        sampler = self._outliers
        assert sampler is not None  # noqa: S101 - only with success-rate detection
        guard = self.guard
        for member in sampler.outliers(self.members.values()):
            circuit = member.circuit
            before = circuit.suppressed_ejections
            transition = circuit.trip(Cause.SUCCESS_RATE, now, may_eject=guard.may_eject)
            guard.count_suppressed(before, circuit)
            if transition is not None:
                self._moved(member, transition)
            elif circuit.degraded is not member.was_degraded:
                self._sync(member)
        self._schedule_outliers(now)

    def _promote(self, now: float) -> None:
        """While the guard has room, eject degraded endpoints, longest degraded first."""
        guard = self.guard
        while (member := guard.next_to_eject()) is not None:
            transition = member.circuit.eject_degraded(now)
            if transition is None:  # not CLOSED any more: the pool's view was stale
                self._sync(member)
                continue
            self._moved(member, transition)

    def _sync(self, member: Member) -> None:
        """Bring ``member``'s routing membership in line with its circuit and admin status."""
        self._refresh(member)
        self._replan()

    def _refresh(self, member: Member) -> None:
        circuit = member.circuit
        changed = self.guard.update(member)
        if changed is not None:
            self.listener.degraded(member, changed)
        degraded = circuit.degraded
        admin = member.admin
        home = member.home
        assert home is not None  # noqa: S101 - every live member has a home
        # DRAINING and DISABLED take an endpoint out of its tier's capacity, and out of panic.
        # (Identity tests: hashing an enum member for a set lookup is a Python-level call.)
        counted = admin is not _DRAINING and admin is not _DISABLED
        if counted != member.counted:
            member.counted = counted
            home.capacity += 1 if counted else -1
        available = circuit.accepting and gate(member) is None
        reserve = available and degraded
        if reserve != (member.degraded_pos >= 0):
            if reserve:
                home.tier.degraded.add(member)
            else:
                home.tier.degraded.remove(member)
        available = available and not degraded
        if available != member.is_candidate:
            if available:
                home.add(member)
            else:
                home.remove(member)
        panic = home.tier.panic
        if panic is not None:  # never PERMANENT-blocked, retired, not ready to be called, or out of quota
            cstate = circuit.state
            eligible = counted and cstate is not _BLOCKED and cstate is not _RETIRED and member.readiness is None
            if eligible != (member.panic_pos >= 0):
                if eligible:
                    panic.add(member)
                else:
                    panic.remove(member)

    def _leave(self, gone: list[Member]) -> None:
        """``gone`` (no longer in :attr:`members`) leave every structure of the pool: O(changes + scopes touched)."""
        load = self.load
        view = self._view
        if load.ramping:
            for member in gone:
                if member in load.ramping:
                    self._end_ramp(member)  # SlowStartEnded: it left mid-ramp
        for table in (
            load.ramping,
            load.overloaded,
            load.recallable,
            load.recalls,
            view.held,
            view.signals,
            self.answers.rests,
        ):
            if table:  # most are empty: a large update pays for the ones in use only
                for member in gone:
                    table.pop(member, None)
        self._detach_all(gone)
        guard = self.guard
        for member in gone:
            member.live = False
            if member.was_ejected or member.was_degraded:
                guard.leave(member)
        self.listener.left(gone)

    def _join_fresh(self, fresh: Mapping[str, Member]) -> None:
        """Records :meth:`build` made (by id), untouched since, become members, in one pass per scope.

        Such a record is CLOSED, not degraded, under AUTO and with nothing pending, so
        :meth:`_attach` would make it counted, a candidate of its home and of its tier's
        panic scope, and tell the guard nothing: this does exactly that, a list at a time.
        """
        # (``now`` is not written to the circuits: their close time is read only to decay an
        # escalation level, and a fresh circuit has none.)
        self.members.update(fresh)
        states = list(fresh.values())
        router = self.router
        groups: dict[Scope, list[Member]]
        tiers = {member.endpoint.tier for member in states}
        if len(tiers) == 1 and (tier := router.tier(tiers.pop())).remote is None:
            groups = {tier.local: states}  # one tier, no zones: one home (the common case, a set built in C)
        else:
            homes: dict[tuple[int, str | None], Scope] = {}

            def home_of(member: Member) -> Scope:
                endpoint = member.endpoint
                where = (endpoint.tier, endpoint.zone)
                home = homes.get(where)
                if home is None:
                    home = homes[where] = router.home(endpoint)
                return home

            groups = _grouped(states, home_of)
        for home, group in groups.items():
            loads = home.loads
            for member in group:
                member.home = home
                member.loads = loads
                member.counted = True
            home.join_all(group)
            home.capacity += len(group)
            home.add_all(group)
            panic = home.tier.panic
            if panic is not None:
                panic.join_all(group)
                panic.add_all(group)

    def _detach_all(self, states: list[Member]) -> None:
        """Take ``states`` out of every routing structure, a list per scope (no replan)."""
        homes = {member.home for member in states}  # one home is the common case: a set built in C
        only = homes.pop() if len(homes) == 1 else None
        groups = {only: states} if only is not None else _grouped(states, _home)
        for home, group in groups.items():
            tier = home.tier
            listed: list[Member] = []
            panicked: list[Member] = []
            counted = 0
            for member in group:  # one pass over the records: each is visited once
                if member.is_candidate:
                    listed.append(member)
                if member.degraded_pos >= 0:
                    tier.degraded.remove(member)
                if member.counted:
                    member.counted = False
                    counted += 1
                if member.panic_pos >= 0:
                    panicked.append(member)
            home.remove_all(listed)
            home.capacity -= counted
            home.leave_all(group)
            panic = tier.panic
            if panic is not None:
                panic.remove_all(panicked)
                panic.leave_all(group)
        for tier in dict.fromkeys(home.tier for home in groups):
            self.router.prune(tier)

    def _attach(self, member: Member) -> None:
        """Home a live member in the scope its endpoint belongs to (no replan)."""
        home = self.router.home(member.endpoint)
        member.home = home
        member.loads = home.loads
        home.join(member)
        panic = home.tier.panic
        if panic is not None:
            panic.join(member)
        self._refresh(member)

    def _detach(self, member: Member) -> None:
        """Take a member out of every routing structure (no replan)."""
        self._detach_all([member])

    def _replan(self) -> None:
        router = self.router
        router.replan()
        fast = router.fast
        if fast is None:
            self._fast = None
        else:
            self._fast = fast.candidates
            self._loads = fast.loads
            self._pick = fast.picker.pick
            self._fast_decision = decision(_HEALTHY, fast.tier.number)
        self.listener.replanned()

    @property
    def fast_scope(self) -> list[Member] | None:
        """The hot path's candidates (the scope taking all traffic as HEALTHY), or None.

        None when selections go through the router.
        """
        return self._fast

    @property
    def weight_total(self) -> int:
        """The sum of the live endpoints' weights (checked against overflow on every change)."""
        return self._weight_total

    @property
    def available_count(self) -> int:
        """How many endpoints may take a permit now (degraded ones included)."""
        return sum(tier.healthy + tier.reserve for tier in self.router.order)

    @property
    def degraded_count(self) -> int:
        """How many endpoints are degraded (a trip ``max_ejection_percent`` refused)."""
        return self.guard.degraded_count

    @property
    def may_eject(self) -> bool:
        """Whether ``max_ejection_percent`` allows one more circuit to be ejected now."""
        return self.guard.may_eject

    @property
    def ejected_count(self) -> int:
        """How many circuits are OPEN or HALF_OPEN."""
        return self.guard.ejected_count

    @property
    def suppressed_ejections(self) -> int:
        """Trips ``max_ejection_percent`` refused, pool-wide (saturating)."""
        return self.guard.suppressed


def _grouped(states: list[Member], home_of: Callable[[Member], Scope]) -> dict[Scope, list[Member]]:
    """``states`` by their home scope (``home_of``), each list in their order."""
    groups: dict[Scope, list[Member]] = {}
    for member in states:
        home = home_of(member)
        group = groups.get(home)
        if group is None:
            group = groups[home] = []
        group.append(member)
    return groups


def _home(member: Member) -> Scope:
    home = member.home
    assert home is not None  # noqa: S101 - every live member has a home
    return home


def _no_pick(candidates: list[Member], loads: list[int], key: Hashable | None) -> Member:
    raise AssertionError("the fast path ran with no fast scope")  # pragma: no cover
