"""The shell's two wires to the pure pool (async shell, no awaits here).

:class:`BalancerListener` is the one :class:`~poise_py._core._listener.PoolListener` a
``LoadBalancer`` hands its pool: it fans each report out to telemetry, the fleet
coordinator, the membership, the wait queue (``replan``), the timer's wake-up and the
drain waiters. :class:`PermitExit` is what every :class:`~poise_py.Permit` is given at
creation to report its end: the pool, the clock and the balancer's verdict on an
exception, so a permit reads no other object's private state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ._decision import DecisionMode
from ._events import ConcurrencyLimitChanged, PanicEnded, PanicStarted, SlowStartBegan, SlowStartEnded

if TYPE_CHECKING:
    import anyio

    from ._clock import Clock
    from ._coordination._coordinator import Coordinator
    from ._core._circuit import Ticket, Transition
    from ._core._pool import Pool
    from ._core._record import Member
    from ._faults import Classification, Fault
    from ._load_report import LoadReport
    from ._membership import Membership
    from ._quota import Quota
    from ._telemetry import Telemetry

ExitVerdict = Callable[[BaseException, str], "Classification | None"]
"""How a permit block left by an exception is recorded: (fault, retry_after), or None to cancel."""


class PermitExit:
    """How a permit's end reaches the pool: one per balancer, shared by all its permits.

    Attributes:
        pool: the pool the permits were selected from.
        clock: the balancer's clock (set again when the balancer starts on a backend).
        verdict: the balancer's classification of an exception that left a permit block.
        observer_failed: logs a call observer that raised.
        waiting: True while callers wait for an eligible endpoint (``acquire(wait=...)``):
            every permit's end then calls ``released`` (a concurrency slot may be free).
        released: tells the wait queue a permit ended.
        resources: what the endpoint factory built for each member (the membership's
            table, read by ``Permit.resource``).
    """

    __slots__ = ("clock", "observer_failed", "pool", "released", "resources", "verdict", "waiting")

    def __init__(
        self,
        pool: Pool,
        clock: Clock,
        verdict: ExitVerdict,
        observer_failed: Callable[[object, Exception], None],
        resources: dict[Member, object],
    ) -> None:
        self.pool: Pool = pool
        self.resources: dict[Member, object] = resources
        self.clock: Clock = clock
        self.verdict: ExitVerdict = verdict
        self.observer_failed: Callable[[object, Exception], None] = observer_failed
        self.waiting: bool = False
        self.released: Callable[[], None] = _nothing

    def signal(self, waiting: bool) -> None:  # noqa: FBT001 - the wait queue's one flag
        """Whether callers wait: while they do, each permit's end is reported to ``released``."""
        self.waiting = waiting

    def succeed(self, member: Member, ticket: Ticket, started: float) -> None:
        """Record a success: the hot path of every call (the clock is read only if the circuit needs the time)."""
        self.pool.succeed(member, ticket, self.clock.now() if member.success_needs_now else 0.0, started)
        if self.waiting:
            self.released()

    def finish(
        self,
        member: Member,
        ticket: Ticket,
        started: float,
        fault: Fault,
        retry_after: float | None,
        *,
        overload: bool = False,
    ) -> None:
        """Record a fault of tier ``fault`` (``overload``: load-shaped, see :class:`Classification`)."""
        now = self.clock.now()
        self.pool.complete(
            member, ticket, fault, now, latency=now - started, retry_after=retry_after, overload=overload
        )
        if self.waiting:
            self.released()

    def finish_exc(self, member: Member, ticket: Ticket, started: float, exc: BaseException) -> Fault | None:
        """Record the end of a block left by ``exc``: the classified fault, or (None) a cancellation."""
        verdict = self.verdict(exc, member.endpoint.id)
        if verdict is None:
            self.pool.cancel(member, ticket)
            return None
        self.finish(member, ticket, started, verdict.fault, verdict.retry_after, overload=verdict.overload)
        return verdict.fault

    def cancel(
        self, member: Member, ticket: Ticket, *, counted: bool = True, mode: DecisionMode = DecisionMode.HEALTHY
    ) -> None:
        """Release a permit that ended without an outcome (``counted``: as a cancellation; see ``Pool.cancel``)."""
        self.pool.cancel(member, ticket, counted=counted, mode=mode)
        if self.waiting:
            self.released()

    def report_load(self, member: Member, report: LoadReport) -> None:
        """Keep an endpoint's ORCA load report (utilization: the application's if reported, else the CPU's)."""
        self.pool.report_load(
            member,
            report,
            self.clock.now(),
            utilization=report.application_utilization or report.cpu_utilization,
            qps=report.qps,
            eps=report.eps,
        )

    def report_quota(self, member: Member, quota: Quota) -> None:
        """Keep what an endpoint's provider said of its quota: calls and share left, or spent and when it resets."""
        if quota.exhausted:
            self.pool.report_quota(member, self.clock.now(), remaining=0, resets_in=quota.resets_in)
            return
        share = quota.remaining_fraction
        if quota.requests_remaining is not None or share is not None:  # a tokens-only quota: its share
            self.pool.report_quota(
                member,
                self.clock.now(),
                remaining=quota.requests_remaining,
                resets_in=None,
                share=1.0 if share is None else share,
            )

    def orphan(self, member: Member, ticket: Ticket) -> None:
        """Queue a garbage-collected permit's cancellation (safe inside any pool operation)."""
        self.pool.orphans.append((member, ticket))


class BalancerListener:
    """The balancer's :class:`PoolListener`: fans the pool's reports out to the shell's parts.

    It implements the protocol structurally (the compiled build cannot subclass one).

    Args:
        clock: reads the balancer's current clock, to date panic and degradation events.
        wake: wakes the timer task (a new deadline).
        drain_waiters: ``LoadBalancer.drained`` callers, by endpoint (shared with it).
        telemetry: counts, logs and emits what the pool reports.
        membership: releases a departed endpoint's resource once it is idle.
        coordinator: mirrors circuit moves to the fleet, or None.
        replan: told when the set of endpoints that may take permits changed (the wait queue).

    Every part it fans out to is built before it, each with the pool; the pool is then
    given this listener (``Pool.listen``): the one link made after construction, because
    the pool and the parts that read it report to each other.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        wake: Callable[[], None],
        drain_waiters: dict[Member, anyio.Event],
        *,
        telemetry: Telemetry | None = None,
        membership: Membership | None = None,
        coordinator: Coordinator | None = None,
        replan: Callable[[], None] | None = None,
    ) -> None:
        self.clock = clock
        self.wake = wake
        self.drain_waiters = drain_waiters
        self.telemetry: Telemetry | None = telemetry
        self.membership: Membership | None = membership
        self.coordinator: Coordinator | None = coordinator
        self.replan: Callable[[], None] = _nothing if replan is None else replan
        """Told when the set of endpoints that may take permits changed (the wait queue)."""

    def transition(self, member: Member, transition: Transition) -> None:
        """Wake the timer for a new deadline, mirror the move to the fleet, log and emit it."""
        if transition.reopen_at is not None:
            self.armed()
        if self.coordinator is not None:
            self.coordinator.moved(member, transition)
        if self.telemetry is not None:
            self.telemetry.on_transition(member, transition)

    def idle(self, member: Member) -> None:
        """Wake a drain waiter; release a departed endpoint's resource."""
        waiter = self.drain_waiters.pop(member, None)
        if waiter is not None:
            waiter.set()
        if not member.live and self.membership is not None:
            self.membership.idle(member)

    def panic(self, tier: int, *, started: bool, healthy_share: float) -> None:
        """PanicStarted / PanicEnded (logged by telemetry)."""
        if self.telemetry is not None:
            event = PanicStarted if started else PanicEnded
            self.telemetry.emit(event(at=self.clock(), tier=tier, healthy_share=healthy_share))

    def degraded(self, member: Member, degraded: bool) -> None:  # noqa: FBT001
        """EndpointDegraded / EndpointDegradationEnded."""
        if self.telemetry is not None:
            self.telemetry.degraded(member, degraded, self.clock())

    def left(self, states: list[Member]) -> None:
        """Telemetry folds the departed endpoints' counters."""
        if self.telemetry is not None:
            self.telemetry.left(states)

    def armed(self) -> None:
        """Wake the timer task so it waits for the new deadline."""
        self.wake()

    def probe_result(self, member: Member) -> None:
        """Hand a freed leased probe slot back to the fleet."""
        if self.coordinator is not None:
            self.coordinator.probe_result(member)

    def ramp(self, member: Member, *, started: bool) -> None:
        """SlowStartBegan / SlowStartEnded."""
        if self.telemetry is not None:
            event = SlowStartBegan if started else SlowStartEnded
            self.telemetry.emit(event(at=self.clock(), endpoint_id=member.endpoint.id))

    def replanned(self) -> None:
        """The eligible set changed: waiters may be served."""
        self.replan()

    def limit_changed(self, member: Member, limit: int, previous: int) -> None:
        """ConcurrencyLimitChanged (the pool reports a step, not every nudge)."""
        if self.telemetry is not None:
            self.telemetry.emit(
                ConcurrencyLimitChanged(at=self.clock(), endpoint_id=member.endpoint.id, limit=limit, previous=previous)
            )


def _nothing() -> None:
    """The default hook: nobody listens."""
