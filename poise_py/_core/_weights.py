"""Weighted structures behind the weighted policies, maintained incrementally.

Theory of operation
-------------------
A scope's candidate list changes by *append* (an endpoint becomes available) and by
*swap-remove* (the last entry moves into the hole), both O(1). The structures here
mirror those two moves so a weighted pick never scans the list:

* :class:`WeightTree` is a Fenwick (binary indexed) tree over the candidates' weights,
  by position: an append or a swap-remove is two O(log n) point updates, and a weighted
  random pick is one O(log n) descent for the position holding a uniform draw in
  ``[0, total)``. The pool bounds the total (``Routing.max_total_weight <= 2**53``)
  before a weight ever gets here, so every node fits a signed 64-bit slot: the tree is a
  contiguous ``array('q')`` (one cache line holds eight nodes, where a list of Python
  ints would chase a pointer per node), and an update that would overflow raises
  ``OverflowError`` rather than wrap.
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
"""

from __future__ import annotations

import heapq
import math
from array import array
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from ._state import EndpointState

Entry: TypeAlias = list[Any]
"""A schedule entry: ``[deadline, seq, state, live, stride]`` (a list: compared in C)."""

_GOLDEN32 = 0x9E3779B9
"""The golden ratio's fractional part in 32-bit fixed point: phases ``k * it mod 2**32``."""

STRIDE_SCALE = 2 * math.lcm(*range(1, 65))
"""Virtual time per rotation: strides are ``STRIDE_SCALE // weight``, exact (and even) for
weights up to 64, and above 2**58 for any weight (so rounding is negligible)."""


class WeightTree:
    """Integer weights by position, with O(log n) updates and weighted search.

    Attributes:
        weights: the weight at each position (the mirror of the candidate list).
        total: the sum of ``weights``.
    """

    __slots__ = ("_cap", "_tree", "total", "weights")

    def __init__(self) -> None:
        self.weights: list[int] = []
        self.total = 0
        self._cap = 1
        self._tree = array("q", [0, 0])  # 1-indexed Fenwick array over ``_cap`` positions

    def __len__(self) -> int:
        return len(self.weights)

    def _add(self, index: int, delta: int) -> None:
        tree = self._tree
        cap = self._cap
        i = index + 1
        while i <= cap:
            tree[i] += delta
            i += i & -i

    def _rebuild(self, cap: int) -> None:
        """Rebuild for ``cap`` positions (a power of two) in O(cap)."""
        nodes = [0, *self.weights] + [0] * (cap - len(self.weights))
        for i in range(1, cap):  # every node passes its partial sum up, empty ones included
            parent = i + (i & -i)
            if parent <= cap:
                nodes[parent] += nodes[i]
        self._cap = cap
        self._tree = array("q", nodes)

    def append(self, weight: int) -> None:
        """Add ``weight`` at the next position."""
        index = len(self.weights)
        self.weights.append(weight)
        self.total += weight
        if index >= self._cap:
            self._rebuild(self._cap * 2)
        else:
            self._add(index, weight)

    def swap_remove(self, index: int) -> None:
        """Remove position ``index``; the last position's weight moves into it."""
        weights = self.weights
        last = len(weights) - 1
        weight = weights[index]
        if index != last:
            moved = weights[last]
            weights[index] = moved
            self._add(index, moved - weight)
            self._add(last, -moved)
        else:
            self._add(index, -weight)
        weights.pop()
        self.total -= weight
        cap = self._cap
        if cap > 64 and len(weights) * 4 < cap:
            self._rebuild(cap // 2)

    def find(self, target: int) -> int:
        """The position ``i`` with ``prefix(i) <= target < prefix(i + 1)``; ``0 <= target < total``."""
        tree = self._tree
        pos = 0
        step = self._cap
        while step:
            nxt = pos + step
            value = tree[nxt]
            if value <= target:
                pos = nxt
                target -= value
            step >>= 1
        return pos


class Schedule:
    """An earliest-deadline-first rotation over endpoint states (see the module docstring).

    Heap entries are lists ``[deadline, seq, state, live, stride]``; ``seq`` is unique,
    so comparisons never reach the state.
    """

    __slots__ = ("_adds", "_entries", "_heap", "_seq", "_stale", "vt")

    def __init__(self) -> None:
        self._heap: list[Entry] = []
        self._entries: dict[EndpointState, Entry] = {}
        self._seq = 0
        self._adds = 0
        self._stale = 0
        self.vt = 0
        """Virtual time: the deadline of the latest pick."""

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, state: EndpointState) -> bool:
        return state in self._entries

    def add(self, state: EndpointState, stride: int) -> None:
        """Schedule ``state`` within one stride from now, at the next golden-ratio phase."""
        seq = self._seq
        self._seq = seq + 1
        adds = self._adds = self._adds + 1
        phase = adds * _GOLDEN32 & 0xFFFFFFFF
        entry: Entry = [self.vt + (stride * phase >> 32), seq, state, True, stride]
        self._entries[state] = entry
        heapq.heappush(self._heap, entry)

    def remove(self, state: EndpointState) -> None:
        """Unschedule ``state`` (its heap entry dies in place)."""
        entry = self._entries.pop(state)
        entry[3] = False
        self._stale += 1
        if self._stale > len(self._entries) + 16:
            self._heap = [e for e in self._heap if e[3]]
            heapq.heapify(self._heap)
            self._stale = 0

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

    def live_states(self) -> list[EndpointState]:
        """Every scheduled state (for invariant checks)."""
        return list(self._entries)
