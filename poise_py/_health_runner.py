"""The async side of active health checks: starts probes and feeds their verdicts to the pool.

Decide, then do I/O: the pure :class:`~poise_py._core._health_schedule.HealthScheduler` says which
probes are due and what a result means (:func:`~poise_py._core._health_schedule.verdict`);
:class:`HealthRunner` is a client of the balancer's one timer (:mod:`poise_py._timer`):
``next_deadline`` is the scheduler's, and ``handle_timer`` only starts the due probes in
the balancer's task group. A probe task times the probe out and hands the result back;
the verdict reaches eligibility through :meth:`Pool.set_health
<poise_py._core._pool.Pool.set_health>` (O(1), never per call), and a passing probe may
un-eject a passively ejected circuit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import anyio
import anyio.abc

from ._core._health_schedule import (
    HealthCheck,
    HealthScheduler,
    HealthSnapshot,
    HealthStatus,
    ProbeResult,
    ProbeToken,
    refusal,
    verdict,
)
from ._core._pool import Pool
from ._core._record import Member
from ._endpoint import AdminStatus

logger = logging.getLogger("poise_py")


class HealthRunner:
    """Active health checking for one balancer.

    Args:
        check: the probe and its knobs.
        pool: the balancer's pool, whose eligibility the verdicts feed.
        unit: returns a float uniform in [0, 1), for jitter.
    """

    def __init__(
        self,
        check: HealthCheck,
        pool: Pool,
        unit: Callable[[], float],
        *,
        wake: Callable[[], None] | None = None,
        on_change: Callable[[Member, HealthStatus | None, HealthStatus, float], None] | None = None,
    ) -> None:
        self.check = check
        self.scheduler = HealthScheduler(check, unit)
        self._pool = pool
        self._clock: Callable[[], float] = anyio.current_time
        self._task_group: anyio.abc.TaskGroup | None = None
        self.wake: Callable[[], None] = _nothing if wake is None else wake
        """Tell the balancer's timer that the next deadline may have moved."""
        self.unejected = 0
        """Passively ejected circuits closed by a passing probe."""
        self.on_change: Callable[[Member, HealthStatus | None, HealthStatus, float], None] | None = on_change
        """Called when a probe result changes an endpoint's classification (telemetry)."""

    # -- glue (synchronous; every decision is here) --------------------------------------

    def apply(self, now: float, added: Iterable[str], removed: Iterable[str]) -> None:
        """Mirror a pool membership change: track the added ids, drop the removed ones."""
        scheduler = self.scheduler
        for endpoint_id in removed:
            if endpoint_id in scheduler:
                scheduler.remove(endpoint_id)
        members = self._pool.members
        for endpoint_id in added:
            scheduler.add(endpoint_id, now)
            self._publish(members[endpoint_id], HealthStatus.UNKNOWN, now)
        self.wake()

    def set_admin(self, member: Member, status: AdminStatus, now: float) -> None:
        """Apply an operator status: a change bumps the probe generation (see the scheduler)."""
        if self.scheduler.set_admin(member.endpoint.id, status, now):
            self._publish(member, self.scheduler.status(member.endpoint.id), now)
            self.wake()

    def settle(
        self,
        token: ProbeToken,
        member: Member,
        result: ProbeResult,
        now: float,
        *,
        epoch: int,
        error: BaseException | None = None,
    ) -> HealthStatus | None:
        """Record a probe's result; returns the classification, or None if it was stale.

        ``epoch`` is the circuit epoch when the probe started: a passing probe un-ejects
        the circuit only if it is still in that epoch, so a probe that began before the
        circuit opened (or before it moved on) cannot close it.
        """
        scheduler = self.scheduler
        endpoint_id = token.endpoint_id
        before = scheduler.status(endpoint_id) if endpoint_id in scheduler else None
        status = scheduler.record(token, result, now)
        self.wake()
        if status is None:
            return None
        decided = verdict(self.check, before, status, result, epoch=epoch, current_epoch=member.circuit.epoch)
        if decided.changed:
            self._log_change(endpoint_id, status, result, error)
            self._pool.set_health(member, decided.refusal, now)
            if self.on_change is not None:
                self.on_change(member, before, status, now)
        if decided.uneject and self._pool.uneject(member, now):
            self.unejected += 1
        return status

    def cancel(self, token: ProbeToken, now: float) -> None:
        """A probe ended without a result: reschedule it, classify nothing."""
        if self.scheduler.cancel(token, now):
            self.wake()

    def snapshot(self, endpoint_id: str) -> HealthSnapshot | None:
        """The active health view of one endpoint, or None if it is not tracked."""
        scheduler = self.scheduler
        return scheduler.snapshot(endpoint_id) if endpoint_id in scheduler else None

    def _publish(self, member: Member, status: HealthStatus, now: float) -> None:
        self._pool.set_health(member, refusal(self.check, status), now)

    def _log_change(
        self, endpoint_id: str, status: HealthStatus, result: ProbeResult, error: BaseException | None
    ) -> None:
        # One line per classification change: thresholds bound the rate, unlike per-probe logs.
        if status is HealthStatus.UNHEALTHY:
            logger.warning(
                "poise_py: endpoint %r is unhealthy after %d failed probes (last: %s)",
                endpoint_id,
                self.check.unhealthy_threshold,
                repr(error) if error is not None else result.value,
            )
        else:
            logger.info("poise_py: endpoint %r is %s by active checks", endpoint_id, status.value)

    # -- the timer client ----------------------------------------------------------------

    def attach(self, task_group: anyio.abc.TaskGroup, clock: Callable[[], float]) -> None:
        """Start probes in ``task_group`` (the balancer's), reading ``clock``, from now on."""
        self._task_group = task_group
        self._clock = clock
        self.wake()

    def detach(self) -> None:
        """The task group is ending: start no more probes (due ones wait for the next attach)."""
        self._task_group = None

    def next_deadline(self) -> float | None:
        """When a probe is next due, or None (nothing scheduled, or not attached)."""
        return None if self._task_group is None else self.scheduler.next_deadline()

    def handle_timer(self, now: float) -> None:
        """Reserve every probe due at ``now`` and start each in the balancer's task group."""
        task_group = self._task_group
        if task_group is None:
            return
        scheduler = self.scheduler
        members = self._pool.members
        for token in scheduler.due(now):
            member = members.get(token.endpoint_id)
            if member is None:  # left the pool without the runner being told
                scheduler.remove(token.endpoint_id)
                continue
            task_group.start_soon(self._probe, token, member, member.circuit.epoch)

    async def _probe(self, token: ProbeToken, member: Member, epoch: int) -> None:
        error: BaseException | None = None
        try:
            with anyio.move_on_after(self.check.timeout) as scope:
                await self.check.probe(member.endpoint)
        except Exception as exc:  # noqa: BLE001 - a probe's exception is its verdict
            result, error = ProbeResult.FAILED, exc
        except BaseException:  # the balancer is closing (or KeyboardInterrupt): no result
            self.cancel(token, self._clock())
            raise
        else:
            result = ProbeResult.TIMED_OUT if scope.cancelled_caught else ProbeResult.PASSED
        self.settle(token, member, result, self._clock(), epoch=epoch, error=error)


def _nothing() -> None:
    """The default :attr:`HealthRunner.wake`: no timer to tell."""
