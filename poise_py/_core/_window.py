"""Outcome windows that forget (pure core: ``now`` comes in, nothing is read).

A window holds the recent outcomes of one endpoint's calls in the CLOSED state and
answers three questions: how many (the volume), how many failed, how many were slow.
Two shapes, both O(1) per outcome:

- :class:`CountRing` (configured by ``CountWindow``): the last ``size`` outcomes (a ring
  buffer). Forgets by volume: old outcomes fall out as new ones arrive. Predictable under
  light traffic.
- :class:`TimeRing` (configured by ``TimeWindow``): outcomes of the last ``duration``
  seconds, in ``buckets`` slices. Forgets by time: an idle endpoint's old blips expire by
  themselves.

Cancellations, CALLER faults and TRANSIENT faults never enter a window. The two
configurations (``CountWindow``, ``TimeWindow``) are circuit knobs, in ``_circuit_policy.py``.
"""

from __future__ import annotations

from typing import TypeAlias

FAILED = 1
SLOW = 2

_NO_TICK = -(1 << 62)
"""``TimeRing``'s tick while no bucket is being filled (no clock reads that far back)."""


class CountRing:
    """The last ``size`` outcomes, in a ring of flag bytes, with running totals."""

    __slots__ = ("_failures", "_pos", "_ring", "_size", "_slow", "_volume")

    def __init__(self, size: int) -> None:
        self._size = size
        self._ring = bytearray(size)
        self._pos = 0
        self._volume = 0
        self._failures = 0
        self._slow = 0

    def add(self, flags: int, now: float) -> None:
        pos = self._pos
        ring = self._ring
        if self._volume == self._size:
            old = ring[pos]
            if old:
                self._failures -= old & FAILED
                self._slow -= (old & SLOW) >> 1
        else:
            self._volume += 1
        ring[pos] = flags
        if flags:
            self._failures += flags & FAILED
            self._slow += (flags & SLOW) >> 1
        pos += 1
        self._pos = 0 if pos == self._size else pos

    def counts(self, now: float) -> tuple[int, int, int]:
        return self._volume, self._failures, self._slow

    def clear(self) -> None:
        self._ring = bytearray(self._size)
        self._pos = self._volume = self._failures = self._slow = 0


class TimeRing:
    """Buckets indexed by ``floor(now / width)``; a bucket older than the window is reset.

    The bucket being filled is counted in three integer fields and written to its slot when
    the clock moves to another bucket (or the window is read), so recording an outcome
    touches no list.
    """

    __slots__ = (
        "_epochs",
        "_failures",
        "_n",
        "_now_failures",
        "_now_slow",
        "_now_volume",
        "_slow",
        "_tick",
        "_volume",
        "_width",
    )

    def __init__(self, duration: float, buckets: int) -> None:
        self._n = buckets
        self._width = duration / buckets
        self._epochs = [-1] * buckets
        self._volume = [0] * buckets
        self._failures = [0] * buckets
        self._slow = [0] * buckets
        self._tick = _NO_TICK
        """The bucket being filled (its counts are the ``_now_*`` fields), or ``_NO_TICK``."""
        self._now_volume = self._now_failures = self._now_slow = 0

    def add(self, flags: int, now: float) -> None:
        tick = int(now // self._width)
        if tick != self._tick:
            self._move_to(tick)
        self._now_volume += 1
        if flags:
            self._now_failures += flags & FAILED
            self._now_slow += (flags & SLOW) >> 1

    def _move_to(self, tick: int) -> None:
        """Write the bucket being filled to its slot; continue ``tick``'s slot, or start it empty."""
        self._store()
        i = tick % self._n
        if self._epochs[i] == tick:
            self._now_volume, self._now_failures, self._now_slow = self._volume[i], self._failures[i], self._slow[i]
        else:
            self._now_volume = self._now_failures = self._now_slow = 0
        self._tick = tick

    def _store(self) -> None:
        tick = self._tick
        if tick != _NO_TICK:
            i = tick % self._n
            self._epochs[i] = tick
            self._volume[i] = self._now_volume
            self._failures[i] = self._now_failures
            self._slow[i] = self._now_slow

    def counts(self, now: float) -> tuple[int, int, int]:
        self._store()
        oldest = int(now // self._width) - self._n + 1
        volume = failures = slow = 0
        for i, tick in enumerate(self._epochs):
            if tick >= oldest:
                volume += self._volume[i]
                failures += self._failures[i]
                slow += self._slow[i]
        return volume, failures, slow

    def clear(self) -> None:
        # The counts go too: ``counts`` keeps any bucket whose tick is not older than the
        # window, and while the clock reads under one window's duration a cleared tick
        # of -1 is not.
        n = self._n
        self._epochs = [-1] * n
        self._volume = [0] * n
        self._failures = [0] * n
        self._slow = [0] * n
        self._tick = _NO_TICK
        self._now_volume = self._now_failures = self._now_slow = 0


Window: TypeAlias = CountRing | TimeRing
"""What the circuit records outcomes in: ``add(flags, now)``, ``counts(now)`` -> ``(volume,
failures, slow)``, ``clear()``. A union of the two concrete rings rather than a protocol, so
that in the compiled build the circuit's call to ``add`` is a native call."""
