"""Readiness quarantine: when an endpoint that failed its ``ready()`` check is checked again.

Theory of operation
-------------------
An endpoint whose resource has a ``ready()`` method is kept out until a check passes. A
failed check quarantines it for ``cooldown`` seconds: :meth:`Quarantine.failed` records
the failure (the endpoint's streak of failures in a row grows) and schedules its next
check at ``now + cooldown``; :meth:`Quarantine.due` hands out the endpoints whose
cool-down has ended, once each; :meth:`Quarantine.passed` ends the streak. Removing an
endpoint forgets it, so a check of it is never due again.

Nothing here reads a clock, awaits or runs a check: ``now`` comes in,
:meth:`Quarantine.next_deadline` goes out, and the shell (``poise_py._membership``) runs
the checks in tasks when the balancer's one timer finds them due.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Quarantine(Generic[K]):
    """Cool-downs between failed readiness checks, per endpoint (keyed by ``K``).

    Args:
        cooldown: seconds between a failed check and the next one.
    """

    def __init__(self, cooldown: float) -> None:
        self.cooldown = cooldown
        self._due: dict[K, float] = {}
        """Endpoints cooling down, and when their next check is due."""
        self._streaks: dict[K, int] = {}
        """Failures in a row of each endpoint that has failed and not passed since."""
        self._heap: list[tuple[float, int, K]] = []
        self._seq = 0

    def failed(self, key: K, now: float) -> int:
        """A check of ``key`` failed at ``now``: quarantine it; returns its failures in a row."""
        streak = self._streaks[key] = self._streaks.get(key, 0) + 1
        at = self._due[key] = now + self.cooldown
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, key))
        return streak

    def passed(self, key: K) -> int:
        """A check of ``key`` passed: forget it; returns the failures it had in a row."""
        self._due.pop(key, None)
        return self._streaks.pop(key, 0)

    def remove(self, key: K) -> None:
        """``key`` left the pool (or its resource was rebuilt): forget it."""
        self._due.pop(key, None)
        self._streaks.pop(key, None)

    def clear(self) -> None:
        """Forget every endpoint (the checks restart from scratch)."""
        self._due.clear()
        self._streaks.clear()
        self._heap.clear()

    def __contains__(self, key: object) -> bool:
        return key in self._due

    def __bool__(self) -> bool:
        """Whether any endpoint is cooling down or has failed checks in a row (anything to forget)."""
        return bool(self._due or self._streaks)

    def next_deadline(self) -> float | None:
        """When :meth:`due` next has an endpoint to hand out, or None."""
        heap = self._heap
        while heap:
            at, _, key = heap[0]
            if self._due.get(key) == at:
                return at
            heapq.heappop(heap)
        return None

    def due(self, now: float) -> list[K]:
        """The endpoints whose cool-down has ended at ``now``; each is handed out once."""
        heap = self._heap
        found: list[K] = []
        while heap and heap[0][0] <= now:
            at, _, key = heapq.heappop(heap)
            if self._due.get(key) == at:
                del self._due[key]
                found.append(key)
        return found
