"""An asyncio event loop on virtual time, for the simulator's coordinated fleets.

``loop.time()`` starts at 0 and moves only when every task is waiting: instead of blocking
in the selector until the next timer, the loop jumps its clock to that timer. asyncio runs
ready callbacks first in, first out, so a run is deterministic (Trio's scheduler, by
design, shuffles ready tasks, which is why the simulator does not use its MockClock).
"""

from __future__ import annotations

import asyncio
import selectors


class _JumpingSelector(selectors.DefaultSelector):
    """Polls for I/O without blocking; when nothing is ready, jumps the loop's clock."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if events or timeout == 0:
            return events
        if timeout is None:  # no timer pending: only I/O can wake the loop
            blocked: list[tuple[selectors.SelectorKey, int]] = super().select(None)
            return blocked
        self.now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose clock is virtual and jumps to the next timer when idle."""

    def __init__(self) -> None:
        self._jumping = _JumpingSelector()
        super().__init__(self._jumping)

    def time(self) -> float:
        """Virtual seconds since the loop was made."""
        return self._jumping.now
