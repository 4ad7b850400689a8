"""The balancer's side of coordination: the shell that performs what the fleet core decides.

Every decision (what to publish, adopt, lease, hand back, when to poll, when to fall back)
is a synchronous step of the pure :class:`~poise_py._core._fleet.FleetCore` (see its
module docstring for the theory of operation). This shell does the rest, httpcore-style:
decide with no lock held, perform the storage operation the decision asks for (bounded by
``Coordination.timeout``), feed the outcome back as the next step, and turn the core's
events into log lines, ``CoordinationFallback`` events and ``on_change`` calls.

Work comes from three places, and one job runs at a time:

- the hot path (:meth:`Coordinator.moved`, :meth:`probe_result`, :meth:`refused`,
  :meth:`members_changed`): synchronous notes in the core; when the core wants a job the
  shell wakes its worker task (:meth:`Coordinator.work`), which waits for work, never
  for time;
- the balancer's one timer task, which asks :meth:`next_deadline` and calls
  :meth:`handle_timer` (both synchronous); a due deadline makes the core want a job, and
  the worker performs it. When a job ends the shell calls ``wake`` so the timer reads
  the (possibly earlier) next deadline;
- :meth:`sync`, one documented internal entry point that runs a job in the caller's task
  and returns when it is over (start-up, the tests, the benchmarks).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable

import anyio

from .._core import _fleet_actions as act
from .._core._circuit import Transition
from .._core._circuit_policy import CircuitPolicy
from .._core._fleet import FleetCore
from .._core._pool import Pool
from .._core._record import Member
from .._errors import CoordinationError
from ._config import Coordination, CoordinationChange, CoordinationStatistics
from ._protocol import CHANGES_PROTOCOL_VERSION, CLOCK_SLACK, Changes

logger = logging.getLogger("poise_py")


def _nothing() -> None:
    return None


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
        changes = getattr(self._storage, "changes", None)
        self._changes: Callable[[int], Awaitable[Changes]] | None = (
            changes if self._storage.protocol_version >= CHANGES_PROTOCOL_VERSION and callable(changes) else None
        )
        config = self._config
        self._core = FleetCore(
            pool,
            policy,
            rng,
            sync_interval=config.sync_interval,
            full_poll_interval=config.full_poll_interval,
            probe_lease=config.probe_lease,
            escalation=config.shared_escalation(policy.escalation),
            incremental=self._changes is not None,
            slack=config.timeout + CLOCK_SLACK,
            key_name=_key_name(self._storage),
        )
        self._clock: Callable[[], float] = anyio.current_time
        self._wake: Callable[[], None] = _nothing
        self._work: anyio.Event | None = None
        self._idle: anyio.Event | None = None

    # -- hooks from the pool (synchronous, cheap) ----------------------------------------

    def moved(self, member: Member, transition: Transition) -> None:
        """A circuit moved: note it and wake the worker."""
        self._core.moved(member, transition)
        self._kick()

    def probe_result(self, member: Member) -> None:
        """A probe reported without moving its circuit, or was cancelled: free its slot."""
        self._core.probe_result(member)
        self._kick()

    def refused(self, now: float) -> None:
        """An acquire found no eligible endpoint: demand, which a waiting round leases for."""
        self._core.refused(now)
        self._kick()

    def members_changed(self) -> None:
        """Discovery changed the pool: read the newcomers' records soon."""
        self._core.members_changed()
        self._kick()

    # -- the timer (synchronous, called by the balancer's timer task) ------------------

    def next_deadline(self) -> float | None:
        """When the coordinator next needs :meth:`handle_timer`, on the balancer's clock (None: no timer)."""
        return self._core.next_deadline()

    def handle_timer(self, now: float) -> None:
        """A deadline may be due: let the core decide, and wake the worker if it wants a job."""
        self._core.handle_timer(now)
        self._kick()

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether the circuits currently follow the shared state."""
        return self._core.connected

    def mirrored_version(self, member: Member) -> int:
        """The shared record's version ``member``'s circuit mirrors (-1: none yet); for tests."""
        return self._core.mirrored_version(member)

    def statistics(self) -> CoordinationStatistics:
        """A frozen view of the counters."""
        c = self._core.counters
        return CoordinationStatistics(
            connected=self._core.connected,
            protocol_version=self._storage.protocol_version,
            operations=c.operations,
            failures=c.failures,
            fallbacks=c.fallbacks,
            resyncs=c.resyncs,
            published=c.published,
            adopted=c.adopted,
            leases=c.leases,
            declined=c.declined,
            released=c.released,
            poisoned=c.poisoned,
        )

    async def start(self, clock: Callable[[], float], *, wake: Callable[[], None] | None = None) -> None:
        """Bind the balancer's clock and its timer's ``wake``, and take the first sync (bounded by the timeout).

        The clock is the backend's or an injected one: the balancer's one timer drives the
        coordinator's deadlines the same way with either.
        """
        self._clock = clock
        self._wake = wake or _nothing
        self._work = anyio.Event()
        self._idle = anyio.Event()
        self._core.start(clock())
        await self._drive()

    async def work(self) -> None:
        """The worker task: wait until the core wants a job, perform it, repeat. Never sleeps on time."""
        core = self._core
        while True:
            work = self._work
            assert work is not None  # noqa: S101 - set by start()
            await work.wait()
            self._work = anyio.Event()
            if core.start_wanted(self._clock()):
                await self._drive()

    async def sync(self, *, poll: bool = False, timers: bool = True) -> None:
        """Run one sync job now, in the caller's task, and return when it is over.

        The documented internal way (tests, benchmarks, start-up) to make the coordinator
        do everything pending at once: publish, report, poll (``poll`` forces a read of
        every record), begin due rounds and hand back held leases (``timers=False``
        leaves those for later), lease probes for demand. It waits for a running job to
        end first. Never raises for a storage failure: the balancer falls back to its
        local circuits instead.
        """
        core = self._core
        while not core.begin(self._clock(), poll=poll, timers=timers):
            idle = self._idle
            assert idle is not None  # noqa: S101 - set by start()
            await idle.wait()
        await self._drive()

    async def aclose(self) -> None:
        """Give back the leases this balancer holds and has not used (best effort)."""
        if self._core.begin_close(self._clock()):
            await self._drive()

    # -- performing ----------------------------------------------------------------------

    async def _drive(self) -> None:
        """Perform the running job's operations one at a time until it ends."""
        core = self._core
        try:
            while (operation := core.operation) is not None:
                timeout = self._config.timeout
                try:
                    with anyio.fail_after(timeout):
                        result = await self._perform(operation)
                except TimeoutError as exc:
                    cause = _cause(exc)
                    if cause is None:
                        reason = f"{operation.name} took longer than {timeout} s"
                        error: BaseException = TimeoutError(reason)
                    else:  # the client was still retrying an error when the time ran out: that error
                        reason = f"{operation.name} failed: {type(cause).__name__}: {cause}"
                        error = CoordinationError(reason)
                        error.__cause__ = cause
                    core.fail(self._clock(), reason, error)
                except CoordinationError as exc:
                    core.fail(self._clock(), str(exc), exc)
                except Exception as exc:  # noqa: BLE001 - a bug in a storage: never take the balancer down
                    core.crash(self._clock(), exc)
                except BaseException:
                    core.abandon()  # cancelled: the job goes (the next one starts afresh)
                    raise
                else:
                    core.complete(self._clock(), result)
                self._report(core.events())
            self._report(core.events())  # a job that ended without any operation
        finally:
            idle, self._idle = self._idle, anyio.Event()
            if idle is not None:
                idle.set()
            self._kick()
            self._wake()  # the job may have moved the next deadline earlier

    async def _perform(self, operation: act.Operation) -> object:
        storage = self._storage
        match operation:
            case act.Read(keys=keys):
                return await storage.read(list(keys))
            case act.ReadChanges(since=since):
                changes = self._changes
                assert changes is not None  # noqa: S101 - the core asks only when incremental
                return await changes(since)
            case act.TripOpen(key=key, expected_version=version, wait=wait):
                return await storage.trip_open(key, expected_version=version, wait=wait)
            case act.BeginHalfOpen(key=key, expected_version=version, permitted=permitted, lease=lease):
                return await storage.begin_half_open_if_elapsed(
                    key, expected_version=version, permitted=permitted, lease=lease
                )
            case act.LeaseProbe(key=key, expected_version=version):
                return await storage.lease_probe(key, expected_version=version)
            case act.ReportProbe(key=key, expected_version=version, report=report):
                return await storage.report_probe(key, expected_version=version, report=report)
            case act.Close(key=key, expected_version=version):
                return await storage.close(key, expected_version=version)

    def _report(self, events: list[act.FleetEvent]) -> None:
        for event in events:
            match event:
                case act.JobCrashed(error=error):
                    logger.error("poise_py: coordination failed unexpectedly", exc_info=error)
                case act.StorageLost(at=at, reason=reason, error=error):
                    if self._on_fallback is not None:
                        self._on_fallback(at, error, None, repr(self._storage))
                    else:
                        logger.warning(
                            "poise_py: coordination storage %r unavailable (%s); every endpoint falls back to its "
                            "local circuit until it answers again",
                            self._storage,
                            reason,
                        )
                    self._notify(CoordinationChange(connected=False, at=at, reason=reason))
                case act.StorageRegained(at=at):
                    logger.info("poise_py: coordination storage reachable again; circuits resynchronised")
                    self._notify(CoordinationChange(connected=True, at=at))
                case act.LedgerDamaged(problem=problem):
                    logger.warning(
                        "poise_py: coordination storage %r: the change log is damaged (%s); polls read every "
                        "record until the next write replaces it",
                        self._storage,
                        problem,
                    )
                case act.RecordUnusable(at=at, endpoint_id=endpoint_id, problem=problem):
                    error = CoordinationError(f"unusable shared record: {problem}")
                    if self._on_fallback is not None:
                        self._on_fallback(at, error, endpoint_id, repr(self._storage))
                    else:
                        logger.warning(
                            "poise_py: shared record of endpoint %r in %r unusable, it uses its local circuit: %s",
                            endpoint_id,
                            self._storage,
                            error,
                        )

    def _notify(self, change: CoordinationChange) -> None:
        hook = self._config.on_change
        if hook is not None:
            try:
                hook(change)
            except Exception:
                logger.exception("poise_py: the coordination on_change hook raised")

    def _kick(self) -> None:
        """Wake the worker if the core wants a job (cheap: the hot path calls it on every move)."""
        if self._core.wanted and self._work is not None:
            self._work.set()


def _key_name(storage: object) -> Callable[[str], str]:
    """The storage's name for an endpoint's record (``RedisStorage.key``), or the endpoint id."""
    key = getattr(storage, "key", None)
    if callable(key):
        return lambda endpoint_id: str(key(endpoint_id))
    return str


def _cause(timeout: BaseException) -> BaseException | None:
    """The error a storage's client was retrying when the timeout cancelled it, if any.

    A client that retries on its own (redis-py does, by default, on a failed connection or
    a rejected password) is cancelled by the timeout while it handles the error: that
    error is the real cause, in the exception's context chain.
    """
    seen: set[int] = set()
    error = timeout.__context__
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, Exception) and not isinstance(error, TimeoutError):
            return error
        error = error.__context__
    return None
