"""Selection policies: pick one endpoint from a scope's eligible candidates.

A public policy is a frozen configuration; :meth:`Policy.bind` gives the stateful picker
one scope of one balancer uses (a balancer has a scope per tier, per zone side, and per
panic set), with the balancer's seeded rng injected so every pick is reproducible.

Every pick is O(1), O(log k) in the number of distinct weights, or (weighted least
request only) O(log n). Policies that need a structure over the candidates keep
it in step with the candidate list through optional hooks, called by the scope after
each change, so a pick never scans:

* ``added(state, pos)``: ``state`` was appended at ``pos``;
* ``removed(state, pos, moved)``: ``state`` left ``pos``; ``moved`` (the former last
  entry, or None if ``state`` was last) now sits at ``pos``;
* ``joined(state)`` / ``left(state)``: the scope's *membership* (every live endpoint homed
  there, eligible or not) changed; only consistent hashing builds on it;
* ``attach(scope)``: called once with the scope the picker serves (its ``instant``, the
  pool's latest clock reading, and whether it is a panic or a degraded scope).

| policy | pick | structure | weights |
|---|---|---|---|
| :class:`RoundRobin` | O(1) | none | ignored |
| :class:`Random` | O(1) | none | ignored |
| :class:`WeightedRandom` | O(1) expected | weight-class buckets | shares |
| :class:`WeightedRoundRobin` | O(log k), k distinct weights | EDF heap of weight classes | shares, evenly spread |
| :class:`PowerOfTwoChoices` | O(1); O(log n) weighted | EDF heap | Envoy least-request |
| :class:`PeakEwma` | O(1) | none | ignored (latency decides) |
| :class:`ConsistentHash` | O(1) expected | Maglev table | slot shares |
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Hashable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar, Protocol, SupportsIndex, TypeAlias

import attrs

from .._errors import CapacityOverflow, ConfigError
from .._knobs import check_count, check_number
from ._maglev import MaglevTable, is_prime, key_hash
from ._weights import STRIDE_SCALE, PackedSchedule, WeightBuckets, WeightClasses

if TYPE_CHECKING:
    from ._record import EndpointState
    from ._routing import Scope


class Loads(Protocol):
    """``loads[i]`` is ``candidates[i].inflight`` (a compact copy, so load-aware picks stay in cache)."""

    def __getitem__(self, index: int, /) -> int: ...

    def __len__(self) -> int: ...


class TotalingLoads(list[int]):
    """A scope's loads that also keep their sum, for bounded-load hashing's mean load.

    Only scopes whose policy ``tracks_load`` use it, so the other policies' hot path
    stores into a plain list.
    """

    __slots__ = ("total",)

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __setitem__(self, index: int, value: int) -> None:  # type: ignore[override]
        self.total += value - list.__getitem__(self, index)
        list.__setitem__(self, index, value)

    def append(self, value: int) -> None:
        """Append, adding to the total."""
        self.total += value
        list.append(self, value)

    def pop(self, index: SupportsIndex = -1) -> int:
        """Pop, subtracting from the total."""
        value = list.pop(self, index)
        self.total -= value
        return value


class Instant:
    """The pool's latest clock reading, shared with pickers that weigh time (:class:`PeakEwma`)."""

    value: float

    __slots__ = ("value",)

    def __init__(self, value: float = 0.0) -> None:
        self.value = value


PickFn: TypeAlias = "Callable[[Sequence[EndpointState], Loads, Hashable | None], EndpointState]"
"""A picker's ``pick``."""


class Picker(Protocol):
    """Picks among candidates; one per scope, holds the policy's running state."""

    def pick(self, candidates: Sequence[EndpointState], loads: Loads, key: Hashable | None) -> EndpointState:
        """Return one of ``candidates`` (never empty)."""


class Policy(Protocol):
    """A selection policy's configuration.

    Optional attributes a policy may define: ``measures_latency`` (the pool reads the
    clock on every pick and completion, keeps it in the scopes' :class:`Instant`, and
    calls ``observe(state, latency, now)`` on the policy when a call completes),
    ``tracks_load`` (scopes keep :class:`TotalingLoads`) and ``reads_loads`` (default
    True; False tells the pool its picks never read ``loads``, so the hot path need not
    keep them current).
    """

    def bind(self, rng: random.Random) -> Picker:
        """Return a fresh picker using ``rng``."""


def _two(unit: Callable[[], float], n: int) -> tuple[int, int]:
    """Two distinct uniform indices below ``n`` (``n >= 2``)."""
    i = int(unit() * n)
    j = int(unit() * (n - 1))
    if j >= i:
        j += 1
    return i, j


# -- round robin and random ----------------------------------------------------------------


@attrs.frozen
class RoundRobin:
    """Cycle through the eligible endpoints in turn. O(1); weights are ignored."""

    reads_loads: ClassVar[bool] = False

    def bind(self, rng: random.Random) -> Picker:
        """Return a round-robin picker (starting at a random offset)."""
        return _RoundRobinPicker(rng.randrange(1 << 30))


class _RoundRobinPicker:
    __slots__ = ("_next",)

    def __init__(self, start: int) -> None:
        self._next = start

    def pick(self, candidates: Sequence[EndpointState], loads: Loads, key: Hashable | None) -> EndpointState:
        i = self._next
        self._next = i + 1 if i < (1 << 62) else 0
        return candidates[i % len(candidates)]


@attrs.frozen
class Random:
    """Pick uniformly at random. O(1); weights are ignored."""

    reads_loads: ClassVar[bool] = False

    def bind(self, rng: random.Random) -> Picker:
        """Return a uniform random picker."""
        return _RandomPicker(rng.random)


class _RandomPicker:
    __slots__ = ("_unit",)

    def __init__(self, unit: Callable[[], float]) -> None:
        self._unit = unit

    def pick(self, candidates: Sequence[EndpointState], loads: Loads, key: Hashable | None) -> EndpointState:
        return candidates[int(self._unit() * len(candidates))]


# -- weighted --------------------------------------------------------------------------------


@attrs.frozen
class WeightedRandom:
    """Pick at random in proportion to ``Endpoint.weight``.

    Endpoints are grouped by weight class (powers of two) as they come and go; a pick
    draws a class by its total weight, then a member of it with rejection, so it is O(1)
    expected (under two draws on average), exact, and independent of the pool size.
    Use it for stateless weighted spreading (no rotation to keep in step across
    processes).
    """

    reads_loads: ClassVar[bool] = False

    def bind(self, rng: random.Random) -> Picker:
        """Return a weighted random picker."""
        return _WeightedRandomPicker(rng.random)


class _WeightedRandomPicker:
    __slots__ = ("_unit", "buckets")

    def __init__(self, unit: Callable[[], float]) -> None:
        self._unit = unit
        self.buckets = WeightBuckets()

    def added(self, state: EndpointState, pos: int) -> None:
        self.buckets.add(state, state.endpoint.weight)

    def removed(self, state: EndpointState, pos: int, moved: EndpointState | None) -> None:
        self.buckets.remove(state, state.endpoint.weight)

    def pick(self, candidates: Sequence[EndpointState], loads: Loads, key: Hashable | None) -> EndpointState:
        return self.buckets.draw(self._unit)


@attrs.frozen
class WeightedRoundRobin:
    """Rotate through the endpoints in proportion to ``Endpoint.weight``, smoothly.

    Smooth in nginx's sense: an endpoint's turns are spread over the rotation, never in
    a burst (weights 5, 1, 1 give ``a b a a a c a``, not ``a a a a a b c``). It is
    realised as Envoy's earliest-deadline-first schedule with integer deadlines and
    golden-ratio start phases, over weight classes: the endpoints of one weight share
    one schedule entry and take its turns in rotation, so a pick is O(log k) for ``k``
    distinct weights, independent of the number of endpoints (nginx scans all of
    them). Over every ``sum(weights)`` picks of a fixed set each endpoint gets exactly
    its weight, and at any point each count is within two of its exact share.
    """

    reads_loads: ClassVar[bool] = False

    def bind(self, rng: random.Random) -> Picker:
        """Return a smooth weighted round-robin picker."""
        return _WeightedRoundRobinPicker()


class _WeightedRoundRobinPicker:
    __slots__ = ("schedule",)

    def __init__(self) -> None:
        self.schedule = WeightClasses()

    def added(self, state: EndpointState, pos: int) -> None:
        self.schedule.add(state, state.endpoint.weight)

    def removed(self, state: EndpointState, pos: int, moved: EndpointState | None) -> None:
        self.schedule.remove(state, state.endpoint.weight)

    def pick(self, candidates: Sequence[EndpointState], loads: Loads, key: Hashable | None) -> EndpointState:
        return self.schedule.next()


# -- load aware ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class PowerOfTwoChoices:
    """Least in-flight of two random endpoints; with unequal weights, Envoy's least-request.

    Equal weights (the default): draw two endpoints at random and use the one with
    fewer permits in flight, ties to the first draw. The least-loaded of two random
    choices balances exponentially better than one random choice at O(1) cost
    (Mitzenmacher). Unequal weights among the scope's endpoints (healthy or not, so the
    mode never flips with health): Envoy's weighted least-request,
    an earliest-deadline-first rotation in which an endpoint's effective weight is
    ``weight / (in_flight + 1) ** bias``, re-evaluated each time it is picked; O(log n).
    With no calls in flight it gives exact weight shares; load shifts them away from
    busy endpoints.

    Attributes:
        bias: how strongly in-flight load discounts weight (Envoy's
            ``active_request_bias``, default 1.0; 0 makes it plain weighted round robin).
    """

    bias: float = attrs.field(default=1.0)

    @bias.validator
    def _check_bias(self, attribute: object, value: float) -> None:
        check_number("PowerOfTwoChoices.bias", value, low=0.0, high=16.0)

    def bind(self, rng: random.Random) -> Picker:
        """Return a power-of-two-choices picker."""
        return _P2CPicker(rng.random, float(self.bias))


class _P2CPicker:
    __slots__ = ("_bias", "_candidates", "_random", "_weights", "pick", "schedule")

    def __init__(self, unit: Callable[[], float], bias: float) -> None:
        self._random = unit
        self._bias = bias
        self._candidates: Sequence[EndpointState] = ()
        self._weights: dict[int, int] = {}
        """How many members carry each weight: one key means unweighted mode."""
        self.schedule: PackedSchedule | None = None
        """The least-request rotation over the candidates, kept only in weighted mode."""
        self.pick: PickFn = self._least_loaded

    def attach(self, scope: Scope) -> None:
        self._candidates = scope.candidates

    def _stride(self, state: EndpointState) -> int:
        weight = state.endpoint.weight
        bias = self._bias
        if bias == 1.0:
            return STRIDE_SCALE * (state.inflight + 1) // weight
        if bias == 0.0:
            return STRIDE_SCALE // weight
        return max(1, int(STRIDE_SCALE * (state.inflight + 1) ** bias / weight))

    # The mode follows the weights of the scope's members, not of its candidates, so an
    # endpoint's health flapping never switches it; a switch (a discovery change of
    # weights) builds or drops the schedule in O(n), once.

    def joined(self, state: EndpointState) -> None:
        weights = self._weights
        w = state.endpoint.weight
        weights[w] = weights.get(w, 0) + 1
        if len(weights) == 2 and self.schedule is None:
            schedule = self.schedule = PackedSchedule()
            for candidate in self._candidates:
                schedule.add(candidate, self._stride(candidate))
            self.pick = self._least_request

    def left(self, state: EndpointState) -> None:
        weights = self._weights
        w = state.endpoint.weight
        left = weights[w] - 1
        if left:
            weights[w] = left
        else:
            del weights[w]
        if len(weights) < 2 and self.schedule is not None:
            self.schedule = None
            self.pick = self._least_loaded

    def added(self, state: EndpointState, pos: int) -> None:
        schedule = self.schedule
        if schedule is not None:
            schedule.add(state, self._stride(state))

    def removed(self, state: EndpointState, pos: int, moved: EndpointState | None) -> None:
        schedule = self.schedule
        if schedule is not None:
            schedule.remove(state)

    def _least_loaded(self, candidates: Sequence[EndpointState], loads: Loads, key: Hashable | None) -> EndpointState:
        n = len(candidates)
        if n == 1:
            return candidates[0]
        rnd = self._random
        i = int(rnd() * n)
        j = int(rnd() * (n - 1))
        if j >= i:
            j += 1
        return candidates[j] if loads[j] < loads[i] else candidates[i]

    def _least_request(self, candidates: Sequence[EndpointState], loads: Loads, key: Hashable | None) -> EndpointState:
        schedule = self.schedule
        assert schedule is not None  # noqa: S101 - weighted mode keeps one
        state = schedule.head()
        schedule.advance(self._stride(state))
        return state


@attrs.frozen(kw_only=True)
class PeakEwma:
    """Least expected latency: peak-EWMA round-trip time x (in flight + 1), of two random endpoints.

    Each endpoint keeps an exponentially weighted moving average of its completed calls'
    latency (errors included: a returned error is completed work) that jumps up at once
    to a slower observation (the *peak*) and decays towards faster ones with time
    constant ``decay``; between observations it decays towards zero, so an endpoint
    that stopped being picked for being slow is tried again. An endpoint never measured
    costs ``default_rtt``. Two random endpoints are compared on ``ewma x (in_flight + 1)``
    (Finagle's and Linkerd's balancer): O(1). Weights are ignored; latency decides.

    Attributes:
        default_rtt: the latency assumed for an endpoint with no completed call, seconds.
        decay: the EWMA's time constant, seconds.
    """

    measures_latency: ClassVar[bool] = True

    default_rtt: float = attrs.field(default=0.1)
    decay: float = attrs.field(default=10.0)

    @default_rtt.validator
    def _check_rtt(self, attribute: object, value: float) -> None:
        check_number("PeakEwma.default_rtt", value, low=0.0, high=3600.0)

    @decay.validator
    def _check_decay(self, attribute: object, value: float) -> None:
        check_number("PeakEwma.decay", value, low=0.0, high=86400.0, low_open=True)

    def bind(self, rng: random.Random) -> Picker:
        """Return a peak-EWMA picker."""
        return _PeakEwmaPicker(rng.random, float(self.default_rtt), float(self.decay))

    def observe(self, state: EndpointState, latency: float, now: float) -> None:
        """Feed one completed call's latency into ``state``'s estimate."""
        at = state.ewma_at
        if at is None or latency >= state.ewma:
            state.ewma = latency
        else:
            w = math.exp(-max(0.0, now - at) / self.decay)
            state.ewma = state.ewma * w + latency * (1.0 - w)
        state.ewma_at = now


class _PeakEwmaPicker:
    __slots__ = ("_decay", "_default", "_random", "now")

    def __init__(self, unit: Callable[[], float], default_rtt: float, decay: float) -> None:
        self._random = unit
        self._default = default_rtt
        self._decay = decay
        self.now = Instant()

    def attach(self, scope: Scope) -> None:
        self.now = scope.instant

    def cost(self, state: EndpointState, load: int, now: float) -> float:
        at = state.ewma_at
        if at is None:
            return self._default * (load + 1)
        return state.ewma * math.exp(-max(0.0, now - at) / self._decay) * (load + 1)

    def pick(self, candidates: Sequence[EndpointState], loads: Loads, key: Hashable | None) -> EndpointState:
        n = len(candidates)
        if n == 1:
            return candidates[0]
        i, j = _two(self._random, n)
        now = self.now.value
        a = candidates[i]
        b = candidates[j]
        return b if self.cost(b, loads[j], now) < self.cost(a, loads[i], now) else a


# -- consistent hashing ----------------------------------------------------------------------

_WALK = 64
"""Table probes per key before the fallback scan of the candidate list."""


@attrs.frozen(kw_only=True)
class ConsistentHash:
    """Send each ``acquire(key=...)`` key to the same endpoint while it can take it: Maglev.

    Lookups are O(1) in a Maglev table (see ``docs/routing.md`` for why Maglev rather
    than rendezvous hashing) built over the scope's members, whatever their health, and
    rebuilt only when membership changes. A key whose endpoint cannot take the call
    (ejected, draining, excluded by the caller, or over its bounded load) walks on along
    its own probe sequence, so only that endpoint's keys move, and they come back when
    it recovers. Adding one endpoint to ``n`` moves about ``1/(n+1)`` of the keys. A call
    without a key is placed uniformly at random.

    With ``balance_factor=c`` (bounded loads, Mirrokni, Thorup and Zadimoghaddam), an
    endpoint already carrying ``ceil(c x (in_flight_total + 1) x weight / total_weight)``
    calls is skipped, so one hot key cannot overload its endpoint; ``c >= 1`` always
    leaves some endpoint under its bound, and :class:`CapacityOverflow` is raised if it
    ever does not. Panic picks (see :class:`Panic`) do not apply the bound.

    Attributes:
        table_size: Maglev table size, a prime (default 65537, as Envoy); it grows to the
            next prime of its doubling ladder when the scope has more than
            ``table_size / 8`` members.
        balance_factor: the bounded-load factor ``c >= 1``, or None for plain hashing.
    """

    table_size: int = attrs.field(default=65537)
    balance_factor: float | None = attrs.field(default=None)

    @table_size.validator
    def _check_table_size(self, attribute: object, value: int) -> None:
        check_count("ConsistentHash.table_size", value, minimum=7, maximum=1 << 26)
        if not is_prime(value):
            raise ConfigError("ConsistentHash.table_size", f"must be prime (Maglev), got {value!r}")

    @balance_factor.validator
    def _check_balance(self, attribute: object, value: float | None) -> None:
        if value is not None:
            check_number("ConsistentHash.balance_factor", value, low=1.0, high=1000.0)

    @property
    def tracks_load(self) -> bool:
        """Bounded loads need the scope's in-flight total."""
        return self.balance_factor is not None

    @property
    def reads_loads(self) -> bool:
        """Only bounded loads read the in-flight counts."""
        return self.balance_factor is not None

    def bind(self, rng: random.Random) -> Picker:
        """Return a Maglev picker."""
        return _HashPicker(rng.random, self.table_size, self.balance_factor)


class _HashPicker:
    __slots__ = ("_degraded", "_den", "_num", "_panic", "_unit", "_weight", "table")

    def __init__(self, unit: Callable[[], float], table_size: int, balance_factor: float | None) -> None:
        self._unit = unit
        self.table = MaglevTable(table_size)
        self._panic = False
        """Whether candidacy is ``state.ppos >= 0`` (a panic scope) rather than ``state.pos >= 0``."""
        self._degraded = False
        """Whether candidacy is ``state.dpos >= 0`` (a degraded scope)."""
        self._weight = 0
        """The candidates' total weight."""
        if balance_factor is None:
            self._num = self._den = 0
        else:
            self._num, self._den = ratio(balance_factor)

    def attach(self, scope: Scope) -> None:
        self._panic = scope.panic
        self._degraded = scope.degraded

    def joined(self, state: EndpointState) -> None:
        self.table.add(state)

    def left(self, state: EndpointState) -> None:
        self.table.discard(state)

    def added(self, state: EndpointState, pos: int) -> None:
        self._weight += state.endpoint.weight

    def removed(self, state: EndpointState, pos: int, moved: EndpointState | None) -> None:
        self._weight -= state.endpoint.weight

    def is_candidate(self, state: EndpointState) -> bool:
        """Whether a table member may take the call now (members of this scope only)."""
        return (state.ppos if self._panic else state.dpos if self._degraded else state.pos) >= 0

    def _room(self, loads: Loads) -> Callable[[EndpointState], bool] | None:
        """The bounded-load test for this pick, or None when no bound applies."""
        if not self._num or not isinstance(loads, TotalingLoads):
            return None
        scale = self._num * (loads.total + 1)
        per_weight = self._den * self._weight

        # inflight < ceil(c (total + 1) w / W)  <=>  inflight < c (total + 1) w / W
        def room(state: EndpointState) -> bool:
            return state.inflight * per_weight < scale * state.endpoint.weight

        return room

    def pick(self, candidates: Sequence[EndpointState], loads: Loads, key: Hashable | None) -> EndpointState:
        if key is None:
            return candidates[int(self._unit() * len(candidates))]
        slots = self.table.slots()
        h = key_hash(key)
        room = self._room(loads) if self._num else None
        state = slots[h % len(slots)]
        if (state.ppos if self._panic else state.dpos if self._degraded else state.pos) >= 0 and (
            room is None or room(state)
        ):
            return state
        found = self._walk(slots, h, candidates, room, ())
        if found is None:
            raise CapacityOverflow(
                f"bounded load: none of {len(candidates)} candidates is under {self._num}/{self._den} x the mean load"
            )
        return found

    def pick_excluding(
        self,
        candidates: Sequence[EndpointState],
        loads: Loads,
        key: Hashable | None,
        exclude: Collection[str],
    ) -> EndpointState | None:
        """The key's first candidate not in ``exclude`` (the bound relaxed if only it stands in the way)."""
        if key is None:
            rest = [s for s in candidates if s.endpoint.id not in exclude]
            return rest[int(self._unit() * len(rest))] if rest else None
        slots = self.table.slots()
        h = key_hash(key)
        found = self._walk(slots, h, candidates, self._room(loads), exclude, first=True)
        if found is None:
            found = self._walk(slots, h, candidates, None, exclude, first=True)
        return found

    def _walk(
        self,
        slots: Sequence[EndpointState],
        h: int,
        candidates: Sequence[EndpointState],
        room: Callable[[EndpointState], bool] | None,
        exclude: Collection[str],
        *,
        first: bool = False,
    ) -> EndpointState | None:
        usable = self.is_candidate
        m = len(slots)
        if m > 1:
            i = h % m
            stride = (h >> 32) % (m - 1) + 1
            if not first:
                i += stride
                if i >= m:
                    i -= m
            for _ in range(_WALK):
                state = slots[i]
                if usable(state) and state.endpoint.id not in exclude and (room is None or room(state)):
                    return state
                i += stride
                if i >= m:
                    i -= m
        # Most of the table is unusable for this key: scan the candidates from a
        # key-determined start (consistent while the candidate list is unchanged).
        n = len(candidates)
        start = h % n if n else 0
        for k in range(n):
            state = candidates[(start + k) % n]
            if state.endpoint.id not in exclude and (room is None or room(state)):
                return state
        return None


def ratio(value: float) -> tuple[int, int]:
    """``value`` as an exact ratio of its shortest decimal form (1.4 -> 7/5), for integer arithmetic."""
    exact = Fraction(repr(float(value))).limit_denominator(1_000_000)
    return exact.numerator, exact.denominator
