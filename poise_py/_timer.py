"""The balancer's one timer: sleep until the earliest deadline of its clients, then fire them.

Theory of operation
-------------------
Every part of the balancer that needs time to pass (the pool's circuits and outlier
evaluations, active health probes, the no-eligible alert, readiness quarantine, the wait queue's
deadlines, fleet coordination) is a :class:`TimerClient`: a synchronous ``next_deadline()`` that says when
it next has work, and a synchronous ``handle_timer(now)`` that does what is due at
``now``. A client decides; any I/O it decides on goes to a task in the balancer's task
group (a probe, a readiness check), never to a sleep of its own.

:class:`Timer` runs one task for all of them: fire every client that is due, sleep until
the minimum deadline or until :meth:`Timer.wake` says something changed, repeat. The same
loop runs whichever clock the balancer reads. With the backend's clock (the default,
Trio's ``MockClock`` in tests) the sleep ends at the deadline. With an injected clock
(``LoadBalancer(clock=...)``) the loop sleeps ``deadline - clock()`` seconds of backend
time, then reads the injected clock again: if that clock has moved but not far enough,
it sleeps the rest; if it has not moved at all (a manual test clock), it waits for a
wake-up rather than spin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import anyio

_ROUNDS = 8
"""How many times, per client, one pass may fire clients before it lets other tasks run."""


class TimerClient(Protocol):
    """A part of the balancer that needs time to pass: pure decisions, no awaits."""

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` next has work (balancer clock), or None."""

    def handle_timer(self, now: float) -> None:
        """Do whatever is due at ``now``; hand any I/O to a task, never wait here."""


class Timer:
    """The one timer task of a balancer.

    Args:
        clients: whom to fire, in order (a client's deadline is read after the ones
            before it have fired, so a change one makes is seen by the next).
    """

    def __init__(self, clients: tuple[TimerClient, ...] = ()) -> None:
        self.clients = clients
        self._wakeup: anyio.Event | None = None

    def wake(self) -> None:
        """Something changed a deadline: look again now (a no-op while the timer is not running)."""
        wakeup = self._wakeup
        if wakeup is not None:
            wakeup.set()

    def fire(self, now: float) -> float | None:
        """Fire every client due at ``now``; return the earliest deadline still ahead, or None.

        Due clients fire earliest deadline first, one at a time, and every deadline is read
        again after each: what one does (a circuit moving) can make another due (the alert
        looks), and an overdue alert looks before the circuit that was due after it moves.
        """
        clients = self.clients
        for _ in range(_ROUNDS * (len(clients) + 1)):
            first: TimerClient | None = None
            first_at = earliest = None
            for client in clients:
                deadline = client.next_deadline()
                if deadline is None:
                    continue
                if deadline <= now:
                    if first_at is None or deadline < first_at:
                        first, first_at = client, deadline
                elif earliest is None or deadline < earliest:
                    earliest = deadline
            if first is None:
                return earliest
            first.handle_timer(now)
        # A client keeps being due at ``now``: a bug in it; look again on the next pass
        # (the loop's zero-second wait is a checkpoint, so the rest of the program runs).
        return now

    async def run(self, clock: Callable[[], float], *, injected: bool) -> None:
        """Fire due clients and sleep until the next deadline or a wake-up; forever.

        Args:
            clock: the balancer's clock.
            injected: True when ``clock`` is not the backend's own: the sleep is then
                measured in backend time and the clock re-read after it (see the module
                docstring).
        """
        try:
            while True:
                # A fresh event before reading deadlines: a change made while firing is seen.
                wakeup = self._wakeup = anyio.Event()
                now = clock()
                deadline = self.fire(now)
                if deadline is None:
                    await wakeup.wait()
                    continue
                with anyio.move_on_after(deadline - now):
                    await wakeup.wait()
                if injected and not wakeup.is_set() and clock() == now:
                    # The injected clock stood still for the whole sleep: sleeping again
                    # would only spin. Whoever moves it also changes something.
                    await wakeup.wait()
        finally:
            self._wakeup = None
