"""Weighted structures behind the weighted policies, maintained incrementally.

Theory of operation
-------------------
A scope's candidate list changes by *append* (an endpoint becomes available) and by
*swap-remove* (the last entry moves into the hole), both O(1). The structures here
mirror those two moves so a weighted pick never scans the list:

* :class:`WeightBuckets` draws a weighted random endpoint in O(1) expected time, whatever
  the pool size, and updates in O(1). Endpoints are grouped by weight class (bucket ``b``
  holds the weights in ``[2**(b-1), 2**b)``, so there are at most 33 buckets for weights
  up to ``2**32``, however many endpoints). A draw picks a bucket in proportion to its
  total weight (a scan of the non-empty buckets, exact integer arithmetic), then a
  uniform member of it, accepted with probability ``weight / top`` (``top``, the
  bucket's largest weight, is less than twice any weight in it, so a draw is accepted
  with probability at least 1/2 and takes under two tries on average; with equal
  weights it is accepted at once). The result is exactly proportional to weight
  (rejection sampling). This replaces a Fenwick tree, whose O(log n) descent touched
  17 cache lines at 100,000 endpoints.
* :class:`Schedule` is an earliest-deadline-first rotation (Envoy's EDF scheduler):
  each endpoint has an integer virtual deadline and, when picked, its deadline moves
  on by its *stride* (``STRIDE_SCALE // weight``), so an endpoint of weight ``w`` is
  picked ``w`` times per ``STRIDE_SCALE`` of virtual time, evenly spread: over any
  ``sum(weights)`` consecutive picks of a fixed set each endpoint gets exactly its
  weight, and at every point each count is within two of its exact share. A new entry
  starts a fraction of its stride after the current virtual time, the fractions
  following the golden-ratio sequence (``k * 0.618... mod 1``, the most even way to
  spread points one at a time), so endpoints of equal weight are staggered instead of
  moving in lock-step, which is what makes the rotation smooth (nginx's property)
  without nginx's O(n) scan. ``STRIDE_SCALE`` is a multiple of every weight up to 64,
  so for those weights deadlines are exact, and ties (broken by the longest wait) are
  real ties. Removal marks the heap entry dead (O(1)); dead entries are popped when
  they surface and the heap is compacted when they outnumber the live ones, so every
  operation is O(log n) amortised.
* :class:`PackedSchedule` is the same rotation with one int per heap node, for weighted
  least request (``PowerOfTwoChoices`` with unequal weights), which schedules every
  endpoint: O(log n), inherently, because each endpoint's stride depends on its own
  in-flight count. Packing keeps the heap compact so its O(log n) levels stay in cache.
* :class:`WeightClasses` is smooth weighted round robin without the O(log n): endpoints
  of equal weight share one entry of a :class:`Schedule` (their *class*), whose stride
  is ``ROTATION // (members x weight)``, and take the class's turns in rotation. A pick
  is O(log k) for ``k`` distinct weights (a handful in practice), independent of the
  number of endpoints; a join or leave rescales the class's remaining wait to its new
  stride. Over every ``sum(weights)`` picks of a fixed set each endpoint still gets
  exactly its weight, and a class's members are evenly spread by construction.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

if TYPE_CHECKING:
    from ._record import Member

Entry: TypeAlias = list[Any]
"""A schedule entry: ``[deadline, seq, member, live, stride]`` (a list: compared in C)."""

T = TypeVar("T")

_GOLDEN32 = 0x9E3779B9
"""The golden ratio's fractional part in 32-bit fixed point: phases ``k * it mod 2**32``."""

STRIDE_SCALE = 2 * math.lcm(*range(1, 65))
"""Virtual time per rotation: strides are ``STRIDE_SCALE // weight``, exact (and even) for
weights up to 64, and above 2**58 for any weight (so rounding is negligible)."""

ROTATION = STRIDE_SCALE << 32
"""Virtual time per rotation of :class:`WeightClasses`: a class stride ``ROTATION // (m x w)``
is exact whenever ``m x w`` divides ``STRIDE_SCALE x 2**32``, and off by less than one part
in ``2**60`` otherwise."""


class _Bucket:
    """The members of one weight class ``[2**(b-1), 2**b)``: parallel lists, swap-removed."""

    __slots__ = ("below", "index", "states", "top", "total", "weights")

    def __init__(self) -> None:
        self.states: list[Member] = []
        self.weights: list[int] = []
        self.index: dict[Member, int] = {}
        self.total = 0
        self.top = 0
        """At least every weight here (the largest added since the bucket was last empty)."""
        self.below = 0
        """How many members weigh less than ``top``: with none, a draw needs no weight."""


class WeightBuckets:
    """Integer weights with O(1) updates and O(1) expected weighted draws (see the module docstring).

    Attributes:
        total: the sum of every weight held.
    """

    __slots__ = ("_buckets", "_order", "total")

    def __init__(self) -> None:
        self._buckets: dict[int, _Bucket] = {}
        self._order: list[_Bucket] = []
        """The non-empty buckets, in the order they were first filled."""
        self.total = 0

    def __len__(self) -> int:
        return sum(len(b.states) for b in self._order)

    def add(self, member: Member, weight: int) -> None:
        """Hold ``member`` with ``weight`` (it must not be held)."""
        key = weight.bit_length()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket()
        if not bucket.states:
            self._order.append(bucket)
        if weight > bucket.top:
            bucket.below = len(bucket.states)  # everyone already here weighs less
            bucket.top = weight
        elif weight < bucket.top:
            bucket.below += 1
        bucket.index[member] = len(bucket.states)
        bucket.states.append(member)
        bucket.weights.append(weight)
        bucket.total += weight
        self.total += weight

    def remove(self, member: Member, weight: int) -> None:
        """Stop holding ``member`` (held with ``weight``): the bucket's last member moves into its place."""
        bucket = self._buckets[weight.bit_length()]
        i = bucket.index.pop(member)
        states = bucket.states
        weights = bucket.weights
        last = states.pop()
        last_weight = weights.pop()
        if last is not member:
            states[i] = last
            weights[i] = last_weight
            bucket.index[last] = i
        bucket.total -= weight
        self.total -= weight
        if weight < bucket.top:
            bucket.below -= 1
        if not states:
            bucket.top = bucket.below = 0
            self._order.remove(bucket)

    def add_all(self, states: list[Member], weights: list[int]) -> None:
        """:meth:`add` each of ``states`` with its weight, a bucket at a time (a large update)."""
        for key, (members, ws) in _by_key(states, weights, int.bit_length).items():
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket()
            if not bucket.states:
                self._order.append(bucket)
            top = max(ws)
            if top > bucket.top:
                bucket.below = len(bucket.states)  # everyone already here weighs less
                bucket.top = top
            bucket.below += sum([w < bucket.top for w in ws])
            base = len(bucket.states)
            bucket.index.update(zip(members, range(base, base + len(members)), strict=True))
            bucket.states.extend(members)
            bucket.weights.extend(ws)
            total = sum(ws)
            bucket.total += total
            self.total += total

    def remove_all(self, states: list[Member], weights: list[int]) -> None:
        """:meth:`remove` each of ``states`` (held with its weight).

        A bucket losing at least an eighth of its members is rebuilt in one pass, keeping
        the others in their order.
        """
        for key, (members, ws) in _by_key(states, weights, int.bit_length).items():
            bucket = self._buckets[key]
            if len(members) * 8 < len(bucket.states):
                for member, weight in zip(members, ws, strict=True):
                    self.remove(member, weight)
                continue
            gone = set(members)
            kept = [i for i, member in enumerate(bucket.states) if member not in gone]
            bucket.states = [bucket.states[i] for i in kept]
            bucket.weights = [bucket.weights[i] for i in kept]
            bucket.index = {member: i for i, member in enumerate(bucket.states)}
            total = sum(ws)
            bucket.total -= total
            self.total -= total
            bucket.below -= sum([w < bucket.top for w in ws])
            if not bucket.states:
                bucket.top = bucket.below = 0
                self._order.remove(bucket)

    def draw(self, unit: Callable[[], float]) -> Member:
        """One held member, with probability ``weight / total`` (something must be held)."""
        order = self._order
        if len(order) == 1:
            bucket = order[0]
        else:
            u = int(unit() * self.total)
            for bucket in order:
                t = bucket.total
                if u < t:
                    break
                u -= t
        states = bucket.states
        n = len(states)
        if not bucket.below:  # every member weighs ``top``: uniform
            return states[int(unit() * n)]
        weights = bucket.weights
        top = bucket.top
        while True:  # accepts with probability weight / top >= 1/2
            j = int(unit() * n)
            w = weights[j]
            if w == top or unit() * top < w:
                return states[j]

    def buckets(self) -> list[tuple[list[Member], list[int], int, int, int]]:
        """Each non-empty bucket's states, weights, total, top and count below top (for invariant checks)."""
        return [(list(b.states), list(b.weights), b.total, b.top, b.below) for b in self._order]


class WeightClasses:
    """Smooth weighted round robin: an EDF rotation over weight *classes*, round robin inside each.

    All members of equal weight ``w`` form one class; a class of ``m`` members takes its
    turns ``m x w`` times per rotation (its stride is ``ROTATION // (m x w)``) in an
    earliest-deadline-first :class:`Schedule` over the classes, and hands each turn to
    its members in rotation. So a pick costs O(log k) for ``k`` distinct weights,
    whatever the number of endpoints; a member joining or leaving rescales its class's
    remaining wait to the new stride (O(log k)).
    """

    __slots__ = ("_classes", "_schedule")

    def __init__(self) -> None:
        self._classes: dict[int, _Class] = {}
        self._schedule: Schedule[_Class] = Schedule()

    def __len__(self) -> int:
        return sum(len(c.members) for c in self._classes.values())

    def add(self, member: Member, weight: int) -> None:
        """Add ``member`` to its class (it joins the class's rotation last)."""
        cls = self._classes.get(weight)
        if cls is None:
            cls = self._classes[weight] = _Class(weight)
        cls.index[member] = len(cls.members)
        cls.members.append(member)
        self._restride(cls)

    def remove(self, member: Member, weight: int) -> None:
        """Take ``member`` out of its class (the class's last member moves into its turn)."""
        cls = self._classes[weight]
        i = cls.index.pop(member)
        members = cls.members
        last = members.pop()
        if last is not member:
            members[i] = last
            cls.index[last] = i
        if cls.turn >= len(members):
            cls.turn = 0
        if members:
            self._restride(cls)
        else:
            del self._classes[weight]
            self._schedule.remove(cls)

    def add_all(self, states: list[Member], weights: list[int]) -> None:
        """:meth:`add` each of ``states`` with its weight: each class grows once and is restrided once."""
        classes = self._classes
        for weight, (members, _) in _by_key(states, weights, _same).items():
            cls = classes.get(weight)
            if cls is None:
                cls = classes[weight] = _Class(weight)
            base = len(cls.members)
            cls.index.update(zip(members, range(base, base + len(members)), strict=True))
            cls.members.extend(members)
            self._restride(cls)

    def remove_all(self, states: list[Member], weights: list[int]) -> None:
        """:meth:`remove` each of ``states``.

        A class losing at least an eighth of its members is rebuilt in one pass (its
        rotation starts again from its first member).
        """
        classes = self._classes
        for weight, (members, _) in _by_key(states, weights, _same).items():
            cls = classes[weight]
            if len(members) * 8 < len(cls.members):
                for member in members:
                    self.remove(member, weight)
                continue
            gone = set(members)
            cls.members = [member for member in cls.members if member not in gone]
            cls.index = {member: i for i, member in enumerate(cls.members)}
            cls.turn = 0
            if cls.members:
                self._restride(cls)
            else:
                del classes[weight]
                self._schedule.remove(cls)

    def _restride(self, cls: _Class) -> None:
        stride = ROTATION // (len(cls.members) * cls.weight)
        schedule = self._schedule
        if cls in schedule:
            schedule.restride(cls, stride)
        else:
            schedule.add(cls, stride)

    def next(self) -> Member:
        """The next endpoint of the rotation (something must be held)."""
        schedule = self._schedule
        entry = schedule.head()
        schedule.advance(entry, entry[4])
        cls: _Class = entry[2]
        members = cls.members
        turn = cls.turn
        cls.turn = turn + 1 if turn + 1 < len(members) else 0
        return members[turn]

    def live_states(self) -> list[Member]:
        """Every held member (for invariant checks)."""
        return [s for c in self._classes.values() for s in c.members]


def _same(weight: int) -> int:
    return weight


def _by_key(
    states: list[Member], weights: list[int], key: Callable[[int], int]
) -> dict[int, tuple[list[Member], list[int]]]:
    """``states`` and their weights grouped by ``key(weight)``, in order.

    One group without a loop when every weight has the same key (an unweighted or evenly
    weighted update).
    """
    keys = set(map(key, weights))
    if len(keys) == 1:
        return {keys.pop(): (states, weights)}
    groups: dict[int, tuple[list[Member], list[int]]] = {}
    for member, weight in zip(states, weights, strict=True):
        k = key(weight)
        group = groups.get(k)
        if group is None:
            group = groups[k] = ([], [])
        group[0].append(member)
        group[1].append(weight)
    return groups


class _Class:
    """The members of one weight, in rotation."""

    __slots__ = ("index", "members", "turn", "weight")

    def __init__(self, weight: int) -> None:
        self.weight = weight
        self.members: list[Member] = []
        self.index: dict[Member, int] = {}
        self.turn = 0


class Schedule(Generic[T]):
    """An earliest-deadline-first rotation over endpoint states (see the module docstring).

    Heap entries are lists ``[deadline, seq, member, live, stride]``; ``seq`` is unique,
    so comparisons never reach the member.
    """

    __slots__ = ("_adds", "_entries", "_heap", "_seq", "_stale", "vt")

    def __init__(self) -> None:
        self._heap: list[Entry] = []
        self._entries: dict[T, Entry] = {}
        self._seq = 0
        self._adds = 0
        self._stale = 0
        self.vt = 0
        """Virtual time: the deadline of the latest pick."""

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, member: T) -> bool:
        return member in self._entries

    def add(self, member: T, stride: int) -> None:
        """Schedule ``member`` within one stride from now, at the next golden-ratio phase."""
        seq = self._seq
        self._seq = seq + 1
        adds = self._adds = self._adds + 1
        phase = adds * _GOLDEN32 & 0xFFFFFFFF
        entry: Entry = [self.vt + (stride * phase >> 32), seq, member, True, stride]
        self._entries[member] = entry
        heapq.heappush(self._heap, entry)

    def remove(self, member: T) -> None:
        """Unschedule ``member`` (its heap entry dies in place)."""
        entry = self._entries.pop(member)
        entry[3] = False
        self._stale += 1
        if self._stale > len(self._entries) + 16:
            self._heap = [e for e in self._heap if e[3]]
            heapq.heapify(self._heap)
            self._stale = 0

    def restride(self, member: T, stride: int) -> None:
        """Give a scheduled item a new stride, scaling what is left of its current wait to it."""
        entry = self._entries[member]
        old = entry[4]
        wait = max(0, entry[0] - self.vt)
        self.remove(member)
        seq = self._seq
        self._seq = seq + 1
        fresh: Entry = [self.vt + wait * stride // old, seq, member, True, stride]
        self._entries[member] = fresh
        heapq.heappush(self._heap, fresh)

    def head(self) -> Entry:
        """The live entry with the earliest deadline (the schedule must not be empty)."""
        heap = self._heap
        entry = heap[0]
        while not entry[3]:
            heapq.heappop(heap)
            self._stale -= 1
            entry = heap[0]
        return entry

    def advance(self, entry: Entry, stride: int) -> None:
        """Move the head ``entry`` on by ``stride`` after picking it."""
        deadline: int = entry[0]
        self.vt = deadline
        entry[0] = deadline + stride
        entry[1] = seq = self._seq
        self._seq = seq + 1
        heapq.heapreplace(self._heap, entry)

    def live_states(self) -> list[T]:
        """Every scheduled item (for invariant checks)."""
        return list(self._entries)


_SLOT_BITS = 32
_SEQ_BITS = 64
_DEADLINE_SHIFT = _SLOT_BITS + _SEQ_BITS
_SLOT_MASK = (1 << _SLOT_BITS) - 1


class PackedSchedule:
    """The same earliest-deadline-first rotation as :class:`Schedule`, one int per heap node.

    Weighted least request schedules every endpoint, so its heap is as large as the pool
    and a pick walks O(log n) levels of it. A :class:`Schedule` node is a list holding
    separate int objects (deadline, sequence, stride): about 230 bytes and two objects
    to compare per node, scattered in memory. Here a node is one int,
    ``deadline << 96 | seq << 32 | slot``, compared in C by ``heapq`` in the same order
    as ``(deadline, seq)`` (``seq`` is unique), so picks are identical, with a quarter
    of the memory and half the objects touched per level. ``slot`` names the member.
    Removal is lazy: a node whose key is no longer its slot's current key is dead,
    popped when it surfaces; the heap is rebuilt when the dead outnumber the live.
    """

    __slots__ = ("_adds", "_free", "_heap", "_keys", "_seq", "_slot_of", "_stale", "_states", "vt")

    def __init__(self) -> None:
        self._heap: list[int] = []
        self._keys: list[int] = []
        """The live key of each slot (-1 for a free slot)."""
        self._states: list[Member | None] = []
        self._slot_of: dict[Member, int] = {}
        self._free: list[int] = []
        self._seq = 0
        self._adds = 0
        self._stale = 0
        self.vt = 0
        """Virtual time: the deadline of the latest pick."""

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, member: Member) -> bool:
        return member in self._slot_of

    def add(self, member: Member, stride: int) -> None:
        """Schedule ``member`` within one stride from now, at the next golden-ratio phase."""
        seq = self._seq
        self._seq = seq + 1
        adds = self._adds = self._adds + 1
        phase = adds * _GOLDEN32 & 0xFFFFFFFF
        if self._free:
            slot = self._free.pop()
            self._states[slot] = member
        else:
            slot = len(self._states)
            self._states.append(member)
            self._keys.append(-1)
        self._slot_of[member] = slot
        key = (self.vt + (stride * phase >> 32)) << _DEADLINE_SHIFT | seq << _SLOT_BITS | slot
        self._keys[slot] = key
        heapq.heappush(self._heap, key)

    def remove(self, member: Member) -> None:
        """Unschedule ``member`` (its heap node dies in place)."""
        slot = self._slot_of.pop(member)
        self._keys[slot] = -1
        self._states[slot] = None
        self._free.append(slot)
        self._stale += 1
        if self._stale > len(self._slot_of) + 16:
            keys = self._keys
            self._heap = [k for k in keys if k >= 0]
            heapq.heapify(self._heap)
            self._stale = 0

    def head(self) -> Member:
        """The live member with the earliest deadline (the schedule must not be empty)."""
        heap = self._heap
        keys = self._keys
        key = heap[0]
        while keys[key & _SLOT_MASK] != key:
            heapq.heappop(heap)
            self._stale -= 1
            key = heap[0]
        member = self._states[key & _SLOT_MASK]
        assert member is not None  # noqa: S101 - a live key names a held member
        return member

    def advance(self, stride: int) -> None:
        """Move the head (as returned by :meth:`head`) on by ``stride`` after picking it."""
        heap = self._heap
        key = heap[0]
        slot = key & _SLOT_MASK
        deadline = key >> _DEADLINE_SHIFT
        self.vt = deadline
        seq = self._seq
        self._seq = seq + 1
        key = (deadline + stride) << _DEADLINE_SHIFT | seq << _SLOT_BITS | slot
        self._keys[slot] = key
        heapq.heapreplace(heap, key)

    def live_states(self) -> list[Member]:
        """Every scheduled member (for invariant checks)."""
        return list(self._slot_of)
