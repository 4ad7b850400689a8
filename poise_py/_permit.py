"""The permit: one reserved call to one endpoint, and how its outcome is reported (async shell).

A permit is given the selection and the balancer's one
:class:`~poise_py._pool_wires.PermitExit` when it is issued, and reports its end there.
"""

from __future__ import annotations

import warnings
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._core._native import mypyc_attr
from ._decision import DecisionMode
from ._errors import PermitError
from ._faults import Fault, check_retry_after
from ._load_report import LoadReport
from ._quota import Quota

if TYPE_CHECKING:
    from ._core._pool import Selection
    from ._decision import Decision
    from ._endpoint import Endpoint
    from ._pool_wires import PermitExit


@mypyc_attr(allow_interpreted_subclasses=True)  # a user's subclass works with the compiled build too
class Permit:
    """A reservation to call :attr:`endpoint`, issued by ``LoadBalancer.acquire``.

    Use it as ``async with lb.acquire() as permit:``. Leaving the block reports the
    outcome: normally -> success; by an exception -> the balancer's classifier decides
    the fault (the exception always propagates); by the backend's cancellation (or any
    non-``Exception`` such as ``KeyboardInterrupt``) -> cancellation, which is not a
    fault. An explicit :meth:`succeed`, :meth:`fail` or :meth:`cancel` inside the block
    wins over the exit. Reporting twice raises :class:`PermitError`, and so does entering
    a permit a second time, or one already reported (one permit is one call: take a new
    one for the next). A permit
    garbage-collected without a report (never entered, say) still counts as a
    cancellation, and emits a :class:`ResourceWarning` naming it, as an unclosed asyncio
    transport does.
    """

    __slots__ = ("_decision", "_done", "_entered", "_exit", "_started", "_state", "_ticket")

    def __init__(self, exit_: PermitExit, selected: Selection) -> None:
        # The pool's selection tuple is taken whole: one argument instead of four, and no
        # unpacking in ``acquire`` (this constructor runs on every call).
        self._done = self._entered = False
        self._exit = exit_
        self._state, self._ticket, self._started, self._decision = selected

    @property
    def endpoint(self) -> Endpoint:
        """The endpoint to call."""
        return self._state.endpoint

    @property
    def resource(self) -> Any:
        """What the balancer's ``endpoint_factory`` built for this endpoint (None without one)."""
        return self._exit.resources.get(self._state)

    @property
    def decision(self) -> Decision:
        """How the endpoint was chosen: HEALTHY, SPILLOVER or PANIC, and from which tier."""
        return self._decision

    @property
    def epoch(self) -> int:
        """The circuit epoch this permit was issued in (a panic permit on an OPEN circuit too)."""
        return self._ticket.epoch

    @property
    def probe(self) -> bool:
        """True if this permit is a half-open trial."""
        return self._ticket.probe

    @property
    def done(self) -> bool:
        """True once an outcome (or cancellation) has been reported."""
        return self._done

    def succeed(self) -> None:
        """Report success."""
        self._claim()
        self._exit.succeed(self._state, self._ticket, self._started)

    def fail(self, fault: Fault = Fault.SUSPECT, *, retry_after: float | None = None, overload: bool = False) -> None:
        """Report a failure of tier ``fault``; ``retry_after`` opens the circuit at least that long.

        ``retry_after`` is honoured up to the circuit policy's ``max_retry_after`` (600 s by
        default).

        ``overload``: the failure is load-shaped (a timeout, an overload answer): while another
        endpoint had one recently it is the pool's load, not a strike (see :class:`Classification`).
        """
        if not isinstance(fault, Fault):
            raise PermitError(f"fault must be a poise.Fault, got {fault!r}")
        if not isinstance(overload, bool):
            raise PermitError(f"overload must be a bool, got {overload!r:.80}")
        try:
            check_retry_after(retry_after)
        except ValueError as exc:
            error = PermitError(str(exc))
            error.__cause__ = None  # `raise ... from None`, spelled so the compiled build keeps it
            raise error from None
        self._claim()
        self._exit.finish(self._state, self._ticket, self._started, fault, retry_after, overload=overload)

    def cancel(self, *, superseded: bool = False) -> None:
        """Report that the call ended without an outcome (not a fault).

        ``superseded``: the call lost a race to another endpoint's answer (a hedge); it is
        not counted as a cancellation either, as if it had never been sent.
        """
        self._claim()
        if superseded:
            self._exit.cancel(self._state, self._ticket, counted=False, mode=self._decision.mode)
        else:
            self._exit.cancel(self._state, self._ticket)

    def report_load(self, report: LoadReport | None) -> None:
        """Tell the balancer what the endpoint's backend said about its own load (an ORCA report).

        Use it when the answer carries a report the transport does not read itself (the
        httpx transport and the gRPC channel read ``endpoint-load-metrics`` on their own):
        ``permit.report_load(poise.load_report_from_headers(response.headers))``, or a
        :class:`~poise_py.LoadReport` built by hand. None (an answer without a report: what
        the reader returns then) says nothing and changes nothing. Allowed before or after
        the outcome is reported (a trailer arrives with the answer); it never changes the
        outcome. :class:`~poise_py.WeightedByLoad` weighs endpoints by these reports; the
        snapshot shows the latest.
        """
        if report is None:
            return
        if not isinstance(report, LoadReport):
            raise PermitError(f"report must be a poise.LoadReport or None, got {type(report).__name__}")
        self._exit.report_load(self._state, report)

    def report_quota(self, quota: Quota | None) -> None:
        """Tell the balancer how much of its provider's rate limit the endpoint's answer said is left.

        The httpx transport does this for every answer carrying rate-limit headers (OpenAI's
        ``x-ratelimit-*``, Anthropic's ``anthropic-ratelimit-*``, the IETF ``RateLimit``
        fields); elsewhere ``permit.report_quota(poise.quota_from_headers(headers))``, where
        None (an answer without rate-limit headers) says nothing and changes nothing. With
        requests left, at most that many calls are in flight to it at once; with its requests
        or tokens spent, it rests until the reset (no strike, no ejection) and comes back
        then without a probe. Allowed before or after the outcome; it never changes it.
        """
        if quota is None:
            return
        if not isinstance(quota, Quota):
            raise PermitError(f"quota must be a poise.Quota or None, got {type(quota).__name__}")
        self._exit.report_quota(self._state, quota)

    def _claim(self) -> None:
        if self._done:
            raise PermitError("this permit's outcome was already reported")
        self._done = True

    async def __aenter__(self) -> Permit:
        if self._entered:
            raise PermitError(f"{self!r} was already entered: one permit is one call, acquire a new one")
        if self._done:  # the block's outcome would have nowhere to go
            raise PermitError(f"{self!r} was already reported: one permit is one call, acquire a new one")
        self._entered = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._done:
            return
        self._done = True
        if exc is None:
            self._exit.succeed(self._state, self._ticket, self._started)  # the hot path
        else:
            self._exit.finish_exc(self._state, self._ticket, self._started, exc)

    def __await__(self) -> object:
        """``await lb.acquire()`` is a mistake: refuse it saying how to use a permit.

        Declared to return an ``object``, not a generator, so type checkers still reject
        the ``await`` (and the compiled build's await slot returns an object). The permit
        was issued already: it is reported as a cancellation.
        """
        if not self._done:
            self.cancel()
        raise PermitError(
            "lb.acquire() returns a permit to use as a context manager, not an awaitable: "
            "write `async with lb.acquire() as permit:`"
        )

    def __del__(self) -> None:
        # Runs at any point, even inside a pool operation (cyclic GC): only enqueue.
        if not self._done:
            self._done = True
            self._exit.orphan(self._state, self._ticket)
            warnings.warn(
                f"unreported permit {self!r}: use `async with lb.acquire() as permit:`; "
                "it was counted as a cancellation",
                ResourceWarning,
                stacklevel=1,
                source=self,
            )

    def __repr__(self) -> str:
        kind = "probe " if self._ticket.probe else ""
        mode = self._decision.mode
        route = "" if mode is DecisionMode.HEALTHY else f" {mode.value}"
        return f"<Permit {kind}{self._state.endpoint.id!r} epoch={self._ticket.epoch}{route}>"
