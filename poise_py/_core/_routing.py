"""Routing: tiers with overprovisioned spillover, a local-zone preference, panic, decisions.

Theory of operation
-------------------
Every live endpoint is a *member* of one tier (``Endpoint.tier``, 0 first) and, inside
it, of one *home scope*: the tier's local scope, or its remote scope when a local zone
is configured and the endpoint is elsewhere. A scope keeps the list of its members that
may take a permit now (its *candidates*, updated in O(1) by the pool) and a picker of
the balancer's policy over them. With panic configured, each tier also has a *panic
scope* whose candidates are every member panic may use.

A tier's *capacity* counts its members an operator has not taken out (DRAINING and
DISABLED are treated like removal); its *healthy* count is its candidates. Its health
is ``min(100%, overprovisioning_factor x healthy / capacity)`` (Envoy's priority
levels, default factor 1.4, so a tier that is 71.4% healthy still takes all its
traffic). Tiers are filled in order: each takes ``min(its health, what is left)`` of the
traffic and the rest spills to the next. When the health of all tiers together is
under 100%, the shares are scaled up in proportion, so all traffic still goes where
health is. Inside the chosen tier, the local zone scope against the remote one follows
the same rule. Everything is integer arithmetic in millionths of the traffic
(:data:`TRAFFIC_UNITS`), with the factor and threshold as exact ratios, so 10 healthy
of 14 is exactly 100%.

Each tier also has a *degraded scope*: its endpoints whose trip ``max_ejection_percent``
refused (Envoy's degraded hosts). They are reserve capacity: after every tier's healthy
load, each tier's degraded endpoints take ``min(what its healthy ones leave, factor x
degraded / capacity)``, scaled with the rest when the total is under 100%; their picks
are DEGRADED decisions.

Panic is considered only when the tiers' combined health is under 100%: a tier whose
healthy share is then under ``Panic.threshold`` is *panicking*. Traffic assigned to it
goes, under ``PanicMode.USE_ALL``, to its panic scope (ejected and unhealthy endpoints
included; never DRAINING, DISABLED, PERMANENT-blocked, RETIRED or not-ready ones), and under
``PanicMode.FAIL_CLOSED`` is refused. With no health anywhere, USE_ALL sends
everything to the first tier with a panic candidate.

The plan (the cumulative shares of each scope) is recomputed in O(tiers) whenever a
count changes, never on a pick. When it sends all traffic to one home scope with a
HEALTHY decision, the pool's hot path picks from that scope directly.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Collection, Hashable, Sequence
from typing import Protocol, TypeAlias

import attrs

from .._decision import Decision, DecisionMode
from .._endpoint import Endpoint
from .._errors import ConfigError
from .._knobs import check_count, check_number, check_share
from ._pickers import Picker, PoolView, ratio
from ._record import Member
from ._selection import Policy

TRAFFIC_UNITS = 1_000_000
"""Shares are integers in millionths of the traffic."""

MAX_TOTAL_WEIGHT = 2**53
"""The largest allowed sum of the pool's weights: weighted draws stay exact below it."""


class PanicHook(Protocol):
    """Called when a tier starts (``started=True``) or stops panicking."""

    def __call__(self, tier: int, *, started: bool, healthy_share: float) -> None:
        """Report the change for ``tier``, with its healthy share (healthy / capacity) now."""


class PanicMode(enum.Enum):
    """What a panicking scope does with the traffic routed to it."""

    USE_ALL = "use_all"
    """Broaden eligibility to the scope's ejected and unhealthy endpoints."""
    FAIL_CLOSED = "fail_closed"
    """Refuse: ``acquire`` raises :class:`NoEligibleEndpoints` (reason PANIC)."""


@attrs.frozen(kw_only=True)
class Panic:
    """Opt-in panic routing: ``LoadBalancer(panic=Panic(threshold=0.5, mode=PanicMode.USE_ALL))``.

    Off by default: the commonest pool is one dependency behind a breaker, and there an
    always-on panic (Envoy's default) would send every call to the endpoint whose
    circuit just opened. Panic is only considered when the tiers' combined health is
    under 100%.

    Attributes:
        threshold: a tier panics when its healthy share is under this fraction, in (0, 1].
        mode: :attr:`PanicMode.USE_ALL` or :attr:`PanicMode.FAIL_CLOSED`.
    """

    threshold: float = attrs.field(default=0.5)
    mode: PanicMode = attrs.field(default=PanicMode.USE_ALL)

    @threshold.validator
    def _check_threshold(self, attribute: object, value: float) -> None:
        check_share("Panic.threshold", value, low_open=True)

    @mode.validator
    def _check_mode(self, attribute: object, value: PanicMode) -> None:
        if not isinstance(value, PanicMode):
            raise ConfigError("Panic.mode", f"must be a PanicMode, got {value!r}")


@attrs.frozen(kw_only=True)
class Routing:
    """Tier and zone routing knobs: ``LoadBalancer(routing=Routing(...))``.

    Attributes:
        overprovisioning_factor: a tier (or the local zone) keeps all its traffic while
            ``healthy share x factor >= 100%``; below that the remainder spills to the
            next tier (or the other zones) in proportion. Envoy's 1.4 by default; 1.0
            spills as soon as one endpoint is unhealthy.
        local_zone: prefer endpoints whose ``Endpoint.zone`` equals this, within each
            tier, with the same spill rule; None (default) ignores zones.
        max_total_weight: the largest sum of weights the pool may hold; a discovery
            update past it is refused with :class:`ConfigError` (checked, never wraps).
    """

    overprovisioning_factor: float = attrs.field(default=1.4)
    local_zone: str | None = attrs.field(default=None)
    max_total_weight: int = attrs.field(default=MAX_TOTAL_WEIGHT)

    @overprovisioning_factor.validator
    def _check_factor(self, attribute: object, value: float) -> None:
        check_number("Routing.overprovisioning_factor", value, low=1.0, high=100.0)

    @local_zone.validator
    def _check_zone(self, attribute: object, value: str | None) -> None:
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError("Routing.local_zone", f"must be a non-empty string or None, got {value!r}")

    @max_total_weight.validator
    def _check_max_weight(self, attribute: object, value: int) -> None:
        check_count("Routing.max_total_weight", value, maximum=MAX_TOTAL_WEIGHT)


_DECISIONS: dict[tuple[DecisionMode, int], Decision] = {}


def decision(mode: DecisionMode, tier: int) -> Decision:
    """The interned :class:`Decision` for ``(mode, tier)``: issuing one allocates nothing."""
    found = _DECISIONS.get((mode, tier))
    if found is None:
        found = _DECISIONS[mode, tier] = Decision(mode, tier)
    return found


_HEALTHY = DecisionMode.HEALTHY
_SPILLOVER = DecisionMode.SPILLOVER
_PANIC = DecisionMode.PANIC
_DEGRADED = DecisionMode.DEGRADED


Hook: TypeAlias = "Callable[[list[Member]], None]"
"""A picker's hook (``added``, ``removed``, ``joined``, ``left``): the endpoints concerned."""

BULK_SHARE = 8
"""A removal of at least one in this many of a scope's candidates is done in one pass."""


class Scope:
    """Candidates of one part of one tier, with a picker over them.

    Attributes:
        tier: the tier this scope belongs to.
        candidates: the members that may take a permit now; ``candidates[s.pos] is s``.
        loads: ``loads[i] == candidates[i].inflight``, stored by the pool's hot path when
            the policy reads loads (``Pool.stores_loads``) in a scope that is
            :attr:`tracked` (a home scope; a panic or degraded scope leaves it empty, and
            its pickers read the states).
        load_total: ``sum(loads)`` in a scope that :attr:`totals` (bounded-load hashing),
            kept by the pool's hot path and by :meth:`add` and :meth:`remove`.
        members: how many live endpoints are homed here.
        capacity: how many of them an operator has not taken out (DRAINING, DISABLED).
    """

    # Declared types (for type checkers and the public type surface); values are set in __init__.
    tier: Tier
    local: bool
    candidates: list[Member]
    loads: list[int]
    load_total: int
    totals: bool
    members: int
    capacity: int
    view: PoolView
    picker: Picker

    __slots__ = (
        "_added",
        "_joined",
        "_left",
        "_removed",
        "candidates",
        "capacity",
        "load_total",
        "loads",
        "local",
        "members",
        "picker",
        "tier",
        "totals",
        "view",
    )

    tracked = True
    """Whether :attr:`loads` mirrors the candidates' in-flight counts (home scopes)."""
    panic = False
    """Whether this is a tier's panic scope (its positions are ``member.panic_pos``)."""
    degraded = False
    """Whether this is a tier's degraded scope (its positions are ``member.degraded_pos``)."""

    def __init__(self, tier: Tier, policy: Policy, rng: random.Random, view: PoolView, *, local: bool) -> None:
        self.tier = tier
        self.local = local
        self.candidates = []
        self.loads = []
        self.load_total = 0
        self.totals = self.tracked and bool(getattr(policy, "tracks_load", False))
        """Whether :attr:`load_total` is kept (a home scope of a policy that ``tracks_load``)."""
        self.members = 0
        self.capacity = 0
        self.view = view
        picker = policy.bind(rng)
        self.picker = picker
        attach: Callable[[Scope], None] | None = getattr(picker, "attach", None)
        if attach is not None:
            attach(self)
        # The picker's optional hooks, each told of a list of endpoints (one, or a large
        # update's worth) after the scope has changed.
        self._added: Hook | None = getattr(picker, "added", None)
        self._removed: Hook | None = getattr(picker, "removed", None)
        self._joined: Hook | None = getattr(picker, "joined", None)
        self._left: Hook | None = getattr(picker, "left", None)

    def __repr__(self) -> str:
        side = "local" if self.local else "remote"
        return f"<Scope tier={self.tier.number} {side} {len(self.candidates)}/{self.members}>"

    def add(self, member: Member) -> None:
        """Make ``member`` a candidate (it must not be one)."""
        member.pos = len(self.candidates)
        member.is_candidate = True
        self.candidates.append(member)
        load = member.inflight
        self.loads.append(load)
        if self.totals:
            self.load_total += load
        if self._added is not None:
            self._added([member])

    def remove(self, member: Member) -> None:
        """Stop ``member`` being a candidate (it must be one): swap with the last, O(1)."""
        pos = member.pos
        candidates = self.candidates
        loads = self.loads
        if self.totals:
            self.load_total -= loads[pos]
        last = candidates.pop()
        last_load = loads.pop()
        if last is not member:
            candidates[pos] = last
            loads[pos] = last_load
            last.pos = pos
        member.pos = -1
        member.is_candidate = False
        if self._removed is not None:
            self._removed([member])

    def add_all(self, states: list[Member]) -> None:
        """:meth:`add` each of ``states`` (none a candidate), in one pass: O(len(states))."""
        candidates = self.candidates
        pos = len(candidates)
        for member in states:
            member.pos = pos
            member.is_candidate = True
            pos += 1
        candidates.extend(states)
        loads = [member.inflight for member in states]
        self.loads.extend(loads)
        if self.totals:
            self.load_total += sum(loads)
        if self._added is not None:
            self._added(states)

    def remove_all(self, states: list[Member]) -> None:
        """:meth:`remove` each of ``states`` (each a candidate).

        A few at a time (O(1) each); from :data:`BULK_SHARE` of the candidates on, in one
        pass that keeps the survivors in their order: O(candidates), one loop in C for
        the lists and one in Python for the survivors' positions, instead of a call per
        removal (a large discovery update's commit).
        """
        candidates = self.candidates
        if len(states) * BULK_SHARE < len(candidates):
            for member in states:
                self.remove(member)
            return
        loads = self.loads
        if self.totals:
            self.load_total -= sum([loads[member.pos] for member in states])
        for member in states:
            member.is_candidate = False
            member.pos = -1
        kept = [member for member in candidates if member.is_candidate]
        loads[:] = [loads[member.pos] for member in kept]
        candidates[:] = kept  # in place: the pool's hot path and the picker hold these lists
        for pos, member in enumerate(kept):
            member.pos = pos
        if self._removed is not None:
            self._removed(states)

    def join(self, member: Member) -> None:
        """``member`` is now homed here."""
        self.join_all([member])

    def join_all(self, states: list[Member]) -> None:
        """:meth:`join` each of ``states``."""
        self.members += len(states)
        if self._joined is not None:
            self._joined(states)

    def leave(self, member: Member) -> None:
        """``member`` is no longer homed here."""
        self.leave_all([member])

    def leave_all(self, states: list[Member]) -> None:
        """:meth:`leave` each of ``states``."""
        self.members -= len(states)
        if self._left is not None:
            self._left(states)


class PanicScope(Scope):
    """A tier's panic set: every member panic may use, by ``member.panic_pos``."""

    __slots__ = ()

    panic = True
    tracked = False

    def __repr__(self) -> str:
        return f"<PanicScope tier={self.tier.number} {len(self.candidates)}/{self.members}>"

    def add(self, member: Member) -> None:
        """Make ``member`` a panic candidate."""
        member.panic_pos = len(self.candidates)
        self.candidates.append(member)
        if self._added is not None:
            self._added([member])

    def remove(self, member: Member) -> None:
        """Stop ``member`` being a panic candidate."""
        pos = member.panic_pos
        candidates = self.candidates
        last = candidates.pop()
        if last is not member:
            candidates[pos] = last
            last.panic_pos = pos
        member.panic_pos = -1
        if self._removed is not None:
            self._removed([member])

    def add_all(self, states: list[Member]) -> None:
        """:meth:`add` each of ``states`` (none a panic candidate), in one pass."""
        candidates = self.candidates
        pos = len(candidates)
        for member in states:
            member.panic_pos = pos
            pos += 1
        candidates.extend(states)
        if self._added is not None:
            self._added(states)

    def remove_all(self, states: list[Member]) -> None:
        """:meth:`remove` each of ``states`` (panic candidates); in one pass when many (:meth:`Scope.remove_all`)."""
        candidates = self.candidates
        if len(states) * BULK_SHARE < len(candidates):
            for member in states:
                self.remove(member)
            return
        for member in states:
            member.panic_pos = -1
        kept = [member for member in candidates if member.panic_pos >= 0]
        candidates[:] = kept
        for pos, member in enumerate(kept):
            member.panic_pos = pos
        if self._removed is not None:
            self._removed(states)


class DegradedScope(Scope):
    """A tier's degraded endpoints, by ``member.degraded_pos``: reserve capacity.

    Its members are exactly its candidates (an endpoint joins when it is degraded and
    could take a permit, and leaves when either stops), so a hash table over them holds
    only degraded endpoints.
    """

    __slots__ = ()

    capacity: int  # declared again: pyright infers nothing for a slot a subclass assigns
    degraded = True
    tracked = False

    def __repr__(self) -> str:
        return f"<DegradedScope tier={self.tier.number} {len(self.candidates)}>"

    def add(self, member: Member) -> None:
        """Make ``member`` a degraded candidate (and member)."""
        self.join(member)
        self.capacity += 1
        member.degraded_pos = len(self.candidates)
        self.candidates.append(member)
        if self._added is not None:
            self._added([member])

    def add_all(self, states: list[Member]) -> None:
        """:meth:`add` each of ``states`` (its positions are ``degraded_pos``, not the home scope's)."""
        for member in states:
            self.add(member)

    def remove_all(self, states: list[Member]) -> None:
        """:meth:`remove` each of ``states``."""
        for member in states:
            self.remove(member)

    def remove(self, member: Member) -> None:
        """Stop ``member`` being a degraded candidate (and member)."""
        pos = member.degraded_pos
        candidates = self.candidates
        last = candidates.pop()
        if last is not member:
            candidates[pos] = last
            last.degraded_pos = pos
        member.degraded_pos = -1
        if self._removed is not None:
            self._removed([member])
        self.capacity -= 1
        self.leave(member)


class Tier:
    """One priority level: its home scopes (local, and remote with a zone preference) and panic scope."""

    # Declared types (for type checkers and the public type surface); values are set in __init__.
    number: int
    local: Scope
    remote: Scope | None
    panic: PanicScope | None
    degraded: DegradedScope
    panicking: bool

    __slots__ = ("degraded", "local", "number", "panic", "panicking", "remote")

    def __init__(
        self,
        number: int,
        policy: Policy,
        rng: random.Random,
        view: PoolView,
        *,
        zoned: bool,
        panic: bool,
    ) -> None:
        self.number = number
        self.local = Scope(self, policy, rng, view, local=True)
        self.remote = Scope(self, policy, rng, view, local=False) if zoned else None
        self.panic = PanicScope(self, policy, rng, view, local=True) if panic else None
        self.degraded = DegradedScope(self, policy, rng, view, local=True)
        self.panicking = False

    def __repr__(self) -> str:
        return f"<Tier {self.number} healthy={self.healthy}/{self.capacity} members={self.members}>"

    def scopes(self) -> tuple[Scope, ...]:
        """The home scopes, local first."""
        return (self.local,) if self.remote is None else (self.local, self.remote)

    @property
    def healthy(self) -> int:
        """Candidates across the home scopes."""
        remote = self.remote
        return len(self.local.candidates) + (len(remote.candidates) if remote is not None else 0)

    @property
    def reserve(self) -> int:
        """Degraded candidates: endpoints used only when healthy capacity is short."""
        return len(self.degraded.candidates)

    @property
    def capacity(self) -> int:
        """Members not taken out by an operator."""
        remote = self.remote
        return self.local.capacity + (remote.capacity if remote is not None else 0)

    @property
    def members(self) -> int:
        """Live endpoints homed in this tier."""
        remote = self.remote
        return self.local.members + (remote.members if remote is not None else 0)


def health(healthy: int, capacity: int, factor: tuple[int, int]) -> int:
    """``min(100%, factor x healthy / capacity)`` in traffic units (0 for no capacity)."""
    if not capacity:
        return 0
    num, den = factor
    return min(TRAFFIC_UNITS, TRAFFIC_UNITS * healthy * num // (capacity * den))


def distribute(healths: Sequence[int]) -> list[int]:
    """Envoy's priority load: each level takes ``min(health, rest)``, scaled when health is short.

    Returns each level's share in traffic units; they sum to :data:`TRAFFIC_UNITS`, or
    are all 0 when no level has health. The rounding remainder goes to the first level
    with health.
    """
    total = min(TRAFFIC_UNITS, sum(healths))
    if not total:
        return [0] * len(healths)
    shares = []
    rest = TRAFFIC_UNITS
    for h in healths:
        share = min(rest, h * TRAFFIC_UNITS // total)
        shares.append(share)
        rest -= share
    if rest:
        for i, h in enumerate(healths):
            if h:
                shares[i] += rest
                break
    return shares


Route: TypeAlias = tuple[int, Scope | None, Decision, Tier]
"""``(cumulative share, scope or None to refuse, decision, tier)``."""


class Router:
    """The tiers of one pool and the plan that routes between them."""

    def __init__(
        self,
        policy: Policy,
        rng: random.Random,
        *,
        view: PoolView,
        routing: Routing,
        panic: Panic | None,
        on_panic: PanicHook,
    ) -> None:
        self._policy = policy
        self._rng = rng
        self._view = view
        self.routing = routing
        self.panic = panic
        self.on_panic = on_panic
        self._factor = ratio(routing.overprovisioning_factor)
        self._threshold = ratio(panic.threshold) if panic is not None else (0, 1)
        self._use_all = panic is not None and panic.mode is PanicMode.USE_ALL
        self._zone = routing.local_zone
        self.tiers: dict[int, Tier] = {}
        self.order: list[Tier] = []
        """Tiers with members, lowest number first."""
        self.routes: list[Route] = []
        self.fallback: list[tuple[Scope, Decision]] = []
        """Every scope a call may go to, in preference order (for exclusions)."""
        self.shares: dict[int, int] = {}
        """Each tier's share of the traffic, in traffic units."""
        self.fast: Scope | None = None
        """The one home scope that gets all traffic as HEALTHY, if there is one."""

    # -- homes -------------------------------------------------------------------------

    def tier(self, number: int) -> Tier:
        """The tier ``number``, created if new."""
        tier = self.tiers.get(number)
        if tier is None:
            tier = self.tiers[number] = Tier(
                number,
                self._policy,
                self._rng,
                self._view,
                zoned=self._zone is not None,
                panic=self.panic is not None,
            )
            self.order.append(tier)
            self.order.sort(key=lambda t: t.number)
        return tier

    def home(self, endpoint: Endpoint) -> Scope:
        """The scope ``endpoint`` belongs in."""
        tier = self.tier(endpoint.tier)
        if tier.remote is None or endpoint.zone == self._zone:
            return tier.local
        return tier.remote

    def prune(self, tier: Tier) -> None:
        """Forget ``tier`` if it has no members left."""
        if tier.members == 0 and self.tiers.get(tier.number) is tier:
            del self.tiers[tier.number]
            self.order.remove(tier)
            if tier.panicking:
                tier.panicking = False
                self.on_panic(tier.number, started=False, healthy_share=0.0)

    # -- the plan ----------------------------------------------------------------------

    def replan(self) -> None:
        """Recompute shares, panic flags, routes and the fast scope: O(tiers)."""
        order = self.order
        factor = self._factor
        preferred: Tier | None = None
        healths = []
        reserves = []
        for tier in order:
            capacity = tier.capacity
            if preferred is None and capacity:
                preferred = tier
            h = health(tier.healthy, capacity, factor)
            healths.append(h)
            # Envoy's degraded load: what the tier's healthy endpoints leave, up to the
            # degraded endpoints' own (overprovisioned) health, after every tier's
            # healthy load.
            reserve = tier.reserve
            reserves.append(min(TRAFFIC_UNITS - h, health(reserve, capacity, factor)) if reserve else 0)
        n = len(order)
        if any(reserves):
            levels = distribute(healths + reserves)
            shares, degraded = levels[:n], levels[n:]
        else:
            shares, degraded = distribute(healths), reserves
        combined = min(TRAFFIC_UNITS, sum(healths) + sum(reserves))
        self._flag_panic(combined)
        routes: list[Route] = []
        self.shares = {tier.number: share + extra for tier, share, extra in zip(order, shares, degraded, strict=True)}
        if not combined:
            if self._use_all:
                for tier in order:
                    if tier.panic is not None and tier.panic.candidates:
                        routes.append((TRAFFIC_UNITS, tier.panic, decision(_PANIC, tier.number), tier))
                        self.shares[tier.number] = TRAFFIC_UNITS
                        break
        else:
            cum = 0
            for tier, share in zip(order, shares, strict=True):
                if not share:
                    continue
                if tier.panicking:
                    cum += share
                    target = tier.panic if self._use_all else None
                    routes.append((cum, target, decision(_PANIC, tier.number), tier))
                    continue
                for part, scope in self._split(tier, share):
                    cum += part
                    routes.append((cum, scope, self._decision(tier, scope, preferred), tier))
            for tier, share in zip(order, degraded, strict=True):
                if share and not tier.panicking:
                    cum += share
                    routes.append((cum, tier.degraded, decision(_DEGRADED, tier.number), tier))
                elif share:  # a panicking tier's reserve goes where the tier's traffic goes
                    cum += share
                    routes.append((cum, tier.panic if self._use_all else None, decision(_PANIC, tier.number), tier))
        self.routes = routes
        only = routes[0] if len(routes) == 1 else None
        self.fast = only[1] if only is not None and only[2].mode is _HEALTHY and type(only[1]) is Scope else None
        self.fallback = self._fallback(preferred)

    def _flag_panic(self, combined: int) -> None:
        panic = self.panic
        num, den = self._threshold
        for tier in self.order:
            capacity = tier.capacity
            flag = (
                panic is not None
                and combined < TRAFFIC_UNITS
                and capacity > 0
                and (tier.healthy + tier.reserve) * den < num * capacity
            )
            if flag != tier.panicking:
                tier.panicking = flag
                share = (tier.healthy + tier.reserve) / capacity if capacity else 0.0
                self.on_panic(tier.number, started=flag, healthy_share=share)

    def _split(self, tier: Tier, share: int) -> list[tuple[int, Scope]]:
        """The tier's share between its local and remote scopes (same spill rule)."""
        local, remote = tier.local, tier.remote
        if remote is None or not remote.candidates:
            return [(share, local)]
        if not local.candidates:
            return [(share, remote)]
        factor = self._factor
        zone = distribute(
            [
                health(len(local.candidates), local.capacity, factor),
                health(len(remote.candidates), remote.capacity, factor),
            ]
        )
        near = share * zone[0] // TRAFFIC_UNITS
        return [(near, local), (share - near, remote)] if near < share else [(share, local)]

    @staticmethod
    def _decision(tier: Tier, scope: Scope, preferred: Tier | None) -> Decision:
        spill = tier is not preferred or (not scope.local and tier.local.capacity > 0)
        return decision(_SPILLOVER if spill else _HEALTHY, tier.number)

    def _fallback(self, preferred: Tier | None) -> list[tuple[Scope, Decision]]:
        order: list[tuple[Scope, Decision]] = []
        for tier in self.order:
            if tier.panicking:
                if self._use_all and tier.panic is not None:
                    order.append((tier.panic, decision(_PANIC, tier.number)))
                continue
            order.extend((scope, self._decision(tier, scope, preferred)) for scope in tier.scopes())
        order.extend((tier.degraded, decision(_DEGRADED, tier.number)) for tier in self.order if not tier.panicking)
        return order

    def choose(self, u: int) -> Route:
        """The route for a uniform draw ``u`` in ``[0, TRAFFIC_UNITS)`` (routes must exist)."""
        routes = self.routes
        for route in routes:
            if u < route[0]:
                return route
        return routes[-1]


def pick_in(scope: Scope, key: Hashable | None, exclude: Collection[str], unit: Callable[[], float]) -> Member | None:
    """Pick in ``scope`` outside ``exclude``, or None if every candidate is excluded.

    A picker with its own ``pick_excluding`` is asked directly; otherwise the policy
    draws a few times, then (rarely) a weighted random draw over the rest decides.
    """
    candidates = scope.candidates
    picker = scope.picker
    native = getattr(picker, "pick_excluding", None)
    if native is not None:
        found: Member | None = native(candidates, scope.loads, key, exclude)
        return found
    pick = picker.pick
    loads = scope.loads
    for _ in range(2 * len(exclude) + 2):
        member = pick(candidates, loads, key)
        if member.endpoint.id not in exclude:
            return member
    rest = [s for s in candidates if s.endpoint.id not in exclude]
    if not rest:
        return None
    # Rare: the policy kept drawing excluded endpoints. Weighted random over the rest.
    target = int(unit() * sum(s.endpoint.weight for s in rest))
    for member in rest:
        target -= member.endpoint.weight
        if target < 0:
            return member
    return rest[-1]
