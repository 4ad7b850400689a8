"""One endpoint's server side under load: calls in service and a FIFO queue of waiting calls.

An endpoint with a capacity serves at most that many calls at once; a call that finds
every slot busy waits in arrival order, and one that finds the queue at ``max_queue`` is
shed at once. The server does not know when a client gives up: a call abandoned at the
client's deadline is still served when its turn comes, as a real server that read the
request serves it (and as the load lab's backends do), so an overloaded endpoint's queue
holds dead work as well as live.

The station is pure bookkeeping: the engine tells it the capacity in force and when a
service ends, and it answers which calls start now.
"""

from __future__ import annotations

from collections import deque
from enum import Enum
from typing import Generic, TypeVar

T = TypeVar("T")


class Admission(Enum):
    """What an arriving call finds."""

    SERVE = "serve"
    """A slot is free: service starts now."""
    QUEUE = "queue"
    """Every slot is busy: the call waits its turn."""
    SHED = "shed"
    """The queue is full: the endpoint answers its overload status at once."""


class Station(Generic[T]):
    """Slots and a FIFO queue for one endpoint; ``T`` is the engine's call record."""

    __slots__ = ("busy", "peak", "peak_since", "waiting")

    def __init__(self) -> None:
        self.busy = 0
        self.waiting: deque[T] = deque()
        self.peak = 0
        """The longest the queue has been (calls waiting, not those in service)."""
        self.peak_since = 0
        """The longest since :meth:`mark` (a return's first seconds)."""

    @property
    def in_system(self) -> int:
        """Calls in service plus calls waiting: what a shortest-queue oracle compares."""
        return self.busy + len(self.waiting)

    def mark(self) -> None:
        """Start measuring :attr:`peak_since` afresh."""
        self.peak_since = len(self.waiting)

    def arrive(self, call: T, capacity: float, max_queue: int | None) -> Admission:
        """A call arrives while ``capacity`` calls may be served at once (``math.inf``: unlimited)."""
        if self.busy < capacity and not self.waiting:
            self.busy += 1
            return Admission.SERVE
        if max_queue is not None and len(self.waiting) >= max_queue:
            return Admission.SHED
        self.waiting.append(call)
        depth = len(self.waiting)
        self.peak = max(self.peak, depth)
        self.peak_since = max(self.peak_since, depth)
        return Admission.QUEUE

    def depart(self) -> None:
        """A service ended: its slot is free."""
        self.busy -= 1

    def start_waiting(self, capacity: float) -> list[T]:
        """The queued calls that start now, in arrival order, while slots are free."""
        started: list[T] = []
        waiting = self.waiting
        while waiting and self.busy < capacity:
            self.busy += 1
            started.append(waiting.popleft())
        return started
