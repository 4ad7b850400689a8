"""What a circuit counts, and its CLOSED-success fast path (pure core).

A :class:`Tally` holds a circuit's outcome counts: the two runs of faults (SUSPECT and
FATAL strikes, TRANSIENT faults) and the volume, or the outcome window when one is kept.
Beside them it holds the three fields the fast path reads before counting anything:
``admit`` (the ticket of the CLOSED epoch, None otherwise), ``clocked`` (whether a
success needs the time) and ``slow_limit``. The circuit (``_circuit.py``) owns the state
machine and writes those three at every move; the tally only counts.

It is its own object so that the pool's endpoint record can *be* its circuit's tally (a
subclass, ``_record.py``): a call then touches the record alone, its tally first, and
never the circuit, whose state machine stays in a separate, cold object
(``docs/performance.md``, scaling). A circuit built on its own (the circuit's tests, the
fleet's state machine tests) makes a plain tally.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ._window import Window

if TYPE_CHECKING:
    from ._circuit import Ticket

RUN: Final = 1 << 32
"""One TRANSIENT fault in :attr:`Tally.runs` (the TRANSIENT run is its high part)."""
LOW: Final = RUN - 1
"""The SUSPECT run's mask; each run saturates at this many."""


class Tally:
    """One circuit's counts and fast-path gate (see the module docstring).

    Attributes:
        admit: the ticket every call gets while the circuit is CLOSED, else None. The
            pool's hot path reads only this to admit a call.
        clocked: whether recording a success needs a real ``now`` (see :meth:`record_success`).
        runs: both runs in one int (SUSPECT in the low 32 bits, TRANSIENT above), so a
            success ends both with one store.
        volume: outcomes counted while no window is kept (for the minimum-volume gate),
            up to ``volume_cap``.
        slow_limit: successes at least this long take the long way (None: no limit).
        window: the outcome window, or None when only the volume matters.
        volume_cap: the count window's size (what ``volume`` stops at).
    """

    # Declared types (for type checkers and the public type surface); values are set in __init__.
    # The compiled build lays fields out in this order, first in the object (a subclass's come
    # after), so a call's fast path reads the object's first lines only.
    admit: Ticket | None
    clocked: bool
    runs: int
    volume: int
    slow_limit: float | None
    window: Window | None
    volume_cap: int

    __slots__ = ("admit", "clocked", "runs", "slow_limit", "volume", "volume_cap", "window")

    def __init__(self) -> None:
        self.admit = None
        self.clocked = False
        self.runs = 0
        self.volume = 0
        self.slow_limit = None
        self.window = None
        self.volume_cap = 0

    @property
    def consecutive_failures(self) -> int:
        """The current run of SUSPECT (and FATAL) faults."""
        return self.runs & LOW

    @property
    def consecutive_transient_failures(self) -> int:
        """The current run of TRANSIENT faults (a success ends it; other faults do not)."""
        return self.runs >> 32

    def record_success(self, ticket: Ticket, now: float, started: float) -> bool:
        """Record a success on the CLOSED fast path; False if it needs the circuit's ``record``.

        The hot path of every call: True when ``ticket`` is this CLOSED epoch's and the
        success was counted in place (no move can follow a success in time). False,
        changing nothing, for a probe, a stale ticket, a slow success, a degraded circuit
        or a latency-measuring pool: the caller then records it with ``Circuit.record``.
        ``now`` and ``started`` (when the call began) are read only when :attr:`clocked` is True.
        """
        if ticket is not self.admit:
            return False
        slow_limit = self.slow_limit
        if slow_limit is not None and now - started >= slow_limit:
            return False  # slow (or every success timed): the long way, which may trip
        self.runs = 0  # a success in time: no trip can follow
        window = self.window
        if window is None:
            if self.volume < self.volume_cap:
                self.volume += 1
        else:
            window.add(0, now)
        return True

    def add(self, flags: int, now: float) -> None:
        """Count one outcome with ``flags`` (``FAILED``, ``SLOW``) in the window or the volume."""
        # record_success inlines this for the CLOSED-success hot path: keep them in step.
        window = self.window
        if window is None:
            if self.volume < self.volume_cap:
                self.volume += 1
        else:
            window.add(flags, now)

    def counts(self, now: float) -> tuple[int, int, int]:
        """``(volume, failures, slow)`` of the outcome window."""
        window = self.window
        return (self.volume, 0, 0) if window is None else window.counts(now)

    def clear(self) -> None:
        """Forget every outcome and end both runs (a move to a new CLOSED epoch)."""
        self.runs = 0
        self.volume = 0
        if self.window is not None:
            self.window.clear()

    def strike(self) -> None:
        """One more SUSPECT or FATAL fault in the run (saturating)."""
        runs = self.runs
        if runs & LOW < LOW:
            self.runs = runs + 1

    def transient(self) -> int:
        """One more TRANSIENT fault in its run (saturating); returns the run."""
        runs = self.runs
        if runs >> 32 < LOW:
            runs = self.runs = runs + RUN
        return runs >> 32
