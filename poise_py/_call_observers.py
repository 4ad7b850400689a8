"""Call observers: one report per ended permit, for metrics that need every call's duration.

``LoadBalancer.add_call_observer`` switches ``acquire`` to an :class:`ObservedPermit`,
a :class:`~poise_py.Permit` that reads the balancer's clock when issued and, after its
outcome has been recorded exactly as a plain permit's would be, hands a
:class:`CallEnded` to each observer. With no observer, ``acquire`` builds plain permits
and the hot path pays one attribute test.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

import attrs

from ._endpoint import Endpoint  # at run time: the compiled build reads CallEnded's annotations
from ._faults import Fault
from ._permit import Permit

if TYPE_CHECKING:
    from ._core._pool import Selection
    from ._pool_wires import PermitExit


@attrs.frozen(kw_only=True)
class CallEnded:
    """One permit's end, as a call observer sees it.

    Attributes:
        endpoint: the endpoint the permit was for.
        fault: the fault tier recorded, or None for a success or a cancellation.
        cancelled: True if the permit ended without an outcome (not a fault).
        duration: seconds from ``acquire`` to the report, on the balancer's clock.
        probe: True if the permit was a half-open trial.
        superseded: True if the call lost a race to another endpoint's answer (a hedge,
            ``permit.cancel(superseded=True)``); then ``cancelled`` is True too.
    """

    endpoint: Endpoint
    fault: Fault | None
    cancelled: bool
    duration: float
    probe: bool
    superseded: bool = False

    @property
    def outcome(self) -> str:
        """``"success"``, ``"cancelled"``, ``"superseded"`` (a hedge's loser), or the fault tier's value."""
        if self.superseded:
            return "superseded"
        if self.cancelled:
            return "cancelled"
        return "success" if self.fault is None else self.fault.value


CallObserver = Callable[[CallEnded], object]
"""A call observer: called synchronously when a permit ends; must not block."""


class ObservedPermit(Permit):
    """A permit that reports its end to the balancer's call observers."""

    __slots__ = ("_issued", "_observers")

    def __init__(self, exit_: PermitExit, selected: Selection, observers: tuple[CallObserver, ...]) -> None:
        super().__init__(exit_, selected)
        self._observers = observers
        self._issued = exit_.clock.now()

    def succeed(self) -> None:
        """Report success."""
        super().succeed()
        self._report(None, cancelled=False)

    def fail(self, fault: Fault = Fault.SUSPECT, *, retry_after: float | None = None, overload: bool = False) -> None:
        """Report a failure of tier ``fault``."""
        super().fail(fault, retry_after=retry_after, overload=overload)
        self._report(fault, cancelled=False)

    def cancel(self, *, superseded: bool = False) -> None:
        """Report that the call ended without an outcome (``superseded``: it lost a hedge's race)."""
        super().cancel(superseded=superseded)
        self._report(None, cancelled=True, superseded=superseded)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.done:
            return
        if exc is None:
            self.succeed()
            return
        # As a plain permit's exit: the classifier's verdict is recorded as it is.
        self._claim()
        fault = self._exit.finish_exc(self._state, self._ticket, self._started, exc)
        self._report(fault, cancelled=fault is None)

    def _report(self, fault: Fault | None, *, cancelled: bool, superseded: bool = False) -> None:
        exit_ = self._exit
        ended = CallEnded(
            endpoint=self.endpoint,
            fault=fault,
            cancelled=cancelled,
            duration=max(0.0, exit_.clock.now() - self._issued),
            probe=self.probe,
            superseded=superseded,
        )
        for observer in self._observers:
            try:
                observer(ended)
            except Exception as exc:  # noqa: BLE001 - an observer must not break the caller's call
                exit_.observer_failed(observer, exc)
