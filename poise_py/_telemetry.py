"""Telemetry: saturating counters, typed events, rate-limited logs, and emitting the no-eligible alert.

Theory of operation
-------------------
Nothing here runs on the hot path. The per-endpoint counters already live on each
``Member`` (the pool bumps them as it records outcomes); this module only reads
them when asked (:meth:`Telemetry.statistics`), and folds an endpoint's counters into the
pool totals once it has left and its last permit has ended, so totals never go
backwards and the number of series stays bounded by the live pool.

Events come from cold paths only: a circuit move (the listener's ``transition`` calls
:meth:`Telemetry.on_transition`), a discovery update, a failed selection, and whatever
routing, health and coordination code hands to :meth:`Telemetry.emit`. ``emit`` counts
the event, logs it through a per-key rate limit, appends it to every subscriber's bounded
buffer (dropping the oldest, never blocking) and calls the observers synchronously.

The "no eligible endpoints" alert is an episode decided by the pure
:class:`~poise_py._core._alert.NoEligibleAlert`; :class:`Telemetry` feeds it the failed
selections and the pool's counts and emits the events it returns. Telemetry is a client
of the balancer's one timer (:mod:`poise_py._timer`): its ``next_deadline`` is the
episode's next look, so the report fires exactly ``alert_after`` after the episode opened.

Reading (:meth:`Telemetry.statistics`) changes nothing: no alert is evaluated, no counter
folded, so a metrics reader may read from its own thread.
"""

from __future__ import annotations

import itertools
import logging
import math
import weakref
from collections import deque
from collections.abc import Callable
from types import MappingProxyType, TracebackType

import anyio

from ._core._alert import NoEligibleAlert
from ._core._circuit import CircuitState, Transition
from ._core._event_values import BalancerEvent, NoEligibleCleared, NoEligiblePersisting
from ._core._health_schedule import HealthStatus
from ._core._pool import Pool
from ._core._record import FAULT_INDEX, MODE_INDEX, Member
from ._core._tally import SATURATED
from ._decision import DecisionMode
from ._errors import ConfigError, SelectionError
from ._events import (
    CircuitClosed,
    CircuitHalfOpened,
    CircuitOpened,
    CoordinationFallback,
    DiscoveryApplied,
    DiscoveryRejected,
    EndpointDegradationEnded,
    EndpointDegraded,
    EndpointEjected,
    EndpointReadmitted,
    PanicEnded,
    PanicStarted,
)
from ._knobs import check_count
from ._logs import LimitedLog, LogLimit
from ._snapshot import endpoint_counters
from ._statistics import BalancerStatistics, PoolCounters

Observer = Callable[[BalancerEvent], object]
"""An event callback: called synchronously, must not block; its return value is ignored."""

DEFAULT_EVENT_BUFFER = 256

_C, _O, _H = CircuitState.CLOSED, CircuitState.OPEN, CircuitState.HALF_OPEN

# Which level each non-circuit event is logged at (circuit moves are logged as moves).
_EVENT_LEVEL: dict[type[BalancerEvent], int] = {
    DiscoveryApplied: logging.DEBUG,
    DiscoveryRejected: logging.WARNING,
    PanicStarted: logging.WARNING,
    PanicEnded: logging.INFO,
    NoEligiblePersisting: logging.ERROR,
    NoEligibleCleared: logging.INFO,
    CoordinationFallback: logging.WARNING,
    EndpointDegraded: logging.WARNING,
    EndpointDegradationEnded: logging.INFO,
}
# EndpointEjected / EndpointReadmitted are logged where they arise: as circuit moves, or
# by the active health runner (one line per classification change).


def _column_sums(totals: list[int], rows: list[list[int]]) -> list[int]:
    """``totals`` plus each column of ``rows`` (all as long as ``totals``): one flat list, sliced per column."""
    width = len(totals)
    flat = list(itertools.chain.from_iterable(rows))
    return [total + sum(flat[i::width]) for i, total in enumerate(totals)]


FOLD_STEP = 16_384
"""Departed endpoints one step of a fold looks at (about 10 ms of work)."""

FOLD_PAUSE = 0.001
"""Seconds between two steps of a fold: the loop runs between them."""


class _Totals:
    """Counters folded in from endpoints that have left."""

    __slots__ = ("cancellations", "ejections", "faults", "modes", "probes", "stale", "successes")

    def __init__(self) -> None:
        self.successes = 0
        self.faults = [0] * len(FAULT_INDEX)
        self.cancellations = 0
        self.probes = 0
        self.stale = 0
        self.ejections = 0
        self.modes = [0] * len(MODE_INDEX)

    def add(self, states: list[Member]) -> None:
        """Fold ``states``' counters in, a counter at a time (a large departure costs a pass per counter)."""
        if not states:
            return
        self.successes += sum([member.successes for member in states])
        self.faults = _column_sums(self.faults, [member.faults for member in states])
        self.cancellations += sum([member.cancellations for member in states])
        self.probes += sum([member.probes for member in states])
        self.stale += sum([member.stale for member in states])
        self.ejections += sum([member.circuit.ejections for member in states])
        self.modes = _column_sums(self.modes, [member.mode_selections for member in states])

    def copy(self) -> _Totals:
        other = _Totals()
        other.successes = self.successes
        other.faults = list(self.faults)
        other.cancellations = self.cancellations
        other.probes = self.probes
        other.stale = self.stale
        other.ejections = self.ejections
        other.modes = list(self.modes)
        return other


class EventStream:
    """One subscriber's view of the balancer's events, from ``lb.events()``.

    An async iterator with a bounded buffer: when the subscriber falls behind, the oldest
    buffered event is dropped and counted in :attr:`dropped`, so a slow reader never
    blocks the balancer. The stream ends (after its buffer drains) when the balancer
    leaves its ``async with`` block, or when closed with :meth:`aclose` (or by using it as
    ``async with lb.events() as stream:``). A stream nobody references any more stops
    receiving events on its own.
    """

    def __init__(self, telemetry: Telemetry, maxlen: int) -> None:
        self._telemetry = telemetry
        self._buffer: deque[BalancerEvent] = deque(maxlen=maxlen)
        self._maxlen = maxlen
        self._wakeup: anyio.Event | None = None
        self._closed = False
        self.dropped: int = 0
        """Events dropped because the buffer was full (the oldest go first)."""

    def _push(self, event: BalancerEvent) -> None:
        buffer = self._buffer
        if len(buffer) == self._maxlen:
            self.dropped += 1
            self._telemetry.events_dropped += 1
        buffer.append(event)
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    def _end(self) -> None:
        self._closed = True
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    @property
    def closed(self) -> bool:
        """True once the stream will deliver nothing beyond what it has buffered."""
        return self._closed

    def pending(self) -> int:
        """How many events are buffered, not yet read."""
        return len(self._buffer)

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> BalancerEvent:
        await anyio.lowlevel.checkpoint()
        buffer = self._buffer
        while not buffer:
            if self._closed:
                raise StopAsyncIteration
            wakeup = self._wakeup = anyio.Event()
            await wakeup.wait()
        return buffer.popleft()

    async def aclose(self) -> None:
        """Unsubscribe; iteration ends once the buffer is drained."""
        self._telemetry.unsubscribe(self)
        self._end()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class Telemetry:
    """Counters, events, logs and the no-eligible alert for one balancer.

    Args:
        pool: the pool it observes (the balancer's pool listener calls :meth:`left`).
        alert_after: seconds selections must keep failing before
            :class:`NoEligiblePersisting`; None disables the alert.
        log_limit: the per-key log rate limit.
    """

    def __init__(
        self,
        pool: Pool,
        *,
        alert_after: float | None,
        log_limit: LogLimit,
        wake: Callable[[], None] | None = None,
    ) -> None:
        self._pool = pool
        self.log: LimitedLog = LimitedLog(log_limit)
        self.alert: NoEligibleAlert = NoEligibleAlert(alert_after)
        self.wake: Callable[[], None] = _nothing if wake is None else wake
        """Tell the balancer's timer that the alert's next look may have moved."""
        self._observers: list[Observer] = []
        self._streams: weakref.WeakSet[EventStream] = weakref.WeakSet()
        self._counts: dict[type[BalancerEvent], int] = {}
        self._departed = _Totals()
        self._lingering: list[Member] = []
        self._prune_at = 16
        self._unexamined = 0
        """Lingering endpoints the running fold has still to look at (0: no fold running)."""
        self._fold_at = -math.inf
        """When the fold's next step is due, while one runs."""
        self.failed_selections: int = 0
        self.events_dropped: int = 0
        self._dispatching = False
        self._pending: deque[BalancerEvent] = deque()

    # -- events ------------------------------------------------------------------------

    def emit(self, event: BalancerEvent) -> None:
        """Count, log and deliver one event. Never blocks; never raises from a subscriber.

        This is the one entry point for every event, whichever part of the balancer
        produces it (routing's panic, health checks, coordination fallbacks...).
        """
        cls = type(event)
        self._counts[cls] = self._counts.get(cls, 0) + 1
        alert = self.alert
        if alert.episode_open and cls not in _ALERT_EVENTS:
            alert.changed(event.at)  # a circuit moved, discovery applied...: the episode is looked at
            self.wake()
        level = _EVENT_LEVEL.get(cls)
        if level is not None and self.log.logger.isEnabledFor(level):
            self._log_event(level, event)
        for stream in list(self._streams):
            stream._push(event)
        if self._observers:
            if self._dispatching:  # an observer's action emitted: deliver after it returns
                self._pending.append(event)
                return
            self._dispatching = True
            try:
                self._deliver(event)
                pending = self._pending
                while pending:
                    self._deliver(pending.popleft())
            finally:
                self._dispatching = False

    def _deliver(self, event: BalancerEvent) -> None:
        for observer in tuple(self._observers):
            try:
                observer(event)
            except Exception as exc:
                self.log.log(
                    logging.ERROR,
                    ("observer", id(observer)),
                    event.at,
                    "poise_py: event observer %r raised on %s",
                    observer,
                    type(event).__name__,
                    exc_info=exc,
                )

    def count(self, cls: type[BalancerEvent]) -> int:
        """How many events of exactly type ``cls`` were emitted."""
        return self._counts.get(cls, 0)

    def add_observer(self, observer: Observer) -> None:
        """Call ``observer(event)`` for every event from now on."""
        if not callable(observer):
            raise ConfigError("observer", f"must be callable, got {observer!r}")
        self._observers.append(observer)

    def remove_observer(self, observer: Observer) -> None:
        """Stop calling ``observer`` (ValueError if it was not added)."""
        self._observers.remove(observer)

    def subscribe(self, buffer: int = DEFAULT_EVENT_BUFFER) -> EventStream:
        """A new :class:`EventStream` receiving every event from now on."""
        check_count("buffer", buffer)
        stream = EventStream(self, buffer)
        self._streams.add(stream)
        return stream

    def unsubscribe(self, stream: EventStream) -> None:
        """Stop feeding ``stream``."""
        self._streams.discard(stream)

    def close(self) -> None:
        """End every stream (the balancer stopped); they drain what they hold, then stop."""
        for stream in list(self._streams):
            stream._end()
        self._streams.clear()

    def _log_event(self, level: int, event: BalancerEvent) -> None:
        log = self.log.log
        match event:
            case DiscoveryApplied():
                log(
                    level,
                    "discovery",
                    event.at,
                    "poise_py: discovery revision %d applied: +%d -%d ~%d, %d endpoints",
                    event.revision,
                    len(event.added),
                    len(event.removed),
                    len(event.updated),
                    event.size,
                )
            case DiscoveryRejected():
                log(
                    level,
                    "discovery-rejected",
                    event.at,
                    "poise_py: discovery revision %s rejected: %s",
                    event.revision,
                    event.error,
                )
            case PanicStarted() | PanicEnded():
                log(
                    level,
                    ("panic", event.tier),
                    event.at,
                    "poise_py: panic routing %s (tier %s, healthy share %.2f)",
                    "started" if isinstance(event, PanicStarted) else "ended",
                    event.tier,
                    event.healthy_share,
                )
            case NoEligiblePersisting():
                log(
                    level,
                    "no-eligible",
                    event.at,
                    "poise_py: no eligible endpoints for %.3g s: %s",
                    event.at - event.since,
                    event.error,
                )
            case NoEligibleCleared():
                log(
                    level,
                    "no-eligible",
                    event.at,
                    "poise_py: endpoints eligible again after %.3g s",
                    event.at - event.since,
                )
            case CoordinationFallback(endpoint_id=None):
                log(
                    level,
                    (None, "coordination"),
                    event.at,
                    "poise_py: coordination storage %s unreachable, every endpoint uses its local circuit: %s",
                    event.storage or "?",
                    event.error,
                )
            case CoordinationFallback():
                log(
                    level,
                    (event.endpoint_id, "coordination"),
                    event.at,
                    "poise_py: shared record of endpoint %r in %s unusable, it uses its local circuit: %s",
                    event.endpoint_id,
                    event.storage or "?",
                    event.error,
                )
            case EndpointDegraded():
                log(
                    level,
                    (event.endpoint_id, "degraded"),
                    event.at,
                    "poise_py: endpoint %r degraded (%s): max_ejection_percent refused its ejection",
                    event.endpoint_id,
                    None if event.cause is None else event.cause.value,
                )
            case EndpointDegradationEnded():
                log(
                    level,
                    (event.endpoint_id, "degraded"),
                    event.at,
                    "poise_py: endpoint %r no longer degraded (%s)",
                    event.endpoint_id,
                    "ejected" if event.ejected else "recovered",
                )
            case _:
                pass

    def degraded(self, member: Member, degraded: bool, now: float) -> None:  # noqa: FBT001
        """The pool's ``on_degraded`` hook: EndpointDegraded / EndpointDegradationEnded."""
        endpoint_id = member.endpoint.id
        circuit = member.circuit
        if degraded:
            self.emit(EndpointDegraded(at=now, endpoint_id=endpoint_id, cause=circuit.degraded_cause))
        else:
            self.emit(EndpointDegradationEnded(at=now, endpoint_id=endpoint_id, ejected=circuit.state is not _C))

    def on_transition(self, member: Member, transition: Transition) -> None:
        """A circuit moved (the listener's ``transition`` calls this): log the move, emit the circuit events."""
        endpoint_id = member.endpoint.id
        source, target, cause, at = transition.source, transition.target, transition.cause, transition.at
        if target is _O or (source is _C and target is not _C):
            level = logging.WARNING if source is _C else logging.INFO
        elif target is _H:
            level = logging.DEBUG
        else:
            level = logging.INFO
        self.log.log(
            level,
            (endpoint_id, "circuit"),
            at,
            "poise_py: endpoint %r circuit %s -> %s (%s), epoch %d",
            endpoint_id,
            source.value,
            target.value,
            cause.value,
            transition.epoch,
        )
        if target is _O:
            self.emit(
                CircuitOpened(
                    at=at,
                    endpoint_id=endpoint_id,
                    epoch=transition.epoch,
                    cause=cause,
                    previous=source,
                    reopen_at=transition.reopen_at,
                )
            )
        elif target is _H:
            self.emit(CircuitHalfOpened(at=at, endpoint_id=endpoint_id, epoch=transition.epoch, cause=cause))
        elif target is _C:
            if source is not _C:
                self.emit(
                    CircuitClosed(at=at, endpoint_id=endpoint_id, epoch=transition.epoch, cause=cause, previous=source)
                )
                self.emit(EndpointReadmitted(at=at, endpoint_id=endpoint_id, cause=cause))
            return
        if source is _C:
            self.emit(
                EndpointEjected(at=at, endpoint_id=endpoint_id, cause=cause, state=target, until=transition.reopen_at)
            )

    def health_changed(self, member: Member, before: HealthStatus | None, status: HealthStatus, now: float) -> None:
        """Active health's hook: an UNHEALTHY verdict ejects, leaving UNHEALTHY readmits."""
        if status is HealthStatus.UNHEALTHY and before is not HealthStatus.UNHEALTHY:
            self.emit(EndpointEjected(at=now, endpoint_id=member.endpoint.id, cause=None))
        elif before is HealthStatus.UNHEALTHY and status is not HealthStatus.UNHEALTHY:
            self.emit(EndpointReadmitted(at=now, endpoint_id=member.endpoint.id, cause=None))

    # -- the no-eligible alert ---------------------------------------------------------

    def selection_failed(self, error: SelectionError, now: float) -> None:
        """``acquire`` raised ``error``: count it and advance the no-eligible episode."""
        self.failed_selections += 1
        alert = self.alert
        had_episode = alert.episode_open
        for event in alert.refused(now, error, failures=self.failed_selections, view=self):
            self.emit(event)
        if alert.episode_open and not had_episode:
            self.wake()

    @property
    def episode_open(self) -> bool:
        """True while selections have been failing and the episode has not closed."""
        return self.alert.episode_open

    def next_deadline(self) -> float | None:
        """The alert's next look or the next step of a fold (a timer client's deadline), or None."""
        alert = self.alert.next_deadline()
        if not self._unexamined:
            return alert
        return self._fold_at if alert is None else min(alert, self._fold_at)

    def handle_timer(self, now: float) -> None:
        """Take a step of the fold if one is due; look at the open episode and emit what it decided."""
        if self._unexamined and self._fold_at <= now:
            self._fold_step()
            self._fold_at = now + FOLD_PAUSE
        for event in self.alert.handle_timer(now, failures=self.failed_selections, view=self):
            self.emit(event)

    # -- the pool, as the alert sees it (cold: read only when the alert looks) ------------

    def successes(self) -> int:
        """Successful calls so far, pool-wide, departed endpoints included."""
        return self._successes_total()

    def available(self) -> int:
        """Endpoints that may take a permit now."""
        return self._pool.available_count

    def total(self) -> int:
        """Endpoints in the pool."""
        return len(self._pool.members)

    # -- counters ----------------------------------------------------------------------

    def left(self, states: list[Member]) -> None:
        """Endpoints left the pool (the pool listener's ``left``): fold their counters once their last permit ends."""
        lingering = self._lingering
        lingering.extend(states)
        if len(lingering) >= self._prune_at and not self._unexamined:
            # Folded by the balancer's timer in steps of its own, the loop running between
            # them: a discovery update's commit (which may remove 200,000 endpoints) does
            # not pay for the fold too.
            self._unexamined = len(lingering)
            self._fold_at = -math.inf
            self.wake()

    def _fold_step(self) -> None:
        """Fold the idle ones among the next :data:`FOLD_STEP` lingering endpoints; the busy go to the back."""
        lingering = self._lingering
        n = min(self._unexamined, FOLD_STEP)
        step = lingering[:n]
        del lingering[:n]
        self._departed.add([member for member in step if member.inflight == 0])
        lingering.extend([member for member in step if member.inflight != 0])
        self._unexamined -= n
        if not self._unexamined:
            # Set from what is still lingering after the fold (states with permits in
            # flight), so the list stays within twice those, plus 16, under endless churn.
            self._prune_at = max(16, 2 * len(lingering))

    def _successes_total(self) -> int:
        total = self._departed.successes
        for member in self._pool.members.values():
            total += member.successes
        for member in self._lingering:
            total += member.successes
        return total

    def statistics(
        self,
        now: float,
        *,
        retries_denied: int,
        readiness_failures: int = 0,
        tails: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0),
    ) -> BalancerStatistics:
        """Freeze every counter, pool-wide and per live endpoint.

        Changes nothing (no alert evaluated, nothing folded), so a metrics reader may call
        it from its own thread; it copies what it iterates (a dict that changes size under
        it raises RuntimeError, and the caller reads again). ``tails``: hedged requests,
        hedges sent, hedges won, waits and expired waits.
        """
        pool = self._pool
        totals = self._departed.copy()
        members = list(pool.members.values())
        lingering = list(self._lingering)
        totals.add(members)
        totals.add(lingering)
        inflight = sum([member.inflight for member in members]) + sum([member.inflight for member in lingering])
        endpoints = {member.endpoint.id: endpoint_counters(member, pool.signal(member)) for member in members}
        issued = totals.successes + sum(totals.faults) + totals.cancellations + inflight
        rerouted = sum(totals.modes)
        modes = {m: _sat(totals.modes[i]) for m, i in MODE_INDEX.items()}
        modes[DecisionMode.HEALTHY] = _sat(max(0, issued - rerouted))
        counts = self._counts
        pool_counters = PoolCounters(
            issued=_sat(issued),
            selections=MappingProxyType(modes),
            successes=_sat(totals.successes),
            faults=MappingProxyType({f: _sat(totals.faults[i]) for f, i in FAULT_INDEX.items()}),
            cancellations=_sat(totals.cancellations),
            stale=_sat(totals.stale),
            probes=_sat(totals.probes),
            ejections=_sat(totals.ejections),
            suppressed_ejections=_sat(pool.suppressed_ejections),
            failed_selections=_sat(self.failed_selections),
            no_eligible_alerts=_sat(counts.get(NoEligiblePersisting, 0)),
            discovery_applied=_sat(counts.get(DiscoveryApplied, 0)),
            discovery_rejected=_sat(counts.get(DiscoveryRejected, 0)),
            coordination_fallbacks=_sat(counts.get(CoordinationFallback, 0)),
            panics=_sat(counts.get(PanicStarted, 0)),
            retries_denied=_sat(retries_denied),
            readiness_failures=_sat(readiness_failures),
            events_dropped=_sat(self.events_dropped),
            log_lines_suppressed=_sat(self.log.limiter.suppressed),
            hedged_requests=_sat(tails[0]),
            hedges_sent=_sat(tails[1]),
            hedges_won=_sat(tails[2]),
            waits=_sat(tails[3]),
            waits_expired=_sat(tails[4]),
        )
        return BalancerStatistics(
            pool=pool_counters,
            endpoints=MappingProxyType(endpoints),
            size=len(pool.members),
            available=pool.available_count,
            ejected=pool.ejected_count,
            inflight=_sat(inflight),
            taken_at=now,
            degraded=pool.degraded_count,
        )


_ALERT_EVENTS = frozenset({NoEligiblePersisting, NoEligibleCleared})


def _nothing() -> None:
    """The default :attr:`Telemetry.wake`: no timer to tell."""


def _sat(value: int) -> int:
    return value if value < SATURATED else SATURATED
