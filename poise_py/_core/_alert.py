"""The "no eligible endpoints" alert episode, as a pure state machine.

Theory of operation
-------------------
The first failed selection opens an *episode* (a caller excluding every endpoint is not a
pool outage and opens nothing). The episode is reported (:class:`NoEligiblePersisting`)
once ``after`` seconds have passed since it opened with selections still failing and no
call succeeding; it closes (:class:`NoEligibleCleared` if it was reported) when a call has
succeeded since it opened, or when endpoints are available and nobody has been refused
since the last *look*. One empty result at start-up opens an episode that closes silently
as soon as discovery delivers; refusals further apart than ``after`` are separate
episodes, not one long outage.

A look happens at the episode's deadline (``since + after``: the report fires exactly on
time, not at a polling granularity), on a refusal once that deadline has passed, as soon
as possible after :meth:`NoEligibleAlert.changed` (something that may change availability
happened: a circuit moved, discovery applied, a health verdict), and, while the episode
is reported, once per ``after`` (a recovery that changed nothing observable, such as calls
succeeding under panic routing, is still noticed).

Nothing here reads a clock, awaits or emits: ``now`` and the pool's counts come in
(:class:`PoolView`), :meth:`NoEligibleAlert.next_deadline` and the events to emit go out;
telemetry emits them.
"""

from __future__ import annotations

from typing import Protocol

from .._errors import IneligibleReason, NoEligibleEndpoints, SelectionError
from ._event_values import BalancerEvent, NoEligibleCleared, NoEligiblePersisting


class PoolView(Protocol):
    """What a look needs to know about the pool (read when looking, never on the hot path)."""

    def successes(self) -> int:
        """Calls that succeeded so far, pool-wide (departed endpoints included)."""

    def available(self) -> int:
        """Endpoints that may take a permit now."""

    def total(self) -> int:
        """Endpoints in the pool."""


_NONE: tuple[BalancerEvent, ...] = ()


class NoEligibleAlert:
    """One balancer's no-eligible episode. See the module docstring.

    Args:
        after: seconds selections must keep failing before the report; None disables it.
    """

    def __init__(self, after: float | None) -> None:
        self.after = after
        self._since: float | None = None
        self._alerted = False
        self._last_failure = 0.0
        self._last_error: SelectionError | None = None
        self._successes_at_start = 0
        self._failures_seen = 0
        self._look_at: float | None = None
        """When the next look is due (None: no episode open)."""
        self._report_at = 0.0
        """When the open episode is reported: ``since + after``, computed once. Compared with
        ``now`` as it is, never as ``now - since >= after``, which floating point can keep
        false at ``now == since + after`` (3.2 + 5.0 - 3.2 is 4.999999999999999): the look
        would be due again at once, for ever."""

    @property
    def episode_open(self) -> bool:
        """True while selections have been failing and the episode has not closed."""
        return self._since is not None

    def refused(self, now: float, error: SelectionError, *, failures: int, view: PoolView) -> tuple[BalancerEvent, ...]:
        """A selection failed with ``error``; ``failures`` counts every failed selection so far."""
        self._last_error = error
        after = self.after
        if after is None:
            return _NONE
        if isinstance(error, NoEligibleEndpoints) and error.reasons.get(IneligibleReason.EXCLUDED):
            return _NONE  # the caller excluded endpoints that were eligible: not a pool outage
        since = self._since
        events = _NONE
        if since is None or (not self._alerted and now - self._last_failure > after):
            self._since = now
            self._alerted = False
            self._successes_at_start = view.successes()
            self._failures_seen = failures
            self._look_at = self._report_at = now + after
        elif not self._alerted and now >= self._report_at:
            events = self._look(now, failures, view, failing=True)
        self._last_failure = now
        return events

    def changed(self, now: float) -> None:
        """Something that may change availability happened: look as soon as the timer runs."""
        look_at = self._look_at
        if look_at is not None and now < look_at:
            self._look_at = now

    def next_deadline(self) -> float | None:
        """When the next look is due, or None (no episode open)."""
        return self._look_at

    def handle_timer(self, now: float, *, failures: int, view: PoolView) -> tuple[BalancerEvent, ...]:
        """Look at the episode if a look is due at ``now``; return the events to emit."""
        look_at = self._look_at
        if look_at is None or now < look_at:
            return _NONE
        return self._look(now, failures, view, failing=False)

    def _look(self, now: float, failures: int, view: PoolView, *, failing: bool) -> tuple[BalancerEvent, ...]:
        since = self._since
        after = self.after
        assert since is not None  # noqa: S101 - only with an episode open
        assert after is not None  # noqa: S101 - no episode opens without it
        recovered = view.successes() > self._successes_at_start or (
            not failing and failures == self._failures_seen and view.available() > 0
        )
        self._failures_seen = failures
        if recovered:
            alerted = self._alerted
            self._since = None
            self._alerted = False
            self._look_at = None
            return (NoEligibleCleared(at=now, since=since),) if alerted else _NONE
        if self._alerted:
            self._look_at = now + after
            return _NONE
        if now < self._report_at:
            self._look_at = self._report_at
            return _NONE
        self._alerted = True
        self._look_at = now + after
        error = self._last_error
        assert error is not None  # noqa: S101 - an episode starts with a failure
        reasons = error.reasons if isinstance(error, NoEligibleEndpoints) else {}
        return (NoEligiblePersisting(at=now, since=since, error=error, reasons=reasons, total=view.total()),)
