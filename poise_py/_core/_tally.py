"""What a call counts: its circuit's counts and gate, and the pool's per-call counters (pure core).

A :class:`Tally` holds a circuit's outcome counts (the two runs of faults, SUSPECT and
FATAL strikes and TRANSIENT faults, and the volume, or the outcome window when one is
kept) and the fields the fast path reads before counting anything: ``fast_ticket`` (the
ticket of the CLOSED epoch, None otherwise), ``success_needs_now`` (whether a success needs
the time), ``counts_only`` and ``slow_limit``. The circuit (``_circuit.py``) owns the state machine
and writes those at every move; the tally only counts. Beside them it holds the counters
the pool keeps for every call (in flight, successes, whether the endpoint is live and a
candidate of its scope, its load slot).

It is its own class so that the pool's record of an endpoint (:class:`~poise_py._core._record.Member`)
can *be* its circuit's tally, a subclass: why, and the order the fields are declared in
for it, are written once, in ``_record.py``'s docstring ("The record's layout"). A
circuit built on its own (the circuit's tests, the fleet's state machine tests) makes a
plain tally, whose pool counters stay unused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ._window import Window

if TYPE_CHECKING:
    from mypy_extensions import u8

    from ._circuit import Ticket

UNHOMED: Final[list[int]] = []
"""Every record's :attr:`Tally.loads` until the pool homes it: one shared empty list, never
written (a record writes its load only while it is a candidate, and becoming one homes it).
Shared so that a record costs the garbage collector one object fewer (a 200,000-endpoint
update allocates the records of a whole pool)."""

SATURATED: Final = 2**64 - 1
"""Observation counters stop here instead of wrapping: lost precision, never a wrap."""

CARRY_LIMIT: Final = SATURATED - 255
"""The highest ``Tally.successes_high``: with a full low byte it makes :data:`SATURATED`."""

RUN: Final = 1 << 32
"""One TRANSIENT fault in :attr:`Tally.runs` (the TRANSIENT run is its high part)."""
LOW: Final = RUN - 1
"""The SUSPECT run's mask; each run saturates at this many."""


class Tally:
    """One circuit's counts and fast-path gate, and the pool's per-call counters (see the module docstring).

    Attributes:
        fast_ticket: the ticket every call gets while the circuit is CLOSED, else None. The
            pool's hot path reads only this to admit a call.
        runs: both runs in one int (SUSPECT in the low 32 bits, TRANSIENT above), so a
            success ends both with one store.
        volume_room: how many more outcomes the volume counts while no window is kept:
            ``volume_cap`` less :attr:`volume`. A success counts down to 0 and reads no
            cap (one hot field instead of two; :meth:`set_volume_cap` and :meth:`clear`
            fill it).
        inflight: the pool's permits in flight on this endpoint.
        successes_low: the low byte of :attr:`successes` (0-255): the part a success
            writes. An int above 256 is an object of its own in the interpreted build (a
            success past it allocated one, and fetched the line it sat on); compiled, it is
            one byte (``u8``) in the flags' word. So the count a call touches stays a
            cached small int; the rest is carried in steps of 256 into
            ``successes_high``, a cold field, every 256th success.
        success_needs_now: whether recording a success needs a real ``now`` (see :meth:`record_success`).
        counts_only: no slow limit and no window (``slow_limit`` and ``window`` both None):
            a CLOSED success changes the runs and the volume only, and the fast path reads
            neither. :meth:`set_rules` keeps it.
        live: whether the endpoint is still in the pool (a record that left never returns).
        is_candidate: ``pos >= 0``, kept by the scope beside ``pos``: the pool tests this instead
            of ``pos`` (on the exit, interpreted, an int above 256 is an object of its own,
            one more line to fetch).
        pos: position among its home scope's candidates (``candidates[pos] is self``), or -1.
        loads: ``home.loads``: where the hot path stores ``inflight`` at ``pos``.
        slow_limit: successes at least this long take the long way (None: no limit).
        window: the outcome window, or None when only the volume matters.
        volume_cap: the count window's size (what :attr:`volume` stops at; 0 with a time window).
        successes_high: :attr:`successes` less its low byte: a multiple of 256, at most
            :data:`CARRY_LIMIT`.
    """

    # Declared types (for type checkers and the public type surface); values are set in __init__.
    # Their order is the record's layout: see "The record's layout" in _record.py.
    fast_ticket: Ticket | None
    runs: int
    volume_room: int
    inflight: int
    successes_low: u8
    success_needs_now: bool
    counts_only: bool
    live: bool
    is_candidate: bool
    pos: int
    loads: list[int]
    slow_limit: float | None
    window: Window | None
    volume_cap: int
    successes_high: int

    __slots__ = (
        "counts_only",
        "fast_ticket",
        "inflight",
        "is_candidate",
        "live",
        "loads",
        "pos",
        "runs",
        "slow_limit",
        "success_needs_now",
        "successes_high",
        "successes_low",
        "volume_cap",
        "volume_room",
        "window",
    )

    def __init__(self) -> None:
        self.fast_ticket = None
        self.runs = 0
        self.volume_room = 0
        self.inflight = 0
        self.successes_low = 0
        self.success_needs_now = False
        self.counts_only = True
        self.live = True
        self.is_candidate = False
        self.pos = -1
        self.loads = UNHOMED
        self.slow_limit = None
        self.window = None
        self.volume_cap = 0
        self.successes_high = 0

    def set_rules(self, slow_limit: float | None, window: Window | None) -> None:
        """Set what a success is checked against and counted in, and :attr:`counts_only` with them."""
        self.slow_limit = slow_limit
        self.window = window
        self.counts_only = slow_limit is None and window is None

    def set_volume_cap(self, cap: int) -> None:
        """Count the volume up to ``cap`` outcomes (the count window's size; 0 with a time window), from none."""
        self.volume_cap = cap
        self.volume_room = cap

    @property
    def volume(self) -> int:
        """Outcomes counted while no window is kept, up to :attr:`volume_cap` (``volume_cap - volume_room``)."""
        return self.volume_cap - self.volume_room

    @property
    def successes(self) -> int:
        """Calls reported successful, saturating at ``2**64 - 1`` (the two parts' sum)."""
        return self.successes_high + int(self.successes_low)

    @successes.setter
    def successes(self, value: int) -> None:
        value = min(max(value, 0), SATURATED)
        self.successes_low = value & 255
        self.successes_high = value - (value & 255)

    def count_success(self) -> None:
        """One more success, saturating at ``2**64 - 1``: the low byte, carried one call in 256.

        The long way's count (``Pool.complete``); ``Pool.succeed`` inlines it for the hot
        path (the method call would cost an interpreted call about a hundred instructions):
        keep the two in step.
        """
        n = self.successes_low
        if n < 255:
            self.successes_low = n + 1
        else:
            self.carry_success()

    def carry_success(self) -> None:
        """Count the success that fills the low byte: 256 more in the high part, unless saturated.

        The pool's exit calls this when ``successes_low`` is 255 (one call in 256); at
        ``2**64 - 1`` the count stays where it is.
        """
        if self.successes_high < CARRY_LIMIT:
            self.successes_high += 256
            self.successes_low = 0

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
        ``now`` and ``started`` (when the call began) are read only when :attr:`success_needs_now` is True.
        """
        if ticket is not self.fast_ticket:
            return False
        if not self.counts_only:  # else no slow limit, no window: the fields past the first line stay unread
            slow_limit = self.slow_limit
            if slow_limit is not None and now - started >= slow_limit:
                return False  # slow (or every success timed): the long way, which may trip
            window = self.window
            if window is not None:
                self.runs = 0  # a success in time: no trip can follow
                window.add(0, now)
                return True
        self.runs = 0  # a success in time: no trip can follow
        room = self.volume_room
        if room:
            self.volume_room = room - 1
        return True

    def add(self, flags: int, now: float) -> None:
        """Count one outcome with ``flags`` (``FAILED``, ``SLOW``) in the window or the volume."""
        # record_success inlines this for the CLOSED-success hot path: keep them in step.
        window = self.window
        if window is None:
            room = self.volume_room
            if room:
                self.volume_room = room - 1
        else:
            window.add(flags, now)

    def counts(self, now: float) -> tuple[int, int, int]:
        """``(volume, failures, slow)`` of the outcome window."""
        window = self.window
        return (self.volume, 0, 0) if window is None else window.counts(now)

    def clear(self) -> None:
        """Forget every outcome and end both runs (a move to a new CLOSED epoch)."""
        self.runs = 0
        self.volume_room = self.volume_cap
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
