"""The balancer's side of coordination: mirror shared state, publish local moves, lease probes.

Theory of operation
-------------------
Each endpoint has a :class:`_Link`: the last shared record seen (``view``), the shared
``version`` and the circuit ``epoch`` that mirror each other, and a local-clock estimate
of the record's deadline. A circuit whose epoch equals ``link.epoch`` is *in sync*: it
shows the shared state (or deliberately declined it, see below), and the coordinator may
move it to a newer shared state (:meth:`Pool.adopt`). A circuit that moved on its own
since (a local trip, a failed probe, an operator reset, anything done while the storage
was away) is *ahead*: an OPEN or HALF_OPEN circuit that is ahead is published with
``trip_open`` before anything else may overwrite it; a CLOSED one simply mirrors the
shared state again; BLOCKED and RETIRED are this instance's own verdicts and stay local.

The hot path never waits for the storage. The pool calls :meth:`Coordinator.moved` and
:meth:`Coordinator.probe_result` (two set insertions and an event) only when a circuit
moves or a probe reports; one background task (:meth:`Coordinator.run`) does the I/O in
:meth:`Coordinator.sync`, one operation at a time, each bounded by the timeout.

Probe slots follow demand. When the shared state is HALF_OPEN, the task leases a slot for
a mirrored circuit only if this balancer had demand since the round began (an acquire it
refused since the shared deadline, or any call started since it first saw the round) and
its own readiness, active health and operator status do not exclude the endpoint; the
lease is granted to the circuit, so ``acquire`` stays synchronous and the next one takes
it. A refused acquire wakes the task at once while a round waits for demand. A granted
slot left unused for ``sync_interval`` goes back to the fleet (and only new demand leases
again); so does a slot a cancelled probe freed, at once, and every free slot of an
endpoint this balancer's status now excludes. Another instance with demand picks a
handed-back slot up at its next poll, within one ``sync_interval``.

Every await may let the circuit move; after each one the coordinator checks the epoch it
started from, and if the circuit moved it stops and lets the next sync handle the news.

Any failure of the storage (an error, a timeout) makes every circuit unleased: each
falls back to its own timers and probe slots, so no call fails because the storage is
down. The next sync that reaches the storage reads every record, leases the circuits
again, and publishes what they did in the meantime.

``max_ejection_percent`` still holds: a shared OPEN or HALF_OPEN is not mirrored into a
CLOSED circuit when this balancer's pool has no ejection left (``declined``); the
decision is retaken at every poll. Likewise an active health check that un-ejects a
circuit here exempts this balancer from the shared episode until the fleet closes it or
this balancer's own traffic trips it again (``held``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import attrs

from .._core._circuit import Cause, CircuitState, Transition
from .._core._circuit_policy import CircuitPolicy
from .._core._ejection import Escalation
from .._core._pool import Pool
from .._core._record import EndpointState, sat_add
from .._errors import CoordinationError
from ._config import Coordination, CoordinationChange, CoordinationStatistics
from ._protocol import CHANGES_PROTOCOL_VERSION, Changes, OpenWait, ProbeReport, Reply, SharedState

logger = logging.getLogger("poise_py")
T = TypeVar("T")

_C, _O, _H = CircuitState.CLOSED, CircuitState.OPEN, CircuitState.HALF_OPEN
_LOCAL_ONLY = frozenset({CircuitState.BLOCKED, CircuitState.RETIRED})
_TRIP_RETRIES = 3
_SHARED_CAUSES = frozenset({Cause.SHARED_OPEN, Cause.SHARED_HALF_OPEN, Cause.SHARED_CLOSED})


class _Down(Exception):  # noqa: N818 - internal signal, never escapes
    """The storage failed or timed out: fall back."""

    def __init__(self, reason: str, error: BaseException) -> None:
        super().__init__(reason)
        self.error = error


@attrs.define(eq=False)
class _Link:
    """What the coordinator knows about one endpoint's shared record."""

    view: SharedState | None = None
    version: int = -1
    epoch: int = -1
    deadline: float | None = None
    reported: int = 0
    trip: Transition | None = None
    held: bool = False
    """A passing active check exempted this circuit from the shared episode until it closes."""
    reopen: float | None = None
    """The shared OPEN deadline, in this balancer's clock: when the next round begins."""
    round: int = -1
    """The shared version of the HALF_OPEN round the demand fields below belong to."""
    refusals: int = 0
    """The balancer's refused acquires already answered (a refusal after it is demand)."""
    activity: int = 0
    """This balancer's call count when it first saw the round (see ``Coordinator._activity``)."""
    granted_at: float | None = None
    """When the coordinator last granted this circuit a leased slot."""
    release: bool = False
    """A probe ended (or was cancelled): hand free slots back at the next settle."""
    problem: str | None = None
    """The shared record is unusable (what is wrong): this circuit decides locally meanwhile."""


class Coordinator:
    """Keeps one balancer's circuits in step with the fleet's shared state. See the module docstring.

    Args:
        config: the :class:`Coordination` knobs.
        pool: the balancer's pool.
        policy: the circuit policy (already checked by ``config.check``).
        rng: the balancer's seeded rng (jitter units for trips).
        on_fallback: called with the time, the error, the endpoint id (None: the whole
            storage) and the storage's name, once per outage and once per unusable record
            (the balancer emits a ``CoordinationFallback`` event, which logs); None: log here.
    """

    def __init__(
        self,
        config: Coordination,
        pool: Pool,
        policy: CircuitPolicy,
        rng: random.Random,
        *,
        on_fallback: Callable[[float, BaseException, str | None, str], None] | None = None,
    ) -> None:
        self._config = config
        self._on_fallback = on_fallback
        self._storage = config.storage
        self._pool = pool
        self._policy = policy
        self._rng = rng
        self._clock: Callable[[], float] = anyio.current_time
        self._backend = True
        self._links: dict[EndpointState, _Link] = {}
        self._dirty: dict[EndpointState, None] = {}
        self._new_members = True
        self._wake: anyio.Event | None = None
        self._lock: anyio.Lock | None = None
        self._connected = False
        self._announced = False  # an outage was logged (the first failure, at start-up too)
        self._next_poll = 0.0
        self.operations = 0
        self.failures = 0
        self.fallbacks = 0
        self.resyncs = 0
        self.published = 0
        self.adopted = 0
        self.leases = 0
        self.declined = 0
        self.released = 0
        self.poisoned = 0
        changes = getattr(self._storage, "changes", None)
        self._changes: Callable[[int], Awaitable[Changes]] | None = (
            changes if self._storage.protocol_version >= CHANGES_PROTOCOL_VERSION and callable(changes) else None
        )
        self._sequence: int | None = None  # the change log's sequence at the last full read
        self._next_full = 0.0
        self._refused_at: float | None = None
        self._refusals = 0
        self._waiting = False  # a HALF_OPEN round waits for demand here: a refusal wakes the task

    # -- hooks from the pool (synchronous, cheap) ----------------------------------------

    def moved(self, state: EndpointState, transition: Transition) -> None:
        """A circuit moved: remember a trip's details and wake the sync task."""
        cause = transition.cause
        if transition.target is _O and cause not in _SHARED_CAUSES:
            link = self._link(state)
            link.trip = transition
            link.held = False
        elif cause is Cause.HEALTH_CHECK_PASSED:
            self._link(state).held = True
        self._mark(state)

    def probe_result(self, state: EndpointState) -> None:
        """A probe reported without moving its circuit, or was cancelled: count it, free its slot."""
        self._link(state).release = True
        self._mark(state)

    def refused(self, now: float) -> None:
        """An acquire found no eligible endpoint: demand, which a waiting round leases for."""
        self._refused_at = now
        self._refusals = sat_add(self._refusals)
        if self._waiting:
            self._waiting = False
            self._poke()

    def members_changed(self) -> None:
        """Discovery changed the pool: read the newcomers' records soon."""
        self._new_members = True
        self._poke()

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether the circuits currently follow the shared state."""
        return self._connected

    def statistics(self) -> CoordinationStatistics:
        """A frozen view of the counters."""
        return CoordinationStatistics(
            connected=self._connected,
            protocol_version=self._storage.protocol_version,
            operations=self.operations,
            failures=self.failures,
            fallbacks=self.fallbacks,
            resyncs=self.resyncs,
            published=self.published,
            adopted=self.adopted,
            leases=self.leases,
            declined=self.declined,
            released=self.released,
            poisoned=self.poisoned,
        )

    async def start(self, clock: Callable[[], float], *, backend_clock: bool) -> None:
        """Bind the balancer's clock and take the first sync (bounded by the timeout)."""
        self._clock = clock
        self._backend = backend_clock
        self._wake = anyio.Event()
        self._lock = anyio.Lock()
        self._connected = False
        self._announced = False
        await self.sync(poll=True)

    async def run(self) -> None:
        """The background task: sync when woken, when a poll is due, or at a shared deadline."""
        while True:
            wake = self._wake
            assert wake is not None  # noqa: S101 - set by start()
            if self._backend:
                delay = self._next_wakeup() - self._clock()
                if delay > 0:
                    with anyio.move_on_after(delay):
                        await wake.wait()
            else:
                await wake.wait()
            if wake.is_set():
                self._wake = anyio.Event()
            # With an injected clock nothing happens in the background because time passed
            # (like the balancer's own timers): deadlines wait for an explicit sync.
            await self.sync(timers=self._backend)

    async def aclose(self) -> None:
        """Give back the leases this balancer holds and has not used (best effort)."""
        if not self._connected:
            return
        for state, link in list(self._links.items()):
            c = state.circuit
            view = link.view
            if view is None or view.state is not _H or c.state is not _H or c.epoch != link.epoch:
                continue
            for _ in range(c.probe_limit - c.probes_in_flight):
                try:
                    await self._call(
                        self._storage.report_probe,
                        state.id,
                        expected_version=link.version,
                        report=ProbeReport.RELEASED,
                    )
                except _Down:
                    return

    # -- the sync ------------------------------------------------------------------------

    async def sync(self, *, poll: bool = False, timers: bool = True) -> None:
        """Do everything pending now: publish, report, poll, begin rounds, lease probes.

        ``poll`` forces a read of every record; ``timers=False`` leaves due deadlines and
        leases for later. Never raises for a storage failure: the balancer falls back to
        its local circuits instead.
        """
        lock = self._lock
        assert lock is not None  # noqa: S101 - set by start()
        async with lock:
            try:
                if not self._connected:
                    if not poll and self._clock() < self._next_poll:
                        return  # one attempt per sync_interval while the storage is away
                    await self._resync()
                else:
                    await self._step(poll=poll or (timers and self._clock() >= self._next_poll), timers=timers)
            except _Down as exc:
                self._fall_back(str(exc), exc.error)
            except Exception as exc:  # a bug in a storage or here: never take the balancer down
                logger.exception("poise_py: coordination failed unexpectedly")
                self._fall_back(repr(exc), exc)

    async def _step(self, *, poll: bool, timers: bool = True) -> None:
        while self._dirty:
            state = next(iter(self._dirty))
            del self._dirty[state]
            if state.live:
                try:
                    await self._settle(state)
                except _Down:
                    self._dirty[state] = None  # settle it after the resync
                    raise
        if poll or self._new_members:
            await self._poll(everyone=poll)
        await self._due(timers=timers)

    async def _resync(self) -> None:
        members = list(self._pool.members.values())
        sequence = await self._mark_sequence()
        views = await self._call(self._storage.read, [s.id for s in members])
        now = self._clock()
        self._sequence = sequence
        self._next_full = now + self._config.full_poll_interval
        self._next_poll = now + self._config.sync_interval
        self._new_members = False
        self._connected = True
        if self._announced:
            self.resyncs = sat_add(self.resyncs)
            logger.info("poise_py: coordination storage reachable again; circuits resynchronised")
            self._notify(CoordinationChange(connected=True, at=now))
        self._announced = False
        for state, view in zip(members, views, strict=True):
            if state.live:
                if view.problem is None:
                    self._pool.set_leased(state, True, now)
                self._receive(state, view, now)
        await self._step(poll=False)

    async def _mark_sequence(self) -> int | None:
        """Before a full read: the change log's sequence now, so the next poll reads what follows."""
        if self._changes is None:
            return None
        return (await self._call(self._changes, -1)).sequence

    async def _poll(self, *, everyone: bool) -> None:
        links = self._links
        members = [s for s in self._pool.members.values() if everyone or s not in links]
        self._new_members = False
        sequence: int | None = None
        if everyone:
            now = self._clock()
            self._next_poll = now + self._config.sync_interval
            for gone in [s for s in links if not s.live]:
                del links[gone]
            incremental = self._changes is not None and self._sequence is not None and now < self._next_full
            if incremental and await self._poll_changes(self._changes, self._sequence):  # type: ignore[arg-type]
                return
            sequence = await self._mark_sequence()
            self._next_full = now + self._config.full_poll_interval
        if not members:
            self._sequence = sequence if everyone else self._sequence
            return
        epochs = [s.circuit.epoch for s in members]
        views = await self._call(self._storage.read, [s.id for s in members])
        if everyone:
            self._sequence = sequence
        now = self._clock()
        for state, epoch, view in zip(members, epochs, views, strict=True):
            self._take(state, epoch, view, now)

    async def _poll_changes(self, changes: Callable[[int], Awaitable[Changes]], since: int) -> bool:
        """Read only what changed since the last poll; False if everything must be read instead."""
        members = self._pool.members
        fresh = [s for s in members.values() if s not in self._links]  # joined since: read them too
        epochs = {s: s.circuit.epoch for s in members.values()}
        answer = await self._call(changes, since)
        if answer.states is None:
            return False
        self._sequence = answer.sequence
        now = self._clock()
        for endpoint_id, view in answer.states.items():
            state = members.get(endpoint_id)
            if state is not None and state not in fresh:
                self._take(state, epochs[state], view, now)
        if fresh:
            views = await self._call(self._storage.read, [s.id for s in fresh])
            now = self._clock()
            for state, view in zip(fresh, views, strict=True):
                self._take(state, epochs[state], view, now)
        return True

    def _take(self, state: EndpointState, epoch: int, view: SharedState, now: float) -> None:
        """Take in a polled record, unless the circuit moved while it was read."""
        if not state.live:
            return
        if not state.circuit.leased and view.problem is None and self._link(state).problem is None:
            self._pool.set_leased(state, True, now)  # the pool gained it after the last resync
        if state.circuit.epoch == epoch:
            self._receive(state, view, now)
        else:
            self._mark(state)

    async def _due(self, *, timers: bool = True) -> None:
        """Begin due rounds (``timers``), hand back unused slots (``timers``), lease for demand."""
        policy = self._policy
        self._waiting = False
        activity: int | None = None
        for state, link in list(self._links.items()):
            view = link.view
            c = state.circuit
            if view is None or not state.live or c.epoch != link.epoch or view.state is _C:
                continue
            now = self._clock()
            if timers and link.deadline is not None and now >= link.deadline:  # a round is due, or lapsed
                epoch = c.epoch
                reply = await self._call(
                    self._storage.begin_half_open_if_elapsed,
                    state.id,
                    expected_version=view.version,
                    permitted=policy.permitted_probes,
                    lease=self._config.probe_lease,
                )
                if not self._after(state, epoch, reply) or link.view is None:
                    continue
                view = link.view
            if view.state is not _H or c.state is not _H or link.version != view.version:
                continue
            if link.round != view.version:  # the first sight of this round: demand counts from here
                if activity is None:
                    activity = self._activity()
                link.round = view.version
                start = link.reopen
                if start is None:  # joined mid-round: its start, from when its leases lapse
                    start = (link.deadline or now) - self._config.probe_lease
                # a refusal since the shared deadline (before this balancer saw the round) counts
                refused_at = self._refused_at
                early = refused_at is not None and refused_at >= min(start, now)
                link.refusals = self._refusals - 1 if early else self._refusals
                link.activity = activity - _calls(state)
                link.granted_at = None
            link.reopen = None
            excluded = self._pool.excluded(state) is not None
            if c.probe_limit > c.probes_in_flight:  # a granted slot not in use
                held = link.granted_at is None or now >= link.granted_at + self._config.sync_interval
                if excluded or (timers and held):
                    await self._hand_back(state, link)
                    link.refusals = self._refusals  # only new demand leases again
                    activity = self._activity()
                    link.activity = activity - _calls(state)
                continue
            if excluded or view.probes_remaining <= 0:
                continue
            if self._refusals == link.refusals:
                if activity is None:
                    activity = self._activity()
                if activity - _calls(state) == link.activity:  # no call went elsewhere either
                    self._waiting = True  # no demand here yet: a refused acquire wakes the task
                    continue
            epoch = c.epoch
            reply = await self._call(self._storage.lease_probe, state.id, expected_version=view.version)
            if c.epoch != epoch or not state.live:
                if reply.applied:  # the circuit left the round meanwhile: give it back
                    await self._call(
                        self._storage.report_probe,
                        state.id,
                        expected_version=reply.state.version,
                        report=ProbeReport.RELEASED,
                    )
                self._mark(state)
                continue
            self._receive(state, reply.state, self._clock())
            if reply.applied:
                self.leases = sat_add(self.leases)
                link.granted_at = now = self._clock()
                self._pool.grant(state, 1)
                link.refusals = self._refusals  # one lease per demand: another needs demand after this one
                activity = self._activity()
                link.activity = activity - _calls(state)

    async def _hand_back(self, state: EndpointState, link: _Link) -> None:
        """Give this circuit's free leased slots back to the fleet's round."""
        c = state.circuit
        for _ in range(self._pool.revoke(state)):
            epoch = c.epoch
            reply = await self._call(
                self._storage.report_probe, state.id, expected_version=link.version, report=ProbeReport.RELEASED
            )
            self.released = sat_add(self.released)
            if not self._after(state, epoch, reply):
                return

    def _activity(self) -> int:
        """Calls this balancer started, ever (off the hot path, O(pool)).

        Calls that went to other endpoints while a round waits are demand for it: they
        could have gone to it. Its own calls (its probes) are not.
        """
        return sum(_calls(s) for s in self._pool.members.values())

    async def _settle(self, state: EndpointState) -> None:
        link = self._link(state)
        c = state.circuit
        if c.state in _LOCAL_ONLY:
            link.epoch = c.epoch
            return
        if c.epoch == link.epoch:
            view = link.view
            release, link.release = link.release, False
            if view is not None and c.state is _H and view.state is _H:
                if c.probe_successes > link.reported:
                    await self._report(state, link)
                if release and c.epoch == link.epoch and c.state is _H:
                    await self._hand_back(state, link)  # a cancelled probe's slot: the fleet's again
            return
        if c.state is _C:
            self._mirror(state)
            return
        await self._publish(state, link)

    async def _publish(self, state: EndpointState, link: _Link) -> None:
        """Publish a circuit that opened (or is half-open) on its own."""
        c = state.circuit
        trip = link.trip if link.trip is not None and link.trip.epoch == c.epoch else None
        from_probe = trip is not None and trip.source is _H
        expected = link.view.version if link.view is not None else 0
        for _ in range(_TRIP_RETRIES):
            epoch = c.epoch
            reply = await self._call(
                self._storage.trip_open, state.id, expected_version=expected, wait=self._wait(trip)
            )
            if c.epoch != epoch or not state.live:
                self._mark(state)
                return
            shared = reply.state
            if reply.applied:
                self.published = sat_add(self.published)
                self._receive(state, shared, self._clock(), publishing=True)
                return
            if shared.state is _C and not from_probe and shared.version != expected:
                # Closed at a version this balancer had not seen (a round ended, or the
                # storage lost its keys): this circuit's window still says trip.
                expected = shared.version
                continue
            # Someone else opened it first, or a failed probe's round is over: the
            # shared state wins, as a stale epoch's result would lose locally.
            self._receive(state, shared, self._clock(), force=True)
            return
        self._mark(state)

    async def _report(self, state: EndpointState, link: _Link) -> None:
        c = state.circuit
        while c.probe_successes > link.reported:
            epoch = c.epoch
            reply = await self._call(
                self._storage.report_probe,
                state.id,
                expected_version=link.version,
                report=ProbeReport.SUCCEEDED,
            )
            if not self._after(state, epoch, reply) or not reply.applied or c.epoch != epoch:
                return
            link.reported += 1
            if reply.state.probes_completed >= self._policy.success_threshold:
                reply = await self._call(self._storage.close, state.id, expected_version=link.version)
                self._after(state, epoch, reply)
                return

    def _after(self, state: EndpointState, epoch: int, reply: Reply) -> bool:
        """Take in a reply if the circuit did not move during the call; say whether it was taken."""
        if state.circuit.epoch != epoch or not state.live:
            self._mark(state)
            return False
        self._receive(state, reply.state, self._clock())
        return True

    # -- mirroring (synchronous) ----------------------------------------------------------

    def _receive(
        self,
        state: EndpointState,
        view: SharedState,
        now: float,
        *,
        publishing: bool = False,
        force: bool = False,
    ) -> None:
        link = self._link(state)
        if view.problem is not None:
            self._poison(state, link, view.problem, now)
            return
        if link.problem is not None:  # usable again (repaired, expired or rewritten): follow it
            link.problem = None
            link.version = -1
            self._pool.set_leased(state, True, now)
        link.view = view
        link.deadline = None if view.reopen_at is None else now + view.remaining()
        if view.state is _O:
            link.reopen = link.deadline
        c = state.circuit
        if publishing and c.state is _O:
            # Our own trip, accepted: same round, the storage's deadline.
            link.version = view.version
            link.epoch = c.epoch
            if link.deadline is not None:
                self._pool.retime(state, link.deadline)
            return
        if (force or publishing) and c.state not in _LOCAL_ONLY:
            link.epoch = c.epoch
        self._mirror(state)

    def _poison(self, state: EndpointState, link: _Link, problem: str, now: float) -> None:
        """An unusable record: this endpoint alone decides locally, reported once per episode."""
        link.view = None
        link.deadline = None
        link.reopen = None
        link.epoch = state.circuit.epoch
        if state.circuit.leased:
            self._pool.set_leased(state, False, now)
        if link.problem is not None:
            return
        link.problem = problem
        self.poisoned = sat_add(self.poisoned)
        error = CoordinationError(f"unusable shared record: {problem}")
        if self._on_fallback is not None:
            self._on_fallback(now, error, state.id, repr(self._storage))
        else:
            logger.warning(
                "poise_py: shared record of endpoint %r in %r unusable, it uses its local circuit: %s",
                state.id,
                self._storage,
                error,
            )

    def _mirror(self, state: EndpointState) -> None:
        link = self._link(state)
        view = link.view
        c = state.circuit
        if view is None:
            return
        if c.state in _LOCAL_ONLY:
            link.epoch = c.epoch
            link.version = view.version
            return
        if c.epoch != link.epoch and c.state is not _C:
            self._mark(state)  # ahead of the shared state: publish first
            return
        target = view.state
        now = self._clock()
        if target is _C:
            link.held = False
            if c.state is not _C:
                self._adopt(state, link, _C, now)
        elif c.state is _C and link.held:
            pass  # an active check passed here: this balancer sits the episode out
        elif c.state is _C and not self._pool.may_eject:
            if link.version != view.version:
                self.declined = sat_add(self.declined)
        elif c.state is not target or link.version != view.version:
            self._adopt(state, link, target, now)
        elif target is _O and link.deadline is not None:
            self._pool.retime(state, link.deadline)
        link.version = view.version
        link.epoch = c.epoch

    def _adopt(self, state: EndpointState, link: _Link, target: CircuitState, now: float) -> None:
        view = link.view
        assert view is not None  # noqa: S101 - called from _mirror
        level = 0 if target is _C else view.failed_rounds + 1
        reopen_at = link.deadline if target is _O else None
        self._pool.adopt(state, target, now, reopen_at=reopen_at, level=level)
        link.reported = 0
        self.adopted = sat_add(self.adopted)

    # -- helpers ---------------------------------------------------------------------------

    def _wait(self, trip: Transition | None) -> OpenWait:
        escalation = self._config.shared_escalation(self._policy.escalation)
        minimum = 0.0
        if trip is not None and trip.retry_after:
            minimum = trip.retry_after
            if trip.cause is Cause.RETRY_AFTER:  # the server's wait exactly, not escalated
                escalation = Escalation(base=minimum, maximum=minimum, jitter=0.0)
        return OpenWait(escalation=escalation, unit=self._rng.random(), minimum=minimum)

    async def _call(self, op: Callable[..., Awaitable[T]], /, *args: object, **kwargs: object) -> T:
        self.operations = sat_add(self.operations)
        timeout = self._config.timeout
        try:
            with anyio.fail_after(timeout):
                return await op(*args, **kwargs)
        except TimeoutError as exc:
            self.failures = sat_add(self.failures)
            reason = f"{getattr(op, '__name__', op)!s} took longer than {timeout} s"
            raise _Down(reason, TimeoutError(reason)) from exc
        except CoordinationError as exc:
            self.failures = sat_add(self.failures)
            raise _Down(str(exc), exc) from exc

    def _fall_back(self, reason: str, error: BaseException) -> None:
        now = self._clock()
        was_connected = self._connected
        self._connected = False
        self._sequence = None  # the next reads are full
        self._next_poll = now + self._config.sync_interval
        for state in self._pool.members.values():
            self._pool.set_leased(state, False, now)
        if was_connected:
            self.fallbacks = sat_add(self.fallbacks)
        if not self._announced:  # once per outage: a log line (through the event), a hook
            self._announced = True
            if self._on_fallback is not None:
                self._on_fallback(now, error, None, repr(self._storage))
            else:
                logger.warning(
                    "poise_py: coordination storage %r unavailable (%s); every endpoint falls back to its "
                    "local circuit until it answers again",
                    self._storage,
                    reason,
                )
            self._notify(CoordinationChange(connected=False, at=now, reason=reason))

    def _notify(self, change: CoordinationChange) -> None:
        hook = self._config.on_change
        if hook is not None:
            try:
                hook(change)
            except Exception:
                logger.exception("poise_py: the coordination on_change hook raised")

    def _next_wakeup(self) -> float:
        wakeup = self._next_poll
        if self._connected:
            for state, link in self._links.items():
                deadline = link.deadline
                view = link.view
                if (
                    deadline is not None
                    and deadline < wakeup
                    and view is not None
                    and view.state is not _C
                    and state.circuit.epoch == link.epoch
                ):
                    wakeup = deadline
                granted = link.granted_at
                c = state.circuit
                if granted is not None and c.state is _H and c.probe_limit > c.probes_in_flight:
                    wakeup = min(wakeup, granted + self._config.sync_interval)
        return wakeup

    def _link(self, state: EndpointState) -> _Link:
        link = self._links.get(state)
        if link is None:
            link = self._links[state] = _Link()
        return link

    def _mark(self, state: EndpointState) -> None:
        self._dirty[state] = None
        self._poke()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()


def _calls(state: EndpointState) -> int:
    """Calls started on one endpoint, ever: finished ones plus those in flight."""
    return state.successes + state.cancellations + state.stale + state.inflight + sum(state.faults)
