"""Outcome windows that forget (pure core: ``now`` comes in, nothing is read).

A window holds the recent outcomes of one endpoint's calls in the CLOSED state and
answers three questions: how many (the volume), how many failed, how many were slow.
Two shapes, both O(1) per outcome:

- :class:`CountRing` (configured by ``CountWindow``): the last ``size`` outcomes (a ring buffer). Forgets by volume:
  old outcomes fall out as new ones arrive. Predictable under light traffic.
- :class:`TimeRing` (configured by ``TimeWindow``): outcomes of the last ``duration`` seconds, in ``buckets`` slices.
  Forgets by time: an idle endpoint's old blips expire by themselves.

Cancellations, CALLER faults and TRANSIENT faults never enter a window. The two
configurations (``CountWindow``, ``TimeWindow``) are circuit knobs, in ``_circuit_policy.py``.
"""

from __future__ import annotations

from typing import Protocol

FAILED = 1
SLOW = 2


class Window(Protocol):
    """What the circuit needs from an outcome window."""

    def add(self, flags: int, now: float) -> None:
        """Record one outcome; ``flags`` is a bit set of ``FAILED`` and ``SLOW``."""

    def counts(self, now: float) -> tuple[int, int, int]:
        """Return ``(volume, failures, slow)`` over the window at ``now``."""

    def clear(self) -> None:
        """Forget everything (the circuit closed or was reset)."""


class CountRing:
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
    """Buckets indexed by ``floor(now / width)``; a bucket older than the window is reset."""

    __slots__ = ("_epochs", "_failures", "_n", "_slow", "_volume", "_width")

    def __init__(self, duration: float, buckets: int) -> None:
        self._n = buckets
        self._width = duration / buckets
        self._epochs = [-1] * buckets
        self._volume = [0] * buckets
        self._failures = [0] * buckets
        self._slow = [0] * buckets

    def add(self, flags: int, now: float) -> None:
        tick = int(now // self._width)
        i = tick % self._n
        if self._epochs[i] != tick:
            self._epochs[i] = tick
            self._volume[i] = self._failures[i] = self._slow[i] = 0
        self._volume[i] += 1
        if flags:
            self._failures[i] += flags & FAILED
            self._slow[i] += (flags & SLOW) >> 1

    def counts(self, now: float) -> tuple[int, int, int]:
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
