"""What a simulated backend reports about its own load: an ORCA server's view, on virtual time.

A real server with poise_py's ORCA middleware (``poise_py.contrib.orca``) reports its CPU
utilization and the answers and errors it served per second, each measured over a recent
window. A simulated endpoint has no CPU; its utilization is the share of its capacity in
service. :class:`LoadMeter` keeps both as continuous-time exponential averages over about
``window`` seconds: the busy count is a step function of time, so its average decays towards
the current count between changes; a rate is a sum of decaying impulses of ``1 / window``
per answer, whose expectation is the rate itself.
"""

from __future__ import annotations

import math

from .. import LoadReport


class LoadMeter:
    """One simulated endpoint's time-averaged utilization and answer rates.

    Args:
        window: the averages' time constant, seconds.
    """

    __slots__ = ("_at", "_busy", "_busy_average", "_eps", "_qps", "_window")

    def __init__(self, window: float = 1.0) -> None:
        self._window = window
        self._at = 0.0
        self._busy = 0
        self._busy_average = 0.0
        self._qps = 0.0
        self._eps = 0.0

    def _advance(self, now: float) -> None:
        elapsed = now - self._at
        if elapsed <= 0.0:
            return
        decay = math.exp(-elapsed / self._window)
        self._busy_average = self._busy + (self._busy_average - self._busy) * decay
        self._qps *= decay
        self._eps *= decay
        self._at = now

    def busy(self, now: float, busy: int) -> None:
        """Calls in service changed to ``busy`` at ``now``."""
        self._advance(now)
        self._busy = busy

    def answered(self, now: float, *, error: bool) -> None:
        """The server answered a call at ``now`` (``error``: with a failure)."""
        self._advance(now)
        self._qps += 1.0 / self._window
        if error:
            self._eps += 1.0 / self._window

    def report(self, now: float, capacity: float) -> LoadReport:
        """The report the server attaches to an answer at ``now``, for a ``capacity`` of calls at once."""
        self._advance(now)
        return LoadReport(cpu_utilization=self._busy_average / capacity, qps=self._qps, eps=self._eps)
