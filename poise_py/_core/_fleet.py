"""Fleet mirroring as a pure state machine: what to publish, adopt, lease and hand back.

Theory of operation
-------------------
Each endpoint has a :class:`_Link`: the last shared record seen (``view``), the shared
``version`` and the circuit ``epoch`` that mirror each other, and a local-clock estimate
of the record's deadline. A circuit whose epoch equals ``link.epoch`` is *in sync*: it
shows the shared state (or deliberately declined it, see below), and the core may move
it to a newer shared state (:meth:`Pool.adopt`). A circuit that moved on its own since (a
local trip, a failed probe, an operator reset, anything done while the storage was away)
is *ahead*: an OPEN or HALF_OPEN circuit that is ahead is published with ``trip_open``
before anything else may overwrite it; a CLOSED one simply mirrors the shared state again;
BLOCKED and RETIRED are this instance's own verdicts and stay local.

No I/O happens here, and no clock is read: time comes in as ``now``. The work is done in
*jobs* (a sync: settle the circuits that moved, poll, begin due rounds, lease probes for
demand; or, at close, the hand-back of unused leases). A job is a plain generator that
yields one storage :data:`Operation` (``_fleet_actions.py``) at a time; the shell (``_coordination/_coordinator.py``)
performs it outside any lock and feeds the outcome back with :meth:`FleetCore.complete`
or :meth:`FleetCore.fail`, then reads :attr:`FleetCore.operation` again. So every
decision is a synchronous step between two operations, and at most one operation is in
flight per balancer. Pool moves (adopt, retime, grant, revoke, leased mode) are applied
here directly: the pool is pure too, and the next decision reads the epoch they produce.
What the shell must tell the world (a fallback, a reconnection, an unusable record) comes
out of :meth:`FleetCore.events`.

Inputs from the hot path (:meth:`moved`, :meth:`probe_result`, :meth:`refused`,
:meth:`members_changed`) only take notes and set :attr:`FleetCore.wanted`, the shell's cue
to start a job (:meth:`FleetCore.start_wanted`). Time-driven work (a poll, a shared
deadline, a lease held unused for ``sync_interval``, a retry while the storage is away)
is reported by :meth:`next_deadline` and triggered by :meth:`handle_timer`.

Every operation may let the circuit move; after each reply the core checks the epoch it
started from, and if the circuit moved it stops and lets the next job handle the news.

Probe slots follow demand. When the shared state is HALF_OPEN, the core leases a slot for
a mirrored circuit only if this balancer had demand since the round began (an acquire it
refused since the shared deadline, or any call started since it first saw the round) and
its own readiness, active health and operator status do not exclude the endpoint; the
lease is granted to the circuit, so ``acquire`` stays synchronous and the next one takes
it. A refused acquire asks for a job at once while a round waits for demand. A granted
slot left unused for ``sync_interval`` goes back to the fleet (and only new demand leases
again); so does a slot a cancelled probe freed, at once, and every free slot of an
endpoint this balancer's status now excludes.

Any failure of the storage (an error, a timeout) makes every circuit unleased: each falls
back to its own timers and probe slots, so no call fails because the storage is down. The
next job that reaches the storage reads every record, leases the circuits again, and
publishes what they did in the meantime.

``max_ejection_percent`` still holds: a shared OPEN or HALF_OPEN is not mirrored into a
CLOSED circuit when this balancer's pool has no ejection left (``declined``); the decision
is retaken at every poll. Likewise an active health check that un-ejects a circuit here
exempts this balancer from the shared episode until the fleet closes it or this
balancer's own traffic trips it again (``held``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator
from typing import cast

import attrs

from ._circuit import Cause, CircuitState, Transition
from ._circuit_policy import CircuitPolicy
from ._ejection import Escalation
from ._fleet_actions import (
    BeginHalfOpen,
    Close,
    FleetCounters,
    FleetEvent,
    JobCrashed,
    LeaseProbe,
    LedgerDamaged,
    Operation,
    Read,
    ReadChanges,
    RecordUnusable,
    ReportProbe,
    StorageLost,
    StorageRegained,
    TripOpen,
)
from ._pool import Pool
from ._record import Member, sat_add
from ._shared import CLOCK_SLACK, Changes, OpenWait, ProbeReport, Reply, SharedState

_C, _O, _H = CircuitState.CLOSED, CircuitState.OPEN, CircuitState.HALF_OPEN
_LOCAL_ONLY = frozenset({CircuitState.BLOCKED, CircuitState.RETIRED})
_TRIP_RETRIES = 3
_SHARED_CAUSES = frozenset({Cause.SHARED_OPEN, Cause.SHARED_HALF_OPEN, Cause.SHARED_CLOSED})


class _Down(Exception):  # noqa: N818 - internal signal, never escapes
    """The storage failed or timed out: fall back."""

    def __init__(self, reason: str, error: BaseException) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error


_Job = Generator[Operation, object, None]


@attrs.define(eq=False)
class _Link:
    """What the core knows about one endpoint's shared record."""

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
    """This balancer's call count when it first saw the round (see ``FleetCore._activity``)."""
    granted_at: float | None = None
    """When the core last granted this circuit a leased slot."""
    attempted: int = -1
    """The shared version whose due round a timed job last tried to begin (see ``next_deadline``)."""
    release: bool = False
    """A probe ended (or was cancelled): hand free slots back at the next settle."""
    problem: str | None = None
    """The shared record is unusable (what is wrong): this circuit decides locally meanwhile."""
    limit: tuple[int, float | None, float] | None = None
    """The OPEN or HALF_OPEN record last seen (its version and ``opened_at``) and the earliest
    local-clock deadline any reply gave for it: a later deadline for the same record means
    the storage's clock moved back."""


class FleetCore:
    """One balancer's fleet mirroring, sans I/O. See the module docstring.

    Args:
        pool: the balancer's pool (pure; the core applies adoptions, grants, revocations).
        policy: the circuit policy.
        rng: the balancer's seeded rng (jitter units for trips).
        sync_interval: seconds between polls (and between retries while the storage is away).
        full_poll_interval: seconds between full reads when polls are incremental.
        probe_lease: the lease a half-open round's probes hold in the storage.
        escalation: the shared circuit's open wait (the policy's, capped at ``max_open_wait``).
        incremental: the storage keeps a change log (protocol 3): polls read only changes.
        slack: seconds a record's deadline may move between two replies before the core
            concludes that the storage's clock moved back (more than one operation's
            round trip: ``Coordination.timeout`` plus :data:`CLOCK_SLACK`).
        key_name: the storage's name for an endpoint's record, to name it in a problem.
    """

    def __init__(
        self,
        pool: Pool,
        policy: CircuitPolicy,
        rng: random.Random,
        *,
        sync_interval: float,
        full_poll_interval: float,
        probe_lease: float,
        escalation: Escalation,
        incremental: bool,
        slack: float = CLOCK_SLACK,
        key_name: Callable[[str], str] = str,
    ) -> None:
        self._pool = pool
        self._policy = policy
        self._rng = rng
        self._sync_interval = sync_interval
        self._full_poll_interval = full_poll_interval
        self._probe_lease = probe_lease
        self._escalation = escalation
        self._incremental = incremental
        self._slack = slack
        self._key_name = key_name
        # The latest deadline a usable record may hold, in seconds after the storage's
        # clock: the largest wait this fleet writes (the open wait's maximum, a server's
        # Retry-After cap, a round's lease) plus slack.
        self._horizon = max(escalation.maximum, policy.max_retry_after, probe_lease) + CLOCK_SLACK
        self._ledger: str | None = None  # a damaged change log, reported once until healthy
        self.counters = FleetCounters()
        self._links: dict[Member, _Link] = {}
        self._dirty: dict[Member, None] = {}
        self._new_members = True
        self._connected = False
        self._announced = False  # an outage was reported (the first failure, at start-up too)
        self._started = False
        self._next_poll = 0.0
        self._sequence: int | None = None  # the change log's sequence at the last full read
        self._next_full = 0.0
        self._refused_at: float | None = None
        self._refusals = 0
        self._waiting = False  # a HALF_OPEN round waits for demand here: a refusal wants a job
        self._wanted = False
        self._timers_ran: float | None = None  # when the last job with timers ran
        self._job: _Job | None = None
        self._operation: Operation | None = None
        self._now = 0.0
        self._events: list[FleetEvent] = []

    # -- inputs from the hot path (synchronous, cheap) ------------------------------------

    def moved(self, member: Member, transition: Transition) -> None:
        """A circuit moved: remember a trip's details and want a job."""
        cause = transition.cause
        if transition.target is _O and cause not in _SHARED_CAUSES:
            link = self._link(member)
            link.trip = transition
            link.held = False
        elif cause is Cause.HEALTH_CHECK_PASSED or cause is Cause.POOL_LOADED:
            self._link(member).held = True
        self._mark(member)

    def probe_result(self, member: Member) -> None:
        """A probe reported without moving its circuit, or was cancelled: free its slot."""
        self._link(member).release = True
        self._mark(member)

    def refused(self, now: float) -> None:
        """An acquire found no eligible endpoint: demand, which a waiting round leases for."""
        self._refused_at = now
        self._refusals = sat_add(self._refusals)
        if self._waiting:
            self._waiting = False
            self._wanted = True

    def members_changed(self) -> None:
        """Discovery changed the pool: read the newcomers' records soon."""
        self._new_members = True
        self._wanted = True

    # -- state ------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether the circuits currently follow the shared state."""
        return self._connected

    @property
    def wanted(self) -> bool:
        """An input or a timer asks for a job: the shell should call :meth:`start_wanted`."""
        return self._wanted and self._job is None

    @property
    def busy(self) -> bool:
        """A job is running (it waits for :attr:`operation`'s outcome)."""
        return self._job is not None

    @property
    def operation(self) -> Operation | None:
        """The storage operation the running job waits for, or None when no job runs."""
        return self._operation

    def mirrored_version(self, member: Member) -> int:
        """The shared record's version this endpoint's circuit mirrors (-1: none yet)."""
        link = self._links.get(member)
        return -1 if link is None else link.version

    def events(self) -> list[FleetEvent]:
        """Take the events the steps since the last call produced, oldest first."""
        events, self._events = self._events, []
        return events

    # -- time -------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` has something to do; None before :meth:`start`, or while a job runs or is wanted.

        A shared deadline that is due is reported at once, so a balancer begins a round as
        soon as its deadline passes, also when the storage's answer to an attempt brought
        a newer record whose deadline has passed too (a lapsed round seen through a stale
        version). Only a deadline the last timed job already tried, at the shared version
        the balancer still holds, waits for news: a new version, or the next poll, which
        tries again. So a due deadline never asks for the timer in a loop.
        """
        if not self._started or self._job is not None or self._wanted:
            return None
        wakeup = self._next_poll
        if self._connected:
            ran = self._timers_ran
            interval = self._sync_interval
            for member, link in self._links.items():
                deadline = link.deadline
                view = link.view
                if (
                    deadline is not None
                    and deadline < wakeup
                    and view is not None
                    and view.state is not _C
                    and member.live
                    and member.circuit.epoch == link.epoch
                    and (ran is None or deadline > ran or link.attempted != view.version)
                ):
                    wakeup = deadline
                granted = link.granted_at
                c = member.circuit
                if granted is not None and c.state is _H and c.probe_limit > c.probes_in_flight:
                    held_until = granted + interval
                    if ran is None or held_until > ran:
                        wakeup = min(wakeup, held_until)
        return wakeup

    def handle_timer(self, now: float) -> None:
        """The timer fired: want a job with the timers if a deadline is due at ``now``."""
        deadline = self.next_deadline()
        if deadline is not None and now >= deadline:
            self._wanted = True

    # -- jobs --------------------------------------------------------------------------------

    def start(self, now: float) -> None:
        """The balancer starts: forget any connection and run a sync with a full poll."""
        self._started = True
        self._connected = False
        self._announced = False
        self._drop_job()
        self.begin(now, poll=True)

    def begin(self, now: float, *, poll: bool = False, timers: bool = True) -> bool:
        """Start a sync job now; False if a job already runs.

        ``poll`` forces a read of every record; ``timers=False`` leaves due deadlines and
        held leases for later.
        """
        if self._job is not None:
            return False
        self._wanted = False
        self._run(now, self._sync(poll=poll, timers=timers))
        return True

    def start_wanted(self, now: float) -> bool:
        """Start the job that :attr:`wanted` asks for; False if none is wanted or one runs."""
        return self._wanted and self.begin(now)

    def begin_close(self, now: float) -> bool:
        """Start the job that gives back the leases this balancer holds unused; False if none."""
        if self._job is not None or not self._connected:
            return False
        self._run(now, self._close())
        return True

    def complete(self, now: float, result: object) -> None:
        """The storage answered :attr:`operation` with ``result``: take the next step."""
        self._advance(now, result, None)

    def fail(self, now: float, reason: str, error: BaseException) -> None:
        """:attr:`operation` failed (an error or a timeout): the job stops and the balancer falls back."""
        self.counters.failures = sat_add(self.counters.failures)
        self._advance(now, None, _Down(reason, error))

    def crash(self, now: float, error: Exception) -> None:
        """:attr:`operation` raised something no storage should: log it and fall back."""
        self._drop_job()
        self._crashed(now, error)

    def abandon(self) -> None:
        """The shell was cancelled while performing :attr:`operation`: drop the job."""
        self._drop_job()

    def _run(self, now: float, job: _Job) -> None:
        self._job = job
        self._advance(now, None, None)

    def _advance(self, now: float, result: object, down: _Down | None) -> None:
        job = self._job
        if job is None:
            return
        self._now = now
        self._operation = None
        try:
            operation = job.throw(down) if down is not None else job.send(result)
        except StopIteration:
            self._job = None
            return
        except _Down as exc:
            self._job = None
            self._fall_back(exc.reason, exc.error)
            return
        except Exception as exc:  # noqa: BLE001 - a bug in a storage's reply or here: never take the balancer down
            self._job = None
            self._crashed(now, exc)
            return
        self.counters.operations = sat_add(self.counters.operations)
        self._operation = operation

    def _drop_job(self) -> None:
        job, self._job, self._operation = self._job, None, None
        if job is not None:
            job.close()

    def _crashed(self, now: float, error: Exception) -> None:
        self._now = now
        self._events.append(JobCrashed(error))
        self._fall_back(repr(error), error)

    # -- the sync -------------------------------------------------------------------------

    def _sync(self, *, poll: bool, timers: bool) -> _Job:
        if timers:
            self._timers_ran = self._now
        if not self._connected:
            if not poll and self._now < self._next_poll:
                return  # one attempt per sync_interval while the storage is away
            yield from self._resync()
        else:
            yield from self._step(poll=poll or (timers and self._now >= self._next_poll), timers=timers)

    def _step(self, *, poll: bool, timers: bool = True) -> _Job:
        while self._dirty:
            member = next(iter(self._dirty))
            del self._dirty[member]
            if member.live:
                try:
                    yield from self._settle(member)
                except _Down:
                    self._dirty[member] = None  # settle it after the resync
                    raise
        if poll or self._new_members:
            yield from self._poll(everyone=poll)
        yield from self._due(timers=timers)

    def _resync(self) -> _Job:
        members = list(self._pool.members.values())
        sequence = yield from self._mark_sequence()
        views = yield from self._read([s.id for s in members])
        now = self._now
        self._sequence = sequence
        self._next_full = now + self._full_poll_interval
        self._next_poll = now + self._sync_interval
        self._new_members = False
        self._connected = True
        if self._announced:
            self.counters.resyncs = sat_add(self.counters.resyncs)
            self._events.append(StorageRegained(at=now))
        self._announced = False
        for member, view in zip(members, views, strict=True):
            if member.live:
                if self._vet(member, self._link(member), view, now) is None:
                    self._pool.set_leased(member, True, now)
                self._receive(member, view, now)
        yield from self._step(poll=False)

    def _mark_sequence(self) -> Generator[Operation, object, int | None]:
        """Before a full read: the change log's sequence now, so the next poll reads what follows."""
        if not self._incremental:
            return None
        changes = yield from self._changes(-1)
        if not self._ledger_seen(changes.problem):
            return None  # the next poll reads everything again
        return changes.sequence

    def _poll(self, *, everyone: bool) -> _Job:
        links = self._links
        members = [s for s in self._pool.members.values() if everyone or s not in links]
        self._new_members = False
        sequence: int | None = None
        if everyone:
            now = self._now
            self._next_poll = now + self._sync_interval
            for gone in [s for s in links if not s.live]:
                del links[gone]
            since = self._sequence
            if self._incremental and since is not None and now < self._next_full:
                done = yield from self._poll_changes(since)
                if done:
                    return
            sequence = yield from self._mark_sequence()
            self._next_full = now + self._full_poll_interval
        if not members:
            self._sequence = sequence if everyone else self._sequence
            return
        epochs = [s.circuit.epoch for s in members]
        views = yield from self._read([s.id for s in members])
        if everyone:
            self._sequence = sequence
        now = self._now
        for member, epoch, view in zip(members, epochs, views, strict=True):
            self._take(member, epoch, view, now)

    def _poll_changes(self, since: int) -> Generator[Operation, object, bool]:
        """Read only what changed since the last poll; False if everything must be read instead."""
        members = self._pool.members
        fresh = [s for s in members.values() if s not in self._links]  # joined since: read them too
        epochs = {s: s.circuit.epoch for s in members.values()}
        answer = yield from self._changes(since)
        if not self._ledger_seen(answer.problem) or answer.states is None:
            return False
        self._sequence = answer.sequence
        now = self._now
        for endpoint_id, view in answer.states.items():
            member = members.get(endpoint_id)
            if member is not None and member not in fresh:
                self._take(member, epochs[member], view, now)
        if fresh:
            views = yield from self._read([s.id for s in fresh])
            now = self._now
            for member, view in zip(fresh, views, strict=True):
                self._take(member, epochs[member], view, now)
        return True

    def _take(self, member: Member, epoch: int, view: SharedState, now: float) -> None:
        """Take in a polled record, unless the circuit moved while it was read."""
        if not member.live:
            return
        link = self._link(member)
        if not member.circuit.leased and link.problem is None and self._vet(member, link, view, now) is None:
            self._pool.set_leased(member, True, now)  # the pool gained it after the last resync
        if member.circuit.epoch == epoch:
            self._receive(member, view, now)
        else:
            self._mark(member)

    def _due(self, *, timers: bool = True) -> _Job:
        """Begin due rounds (``timers``), hand back unused slots (``timers``), lease for demand."""
        policy = self._policy
        self._waiting = False
        activity: int | None = None
        for member, link in list(self._links.items()):
            view = link.view
            c = member.circuit
            if view is None or not member.live or c.epoch != link.epoch or view.state is _C:
                continue
            now = self._now
            if timers and link.deadline is not None and now >= link.deadline:  # a round is due, or lapsed
                epoch = c.epoch
                link.attempted = view.version
                reply = yield from self._reply(
                    BeginHalfOpen(
                        member.id,
                        expected_version=view.version,
                        permitted=policy.permitted_probes,
                        lease=self._probe_lease,
                    )
                )
                if not self._after(member, epoch, reply) or link.view is None:
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
                    start = (link.deadline or now) - self._probe_lease
                # a refusal since the shared deadline (before this balancer saw the round) counts
                refused_at = self._refused_at
                early = refused_at is not None and refused_at >= min(start, now)
                link.refusals = self._refusals - 1 if early else self._refusals
                link.activity = activity - _calls(member)
                link.granted_at = None
            link.reopen = None
            excluded = self._pool.excluded(member) is not None
            if c.probe_limit > c.probes_in_flight:  # a granted slot not in use
                held = link.granted_at is None or now >= link.granted_at + self._sync_interval
                if excluded or (timers and held):
                    yield from self._hand_back(member, link)
                    link.refusals = self._refusals  # only new demand leases again
                    activity = self._activity()
                    link.activity = activity - _calls(member)
                continue
            if excluded or view.probes_remaining <= 0:
                continue
            if self._refusals == link.refusals:
                if activity is None:
                    activity = self._activity()
                if activity - _calls(member) == link.activity:  # no call went elsewhere either
                    self._waiting = True  # no demand here yet: a refused acquire wants a job
                    continue
            epoch = c.epoch
            reply = yield from self._reply(LeaseProbe(member.id, expected_version=view.version))
            if c.epoch != epoch or not member.live:
                if reply.applied:  # the circuit left the round meanwhile: give it back
                    yield from self._reply(
                        ReportProbe(member.id, expected_version=reply.state.version, report=ProbeReport.RELEASED)
                    )
                self._mark(member)
                continue
            self._receive(member, reply.state, self._now)
            if reply.applied:
                self.counters.leases = sat_add(self.counters.leases)
                link.granted_at = now = self._now
                self._pool.grant(member, 1)
                link.refusals = self._refusals  # one lease per demand: another needs demand after this one
                activity = self._activity()
                link.activity = activity - _calls(member)

    def _hand_back(self, member: Member, link: _Link) -> _Job:
        """Give this circuit's free leased slots back to the fleet's round."""
        c = member.circuit
        for _ in range(self._pool.revoke(member)):
            epoch = c.epoch
            reply = yield from self._reply(
                ReportProbe(member.id, expected_version=link.version, report=ProbeReport.RELEASED)
            )
            self.counters.released = sat_add(self.counters.released)
            if not self._after(member, epoch, reply):
                return

    def _activity(self) -> int:
        """Calls this balancer started, ever (off the hot path, O(pool)).

        Calls that went to other endpoints while a round waits are demand for it: they
        could have gone to it. Its own calls (its probes) are not.
        """
        return sum(_calls(s) for s in self._pool.members.values())

    def _settle(self, member: Member) -> _Job:
        link = self._link(member)
        c = member.circuit
        if c.state in _LOCAL_ONLY:
            link.epoch = c.epoch
            return
        if c.epoch == link.epoch:
            view = link.view
            release, link.release = link.release, False
            if view is not None and c.state is _H and view.state is _H:
                if c.probe_successes > link.reported:
                    yield from self._report(member, link)
                if release and c.epoch == link.epoch and c.state is _H:
                    yield from self._hand_back(member, link)  # a cancelled probe's slot: the fleet's again
            return
        if c.state is _C:
            self._mirror(member)
            return
        if link.problem is not None and c.state is _H:
            return  # an unusable record: the local round probes alone; a failed probe's trip repairs it
        yield from self._publish(member, link)

    def _publish(self, member: Member, link: _Link) -> _Job:
        """Publish a circuit that opened (or is half-open) on its own."""
        c = member.circuit
        trip = link.trip if link.trip is not None and link.trip.epoch == c.epoch else None
        from_probe = trip is not None and trip.source is _H
        expected = link.view.version if link.view is not None else 0
        for _ in range(_TRIP_RETRIES):
            epoch = c.epoch
            wait = self._wait(trip, link)
            reply = yield from self._reply(TripOpen(member.id, expected_version=expected, wait=wait))
            if c.epoch != epoch or not member.live:
                self._mark(member)
                return
            shared = reply.state
            if reply.applied:
                self.counters.published = sat_add(self.counters.published)
                self._receive(member, shared, self._now, publishing=True)
                return
            if shared.state is _C and not from_probe and shared.version != expected:
                # Closed at a version this balancer had not seen (a round ended, or the
                # storage lost its keys): this circuit's window still says trip.
                expected = shared.version
                continue
            # Someone else opened it first, or a failed probe's round is over: the
            # shared state wins, as a stale epoch's result would lose locally.
            self._receive(member, shared, self._now, force=True)
            return
        self._mark(member)

    def _report(self, member: Member, link: _Link) -> _Job:
        c = member.circuit
        while c.probe_successes > link.reported:
            epoch = c.epoch
            reply = yield from self._reply(
                ReportProbe(member.id, expected_version=link.version, report=ProbeReport.SUCCEEDED)
            )
            if not self._after(member, epoch, reply) or not reply.applied or c.epoch != epoch:
                return
            link.reported += 1
            if reply.state.probes_completed >= self._policy.success_threshold:
                reply = yield from self._reply(Close(member.id, expected_version=link.version))
                self._after(member, epoch, reply)
                return

    def _close(self) -> _Job:
        """At close: give back the leases this balancer holds and has not used (best effort)."""
        for member, link in list(self._links.items()):
            c = member.circuit
            view = link.view
            if view is None or view.state is not _H or c.state is not _H or c.epoch != link.epoch:
                continue
            for _ in range(c.probe_limit - c.probes_in_flight):
                try:
                    yield from self._reply(
                        ReportProbe(member.id, expected_version=link.version, report=ProbeReport.RELEASED)
                    )
                except _Down:
                    return

    def _after(self, member: Member, epoch: int, reply: Reply) -> bool:
        """Take in a reply if the circuit did not move during the call; say whether it was taken."""
        if member.circuit.epoch != epoch or not member.live:
            self._mark(member)
            return False
        self._receive(member, reply.state, self._now)
        return True

    # -- typed operations ----------------------------------------------------------------

    @staticmethod
    def _read(keys: list[str]) -> Generator[Operation, object, list[SharedState]]:
        views = yield Read(tuple(keys))
        return cast("list[SharedState]", views)

    @staticmethod
    def _changes(since: int) -> Generator[Operation, object, Changes]:
        answer = yield ReadChanges(since)
        return cast("Changes", answer)

    def _reply(self, operation: Operation) -> Generator[Operation, object, Reply]:
        reply = cast("Reply", (yield operation))
        if reply.problem is not None:  # the write replaced a damaged change log: report it, read everything
            self._ledger_seen(reply.problem)
            self._ledger = None  # repaired: a later damage is news
            self._sequence = None
        return reply

    # -- mirroring (synchronous) ----------------------------------------------------------

    def _receive(
        self,
        member: Member,
        view: SharedState,
        now: float,
        *,
        publishing: bool = False,
        force: bool = False,
    ) -> None:
        link = self._link(member)
        problem = self._vet(member, link, view, now)
        if problem is not None:
            self._poison(member, link, problem, now)
            return
        if link.problem is not None:  # usable again (repaired, expired or rewritten): follow it
            link.problem = None
            link.version = -1
            self._pool.set_leased(member, True, now)
        link.view = view
        deadline = None if view.reopen_at is None else now + view.remaining()
        if deadline is None or view.state is _C:
            link.limit = None
        else:  # one record's deadline never moves later here (see _vet)
            limit = link.limit
            if limit is not None and limit[0] == view.version and limit[1] == view.opened_at:
                deadline = min(deadline, limit[2])
            link.limit = (view.version, view.opened_at, deadline)
        link.deadline = deadline
        if view.state is _O:
            link.reopen = link.deadline
        c = member.circuit
        if publishing and c.state is _O:
            # Our own trip, accepted: same round, the storage's deadline.
            link.version = view.version
            link.epoch = c.epoch
            if link.deadline is not None:
                self._pool.retime(member, link.deadline)
            return
        if (force or publishing) and c.state not in _LOCAL_ONLY:
            link.epoch = c.epoch
        self._mirror(member)

    def _vet(self, member: Member, link: _Link, view: SharedState, now: float) -> str | None:
        """What makes ``view`` unusable here, naming its key; None if it is usable.

        Beyond what the storage checks (:meth:`SharedState.damage`): a deadline further
        out than any wait this fleet writes (:attr:`_horizon`), and a deadline later than
        an earlier reply gave for the same record, by more than ``slack`` while it still
        lies ahead: the storage's clock moved back, and following it would hold the
        circuit past its own wait. Such a record counts as damaged until the storage's
        clock reaches its deadline or a write replaces it (``_wait`` sets the trip's
        horizon so that the trip does).
        """
        if view.problem is not None:
            return view.problem
        problem = view.damage(horizon=self._horizon)
        if problem is None and view.state is not _C:
            limit = link.limit
            remaining = view.remaining()
            if limit is not None and limit[0] == view.version and limit[1] == view.opened_at:
                late = now + remaining - limit[2]
                if remaining > self._slack and late > self._slack:
                    problem = (
                        f"its deadline moved {late:.6g} s later since it was first read: the storage's "
                        "clock moved back (the round would outlast its own wait)"
                    )
        if problem is None:
            return None
        return f"key {self._key_name(member.id)}: {problem}"

    def _ledger_seen(self, problem: str | None) -> bool:
        """Take in a change log's health from a reply; False if it is damaged (report it once)."""
        if problem is None:
            self._ledger = None
            return True
        if self._ledger is None:
            self._ledger = problem
            self.counters.poisoned = sat_add(self.counters.poisoned)
            self._events.append(LedgerDamaged(at=self._now, problem=problem))
        return False

    def _poison(self, member: Member, link: _Link, problem: str, now: float) -> None:
        """An unusable record: this endpoint alone decides locally, reported once per episode."""
        link.view = None
        link.deadline = None
        link.reopen = None
        link.epoch = member.circuit.epoch
        if member.circuit.leased:
            self._pool.set_leased(member, False, now)
        if link.problem is not None:
            return
        link.problem = problem
        self.counters.poisoned = sat_add(self.counters.poisoned)
        self._events.append(RecordUnusable(at=now, endpoint_id=member.id, problem=problem))

    def _mirror(self, member: Member) -> None:
        link = self._link(member)
        view = link.view
        c = member.circuit
        if view is None:
            return
        if c.state in _LOCAL_ONLY:
            link.epoch = c.epoch
            link.version = view.version
            return
        if c.epoch != link.epoch and c.state is not _C:
            self._mark(member)  # ahead of the shared state: publish first
            return
        target = view.state
        now = self._now
        if target is _C:
            link.held = False
            if c.state is not _C:
                self._adopt(member, link, _C, now)
        elif c.state is _C and link.held:
            pass  # an active check passed here: this balancer sits the episode out
        elif c.state is _C and not self._pool.may_eject:
            if link.version != view.version:
                self.counters.declined = sat_add(self.counters.declined)
        elif c.state is not target or link.version != view.version:
            self._adopt(member, link, target, now)
        elif target is _O and link.deadline is not None:
            self._pool.retime(member, link.deadline)
        link.version = view.version
        link.epoch = c.epoch

    def _adopt(self, member: Member, link: _Link, target: CircuitState, now: float) -> None:
        view = link.view
        assert view is not None  # noqa: S101 - called from _mirror
        level = 0 if target is _C else view.failed_rounds + 1
        reopen_at = link.deadline if target is _O else None
        self._pool.adopt(member, target, now, reopen_at=reopen_at, level=level)
        link.reported = 0
        self.counters.adopted = sat_add(self.counters.adopted)

    # -- helpers ---------------------------------------------------------------------------

    def _wait(self, trip: Transition | None, link: _Link) -> OpenWait:
        escalation = self._escalation
        minimum = 0.0
        if trip is not None and trip.retry_after:
            minimum = trip.retry_after
            if trip.cause is Cause.RETRY_AFTER:  # the server's wait exactly, not escalated
                escalation = Escalation(base=minimum, maximum=minimum, jitter=0.0)
        # The trip replaces a record whose deadline lies past the fleet's largest wait; for a
        # record found damaged because the storage's clock moved back, past what is left of
        # the round by this balancer's clock.
        horizon = self._horizon
        limit = link.limit
        if link.problem is not None and limit is not None:
            horizon = min(horizon, max(0.0, limit[2] - self._now) + self._slack)
        return OpenWait(escalation=escalation, unit=self._rng.random(), minimum=minimum, horizon=horizon)

    def _fall_back(self, reason: str, error: BaseException) -> None:
        now = self._now
        self._connected = False
        self._sequence = None  # the next reads are full
        self._next_poll = now + self._sync_interval
        for member in self._pool.members.values():
            self._pool.set_leased(member, False, now)
        if not self._announced:  # once per outage, at start-up too: one fallback, one event
            self._announced = True
            self.counters.fallbacks = sat_add(self.counters.fallbacks)
            self._events.append(StorageLost(at=now, reason=reason, error=error))

    def _link(self, member: Member) -> _Link:
        link = self._links.get(member)
        if link is None:
            link = self._links[member] = _Link()
        return link

    def _mark(self, member: Member) -> None:
        self._dirty[member] = None
        self._wanted = True


def _calls(member: Member) -> int:
    """Calls started on one endpoint, ever: finished ones plus those in flight."""
    return member.successes + member.cancellations + member.stale + member.inflight + sum(member.faults)
