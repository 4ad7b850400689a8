"""The running backend's clock, read the cheapest way that gives the same reading (async shell).

Every part of a balancer reads one clock function: the one injected with ``clock=``, or
this module's :func:`backend_clock`, which returns what ``anyio.current_time()`` reads
without its per-call dispatch. Two backends' default clocks are a documented function plus
a constant, so they are read directly rather than through a Python method call (a call that
times its outcomes reads the clock twice, and the method call was most of its cost):

- asyncio's default event loop: ``loop.time()`` is ``time.monotonic()``
  (``asyncio.BaseEventLoop.time``), so the clock is ``time.monotonic`` itself;
- Trio's default clock (``SystemClock``): ``current_time()`` is ``offset + perf_counter()``,
  so the :class:`Clock` computes that sum itself, with the same ``offset``. It is used only if
  its reading lies between two readings of Trio's own, so a Trio that changed its clock
  would be read through its method again.

Any other clock (Trio's ``MockClock`` in tests, a uvloop loop, a user's ``clock=``) is called
as it is. Either way the balancer takes the same path: only the function differs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import monotonic, perf_counter
from typing import Final, final

import anyio

_perf_counter: Final = perf_counter
"""Bound once: the compiled build reads a ``Final`` from a static, not from the module's dict."""


@final
class Clock:
    """One balancer's clock: a function it calls, or Trio's default clock read natively.

    Calling it reads the time. Every part of the balancer (the permits' exits, the timer,
    the fleet) holds the same one.

    Args:
        function: the clock function (the injected ``clock=``, or the backend's).
        offset: for Trio's default clock only, its ``offset``: the reading is then
            ``offset + perf_counter()``, computed here rather than by a method call.
    """

    __slots__ = ("function", "native", "offset")

    def __init__(self, function: Callable[[], float], offset: float | None = None) -> None:
        self.function: Callable[[], float] = function
        self.native: bool = offset is not None
        self.offset: float = 0.0 if offset is None else offset

    def now(self) -> float:
        """The current reading (the hot path calls this: in the compiled build a C call)."""
        if self.native:
            return self.offset + _perf_counter()
        return self.function()

    def __call__(self) -> float:
        return self.now()

    def __repr__(self) -> str:
        return f"Clock({self.function!r}, offset={self.offset!r})" if self.native else f"Clock({self.function!r})"


def backend_clock() -> Clock:
    """The running backend's clock: what ``anyio.current_time()`` reads, minus the dispatch."""
    cancelled = anyio.get_cancelled_exc_class()
    if cancelled.__module__.startswith("trio"):
        import trio  # noqa: PLC0415 - only when running on Trio

        return _trio_clock(trio.lowlevel.current_clock())
    if cancelled is asyncio.CancelledError:
        loop = asyncio.get_running_loop()
        if type(loop).time is asyncio.BaseEventLoop.time:  # not overridden: time.monotonic()
            return Clock(monotonic)
        return Clock(loop.time)
    return Clock(anyio.current_time)  # pragma: no cover - another anyio backend


def _trio_clock(clock: object) -> Clock:
    """``clock`` as a :class:`Clock`: read natively if it is Trio's default clock."""
    read: Callable[[], float] = clock.current_time  # type: ignore[attr-defined]
    offset = getattr(clock, "offset", None)
    if type(clock).__name__ != "SystemClock" or type(offset) is not float:
        return Clock(read)  # MockClock, or a clock the caller gave trio.run
    fast = Clock(read, offset)
    before = read()
    reading = fast()
    if before <= reading <= read():
        return fast
    return Clock(read)  # a Trio whose SystemClock is no longer offset + perf_counter()
