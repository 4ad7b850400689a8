"""Pickers: the running state of a selection policy in one scope, and its pick (the hot path).

A public policy (:mod:`poise_py._core._selection`) is a frozen configuration; its
``bind(rng)`` returns one of these pickers for one scope of one balancer (a balancer has a
scope per tier, per zone side, and per panic set), with the balancer's seeded rng
injected so every pick is reproducible. Pickers that need a structure over the candidates
keep it in step with the candidate list through optional hooks the scope calls after each
change, each with a list of endpoints (``added``, ``removed``, ``joined``, ``left``, and
``attach``: see ``_selection.py``),
so a pick never scans.

Configuration and running state are separate modules so that the optional compiled build
compiles the pickers (and the rest of the hot path) while the policies stay attrs classes.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Collection, Hashable
from fractions import Fraction
from typing import TYPE_CHECKING, Protocol, TypeAlias

from .._errors import CapacityOverflow
from ._load_signals import LoadSignal, fill_weights
from ._maglev import MaglevTable, key_hash
from ._record import UNMEASURED
from ._weights import STRIDE_SCALE, PackedSchedule, WeightBuckets, WeightClasses

if TYPE_CHECKING:
    from ._record import Member
    from ._routing import Scope


class PoolView:
    """What a pool shares with its pickers, one object for every scope.

    Attributes:
        now: the pool's latest clock reading, for pickers that weigh time (:class:`PeakEwma`).
        held: failed calls still counted against an endpoint's load, by endpoint (a
            :class:`PowerOfTwoChoices` failure penalty): a pick adds them to the in-flight
            count it compares. Empty while nothing failed lately, and then the pick pays one
            truth test for it.
        signals: what each endpoint's backend said of its load (ORCA reports), for
            :class:`WeightedByLoad`; beside the records, not in them, so a record stays
            within its cache lines.
    """

    now: float
    held: dict[Member, int]
    signals: dict[Member, LoadSignal]

    __slots__ = ("held", "now", "signals")

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.held = {}
        self.signals = {}


PickFn: TypeAlias = "Callable[[list[Member], list[int], Hashable | None], Member]"
"""A picker's ``pick``: the scope's candidates, its loads (``loads[i]`` is ``candidates[i].inflight``
in a scope that tracks them), the request key."""


class Picker(Protocol):
    """Picks among candidates; one per scope, holds the policy's running state."""

    def pick(self, candidates: list[Member], loads: list[int], key: Hashable | None) -> Member:
        """Return one of ``candidates`` (never empty)."""


def _two(unit: Callable[[], float], n: int) -> tuple[int, int]:
    """Two distinct uniform indices below ``n`` (``n >= 2``)."""
    i = int(unit() * n)
    j = int(unit() * (n - 1))
    if j >= i:
        j += 1
    return i, j


class RoundRobinPicker:
    __slots__ = ("_next",)

    def __init__(self, start: int) -> None:
        self._next = start

    def pick(self, candidates: list[Member], loads: list[int], key: Hashable | None) -> Member:
        i = self._next
        self._next = i + 1 if i < (1 << 62) else 0
        return candidates[i % len(candidates)]


class RandomPicker:
    __slots__ = ("_unit",)

    def __init__(self, unit: Callable[[], float]) -> None:
        self._unit = unit

    def pick(self, candidates: list[Member], loads: list[int], key: Hashable | None) -> Member:
        n = len(candidates)  # a local: inline, the compiled build multiplies a float by a list's length generically
        return candidates[int(self._unit() * n)]


class WeightedRandomPicker:
    __slots__ = ("_unit", "buckets")

    def __init__(self, unit: Callable[[], float]) -> None:
        self._unit = unit
        self.buckets = WeightBuckets()

    def added(self, states: list[Member]) -> None:
        self.buckets.add_all(states, [member.endpoint.weight for member in states])

    def removed(self, states: list[Member]) -> None:
        self.buckets.remove_all(states, [member.endpoint.weight for member in states])

    def pick(self, candidates: list[Member], loads: list[int], key: Hashable | None) -> Member:
        return self.buckets.draw(self._unit)


class WeightedRoundRobinPicker:
    __slots__ = ("schedule",)

    def __init__(self) -> None:
        self.schedule = WeightClasses()

    def added(self, states: list[Member]) -> None:
        self.schedule.add_all(states, [member.endpoint.weight for member in states])

    def removed(self, states: list[Member]) -> None:
        self.schedule.remove_all(states, [member.endpoint.weight for member in states])

    def pick(self, candidates: list[Member], loads: list[int], key: Hashable | None) -> Member:
        return self.schedule.next()


class P2CPicker:
    __slots__ = ("_bias", "_candidates", "_held", "_random", "_tracked", "_weights", "pick", "schedule")

    def __init__(self, unit: Callable[[], float], bias: float) -> None:
        self._random = unit
        self._bias = bias
        self._held: dict[Member, int] = {}
        """Failed calls still counted against each endpoint (the pool's, see :class:`PoolView`)."""
        self._tracked = True
        """Whether the scope's loads mirror its candidates' in-flight counts (else read the states)."""
        self._candidates: list[Member] = []
        self._weights: dict[int, int] = {}
        """How many members carry each weight: one key means unweighted mode."""
        self.schedule: PackedSchedule | None = None
        """The least-request rotation over the candidates, kept only in weighted mode."""
        self.pick: PickFn = self._least_loaded

    def attach(self, scope: Scope) -> None:
        self._candidates = scope.candidates
        self._tracked = scope.tracked
        self._held = scope.view.held

    def _stride(self, member: Member) -> int:
        weight = member.endpoint.weight
        bias = self._bias
        load = member.inflight + 1
        held = self._held
        if held:
            load += held.get(member, 0)
        if bias == 1.0:
            return STRIDE_SCALE * load // weight
        if bias == 0.0:
            return STRIDE_SCALE // weight
        return max(1, int(STRIDE_SCALE * load**bias / weight))

    # The mode follows the weights of the scope's members, not of its candidates, so an
    # endpoint's health flapping never switches it; a switch (a discovery change of
    # weights) builds or drops the schedule in O(n), once.

    def joined(self, states: list[Member]) -> None:
        weights = self._weights
        for w, n in Counter([member.endpoint.weight for member in states]).items():
            weights[w] = weights.get(w, 0) + n
        if len(weights) >= 2 and self.schedule is None:
            schedule = self.schedule = PackedSchedule()
            for candidate in self._candidates:
                schedule.add(candidate, self._stride(candidate))
            self.pick = self._least_request

    def left(self, states: list[Member]) -> None:
        weights = self._weights
        for w, n in Counter([member.endpoint.weight for member in states]).items():
            left = weights[w] - n
            if left:
                weights[w] = left
            else:
                del weights[w]
        if len(weights) < 2 and self.schedule is not None:
            self.schedule = None
            self.pick = self._least_loaded

    def added(self, states: list[Member]) -> None:
        schedule = self.schedule
        if schedule is not None:
            for member in states:
                schedule.add(member, self._stride(member))

    def removed(self, states: list[Member]) -> None:
        schedule = self.schedule
        if schedule is not None:
            for member in states:
                schedule.remove(member)

    def _least_loaded(self, candidates: list[Member], loads: list[int], key: Hashable | None) -> Member:
        n = len(candidates)
        if n == 1:
            return candidates[0]
        rnd = self._random
        i = int(rnd() * n)
        j = int(rnd() * (n - 1))
        if j >= i:
            j += 1
        held = self._held
        if held:  # a failure penalty is running: held failures count as load
            a = candidates[i]
            b = candidates[j]
            return b if b.inflight + held.get(b, 0) < a.inflight + held.get(a, 0) else a
        if self._tracked:  # the compact copy: two reads of one list, no record touched
            return candidates[j] if loads[j] < loads[i] else candidates[i]
        a = candidates[i]
        b = candidates[j]
        return b if b.inflight < a.inflight else a

    def _least_request(self, candidates: list[Member], loads: list[int], key: Hashable | None) -> Member:
        schedule = self.schedule
        assert schedule is not None  # noqa: S101 - weighted mode keeps one
        member = schedule.head()
        schedule.advance(self._stride(member))
        return member


class PeakEwmaPicker:
    __slots__ = ("_decay", "_default", "_random", "_tracked", "view")

    def __init__(self, unit: Callable[[], float], default_rtt: float, decay: float) -> None:
        self._random = unit
        self._default = default_rtt
        self._decay = decay
        self._tracked = True
        """Whether the scope's loads mirror its candidates' in-flight counts (else read the states)."""
        self.view = PoolView()

    def attach(self, scope: Scope) -> None:
        self.view = scope.view
        self._tracked = scope.tracked

    def cost(self, member: Member, load: int, now: float) -> float:
        at = member.ewma_at
        if at == UNMEASURED:
            return self._default * (load + 1)
        return member.ewma * math.exp(-max(0.0, now - at) / self._decay) * (load + 1)

    def pick(self, candidates: list[Member], loads: list[int], key: Hashable | None) -> Member:
        n = len(candidates)
        if n == 1:
            return candidates[0]
        i, j = _two(self._random, n)
        now = self.view.now
        a = candidates[i]
        b = candidates[j]
        if self._tracked:
            return b if self.cost(b, loads[j], now) < self.cost(a, loads[i], now) else a
        return b if self.cost(b, b.inflight, now) < self.cost(a, a.inflight, now) else a


class LoadWeights(Protocol):
    """The knobs :class:`LoadWeightedPicker` reads (:class:`~poise_py.WeightedByLoad`'s)."""

    @property
    def blackout_period(self) -> float: ...

    @property
    def weight_expiration_period(self) -> float: ...

    @property
    def weight_update_period(self) -> float: ...


class LoadWeightedPicker:
    """gRPC's weighted round robin over the weights backends' load reports make (gRFC A58).

    Every ``weight_update_period`` (at the first pick after it, on the pool's clock) the
    candidates' weights are read again (:meth:`LoadSignal.weight_at`, unknown ones filled
    by :func:`fill_weights`) and the schedule is rebuilt: an earliest-deadline-first heap
    in which each endpoint's next turn is ``1 / weight`` after its last, starting at a
    random phase. A pick pops the head and pushes its next turn: O(log n). An endpoint that
    becomes a candidate between rebuilds joins at the head's time plus a random phase of
    its turn, with its last weight (or the mean); one that stops being a candidate leaves a
    stale entry behind, skipped when it reaches the head (``_turns`` holds each live
    candidate's current entry) and dropped at the next rebuild.
    """

    __slots__ = (
        "_candidates",
        "_heap",
        "_knobs",
        "_mean",
        "_next_update",
        "_seq",
        "_signals",
        "_turns",
        "_unit",
        "_weights",
        "view",
    )

    def __init__(self, unit: Callable[[], float], knobs: LoadWeights) -> None:
        self._unit = unit
        self._knobs = knobs
        self._candidates: list[Member] = []
        self._heap: list[tuple[float, int, Member]] = []
        self._turns: dict[Member, int] = {}
        """Each candidate's live heap entry, by its sequence number."""
        self._weights: dict[Member, float] = {}
        """The weights of the last rebuild."""
        self._mean = 1.0
        self._next_update = -math.inf
        self._seq = 0
        self.view = PoolView()
        self._signals: dict[Member, LoadSignal] = {}

    def attach(self, scope: Scope) -> None:
        self._candidates = scope.candidates
        self.view = scope.view
        self._signals = scope.view.signals

    def _entry(self, at: float, member: Member) -> tuple[float, int, Member]:
        """A heap entry for ``member``'s turn at ``at``, made its current one."""
        self._seq += 1
        self._turns[member] = self._seq
        return (at, self._seq, member)

    def added(self, states: list[Member]) -> None:
        heap = self._heap
        head = heap[0][0] if heap else 0.0
        weights = self._weights
        mean = self._mean
        unit = self._unit
        entries = [self._entry(head + unit() / weights.get(member, mean), member) for member in states]
        if len(entries) < 64:
            for entry in entries:
                heapq.heappush(heap, entry)
        else:  # many at once (a large update): one O(n) heapify instead of a push each
            heap.extend(entries)
            heapq.heapify(heap)

    def removed(self, states: list[Member]) -> None:
        turns = self._turns
        if not self._candidates:  # every candidate left (the scope has changed already): nothing stays
            turns.clear()
            self._heap = []
            return
        for member in states:
            turns.pop(member, None)

    def weights(self, now: float) -> dict[Member, float]:
        """The candidates' scheduler weights at ``now`` (what a rebuild would use); a pure read."""
        knobs = self._knobs
        blackout = knobs.blackout_period
        expiration = knobs.weight_expiration_period
        candidates = self._candidates
        signals = self._signals
        raw = [
            0.0
            if (signal := signals.get(member)) is None
            else signal.weight_at(now, blackout_period=blackout, weight_expiration_period=expiration)
            for member in candidates
        ]
        return dict(zip(candidates, fill_weights(raw), strict=True))

    def _rebuild(self, now: float) -> None:
        weights = self._weights = self.weights(now)
        self._mean = sum(weights.values()) / len(weights) if weights else 1.0
        unit = self._unit
        self._turns.clear()
        self._heap = [self._entry(unit() / weight, member) for member, weight in weights.items()]
        heapq.heapify(self._heap)
        self._next_update = now + self._knobs.weight_update_period

    def pick(self, candidates: list[Member], loads: list[int], key: Hashable | None) -> Member:
        if self.view.now >= self._next_update:
            self._rebuild(self.view.now)
        heap = self._heap
        turns = self._turns
        while True:
            at, seq, member = heap[0]
            if turns.get(member) == seq:
                break
            heapq.heappop(heap)  # a candidate that left since it was scheduled
        self._seq += 1
        turns[member] = self._seq
        heapq.heapreplace(heap, (at + 1.0 / self._weights.get(member, self._mean), self._seq, member))
        return member


_WALK = 64
"""Table probes per key before the fallback scan of the candidate list."""


class HashPicker:
    __slots__ = ("_degraded", "_den", "_num", "_panic", "_scope", "_unit", "_weight", "table")

    def __init__(self, unit: Callable[[], float], table_size: int, balance_factor: float | None) -> None:
        self._unit = unit
        self.table = MaglevTable(table_size)
        self._panic = False
        """Whether candidacy is ``member.panic_pos >= 0`` (a panic scope) rather than ``member.pos >= 0``."""
        self._degraded = False
        """Whether candidacy is ``member.degraded_pos >= 0`` (a degraded scope)."""
        self._weight = 0
        """The candidates' total weight."""
        self._scope: Scope | None = None
        """The scope whose in-flight total bounds the loads (a home scope of a bounded policy)."""
        if balance_factor is None:
            self._num = self._den = 0
        else:
            self._num, self._den = ratio(balance_factor)

    def attach(self, scope: Scope) -> None:
        self._panic = scope.panic
        self._degraded = scope.degraded
        self._scope = scope if scope.totals else None

    def joined(self, states: list[Member]) -> None:
        table = self.table
        for member in states:
            table.add(member)

    def left(self, states: list[Member]) -> None:
        table = self.table
        for member in states:
            table.discard(member)

    def added(self, states: list[Member]) -> None:
        self._weight += sum([member.endpoint.weight for member in states])

    def removed(self, states: list[Member]) -> None:
        self._weight -= sum([member.endpoint.weight for member in states])

    def is_candidate(self, member: Member) -> bool:
        """Whether a table member may take the call now (members of this scope only)."""
        return (member.panic_pos if self._panic else member.degraded_pos if self._degraded else member.pos) >= 0

    def _room(self) -> Callable[[Member], bool] | None:
        """The bounded-load test for this pick, or None when no bound applies (a panic or degraded scope)."""
        scope = self._scope
        if not self._num or scope is None:
            return None
        scale = self._num * (scope.load_total + 1)
        per_weight = self._den * self._weight

        # inflight < ceil(c (total + 1) w / W)  <=>  inflight < c (total + 1) w / W
        def room(member: Member) -> bool:
            return member.inflight * per_weight < scale * member.endpoint.weight

        return room

    def pick(self, candidates: list[Member], loads: list[int], key: Hashable | None) -> Member:
        if key is None:
            n = len(candidates)
            return candidates[int(self._unit() * n)]
        slots = self.table.slots()
        h = key_hash(key)
        room = self._room() if self._num else None
        member = slots[h % len(slots)]
        if (member.panic_pos if self._panic else member.degraded_pos if self._degraded else member.pos) >= 0 and (
            room is None or room(member)
        ):
            return member
        found = self._walk(slots, h, candidates, room, ())
        if found is None:
            raise CapacityOverflow(
                f"bounded load: none of {len(candidates)} candidates is under {self._num}/{self._den} x the mean load"
            )
        return found

    def pick_excluding(
        self,
        candidates: list[Member],
        loads: list[int],
        key: Hashable | None,
        exclude: Collection[str],
    ) -> Member | None:
        """The key's first candidate not in ``exclude`` (the bound relaxed if only it stands in the way)."""
        if key is None:
            rest = [s for s in candidates if s.endpoint.id not in exclude]
            n = len(rest)
            return rest[int(self._unit() * n)] if n else None
        slots = self.table.slots()
        h = key_hash(key)
        found = self._walk(slots, h, candidates, self._room(), exclude, first=True)
        if found is None:
            found = self._walk(slots, h, candidates, None, exclude, first=True)
        return found

    def _walk(
        self,
        slots: list[Member],
        h: int,
        candidates: list[Member],
        room: Callable[[Member], bool] | None,
        exclude: Collection[str],
        *,
        first: bool = False,
    ) -> Member | None:
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
                member = slots[i]
                if usable(member) and member.endpoint.id not in exclude and (room is None or room(member)):
                    return member
                i += stride
                if i >= m:
                    i -= m
        # Most of the table is unusable for this key: scan the candidates from a
        # key-determined start (consistent while the candidate list is unchanged).
        n = len(candidates)
        start = h % n if n else 0
        for k in range(n):
            member = candidates[(start + k) % n]
            if member.endpoint.id not in exclude and (room is None or room(member)):
                return member
        return None


def ratio(value: float) -> tuple[int, int]:
    """``value`` as an exact ratio of its shortest decimal form (1.4 -> 7/5), for integer arithmetic."""
    exact = Fraction(repr(float(value))).limit_denominator(1_000_000)
    return exact.numerator, exact.denominator
