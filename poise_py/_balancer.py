"""The async shell: ``LoadBalancer`` owns a task group and feeds the pure pool.

Decide, then do I/O: every decision (selection, outcome, timers, discovery changes) is a
synchronous call into the pure :class:`~poise_py._core._pool.Pool` with ``now`` read from
the clock; the only awaits are in the background tasks (discovery, the timer, probes,
readiness checks). One timer task (:class:`~poise_py._timer.Timer`) serves every part that
needs time to pass (the pool, the wait queue, active health, the no-eligible alert,
readiness quarantine, fleet coordination), with the backend's clock or the injected one alike. Reads
(:meth:`LoadBalancer.statistics`, :meth:`LoadBalancer.snapshot`) change nothing.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Hashable
from functools import partial
from threading import get_ident
from types import TracebackType
from typing import Any, TypeVar

import anyio

from ._call import call_with_options, call_with_retries
from ._call_observers import CallObserver
from ._clock import Clock, backend_clock
from ._coordination._config import Coordination, CoordinationStatistics
from ._coordination._coordinator import Coordinator
from ._core._budget import Budget, RetryBudget
from ._core._circuit_policy import CircuitPolicy
from ._core._concurrency import AdaptiveConcurrency, SlowStart
from ._core._health_schedule import HealthCheck
from ._core._pool import Pool
from ._core._record import Member
from ._core._routing import Panic, Routing
from ._core._selection import Policy
from ._core._tails import Hedge, RetryBackoff
from ._default_classifier import Classifier, default_classifier
from ._discovery import DiscoveryEnd, StaticDiscovery, Update
from ._endpoint import AdminStatus
from ._errors import (
    DISCOVERY_CLOSED,
    AlreadyRunning,
    ConfigError,
    DiscoveryClosed,
    DiscoveryError,
    EmptyPool,
    NotDraining,
    NotRunning,
    ReadyTimeout,
    SelectionError,
    WrongThread,
)
from ._events import CoordinationFallback, DiscoveryApplied, DiscoveryRejected
from ._faults import Classification
from ._health_runner import HealthRunner
from ._internal import BalancerInternals
from ._issuer import PermitIssuer
from ._knobs import check_duration
from ._logs import LogLimit
from ._membership import EndpointClose, EndpointFactory, Membership, Readiness
from ._pool_wires import BalancerListener, PermitExit
from ._settings import Settings, checked_settings
from ._snapshot import PoolSnapshot, pool_snapshot
from ._statistics import BalancerStatistics
from ._telemetry import DEFAULT_EVENT_BUFFER, EventStream, Observer, Telemetry
from ._timer import Timer, TimerClient
from ._waiting import WaitQueue, not_running

logger = logging.getLogger("poise_py")
T = TypeVar("T")


class LoadBalancer(PermitIssuer):
    """A client-side load balancer over a discovered pool of endpoints.

    Use it as ``async with lb:`` (it owns a task group for discovery and timers), then
    ``async with lb.acquire() as permit:`` around each call.

    Args:
        discovery: an async iterable of :class:`Snapshot` / :class:`Delta` updates, such
            as :class:`StaticDiscovery`.
        policy: the selection policy (default :class:`PowerOfTwoChoices`).
        circuit: the passive breaker's knobs (default :class:`CircuitPolicy`).
        classifier: exception -> :class:`Fault` (default :func:`default_classifier`).
        on_discovery_end: what to do when the discovery stream ends or fails.
        clock: a function returning seconds; default is the running backend's clock (what
            ``anyio.current_time()`` returns), so Trio's ``MockClock`` drives every timer.
            An injected clock drives the same timer: it sleeps the time left in backend
            time, then reads this clock again (waiting for a change if it stood still).
        seed: seeds the balancer's rng (jitter, random picks) for reproducible runs.
        retry_budget: bounds the retries of :meth:`call` (default :class:`RetryBudget`).
        no_eligible_alert_after: seconds selections must keep failing, with no call
            succeeding, before a :class:`NoEligiblePersisting` event and an ERROR log line
            (default 5); one empty result at start-up does not alert. None disables it.
        log_limit: the per-endpoint rate limit on the ``poise_py`` log (default
            :class:`LogLimit`: 5 lines at once, 5 more per minute, per endpoint and kind).
        health_check: active health checking (:class:`HealthCheck`), run in the
            balancer's task group; None (default) for passive health only.
        endpoint_factory: builds per-endpoint state (a connection pool, a client) for
            each endpoint as it joins, sync or async; reach it as ``permit.resource``.
            If it raises, the update is rejected whole (:class:`EndpointFactoryError`).
            A result with a ``ready()`` method keeps its endpoint out until it passes.
        endpoint_close: releases what the factory built (sync or async), when an
            endpoint has left and its last permit has ended, when an update is rejected
            after building, and when the balancer stops.
        readiness: timeout and quarantine cool-down of ``ready()`` checks.
        coordination: share every endpoint's circuit with the balancers using the same
            storage (:class:`Coordination`); default None, each balancer on its own.
        routing: tier spillover and zone preference (default :class:`Routing`: factor 1.4,
            no zone preference).
        panic: opt-in panic routing (:class:`Panic`); None, the default, never panics.
        max_in_flight: at most this many calls in flight to one endpoint (an endpoint's
            metadata ``"max_in_flight"`` overrides it); an endpoint at its cap is not a
            candidate, and when every candidate is, ``acquire`` raises :class:`Overloaded`.
            Default None: no cap (docs/overload.md).
        concurrency: adapt each endpoint's limit from its calls
            (:class:`AdaptiveConcurrency` with :class:`Gradient2` or :class:`AIMD`); under
            ``max_in_flight`` when both are set. Default None.
        slow_start: ramp an endpoint that joins or comes back up over a window
            (:class:`SlowStart`, Envoy's formula). Default None.
    """

    def __init__(
        self,
        discovery: AsyncIterable[Update],
        *,
        policy: Policy | None = None,
        circuit: CircuitPolicy | None = None,
        classifier: Classifier = default_classifier,
        on_discovery_end: DiscoveryEnd = DiscoveryEnd.LAST_KNOWN_GOOD,
        clock: Callable[[], float] | None = None,
        seed: int | None = None,
        retry_budget: RetryBudget | None = None,
        no_eligible_alert_after: float | None = 5.0,
        log_limit: LogLimit | None = None,
        health_check: HealthCheck | None = None,
        endpoint_factory: EndpointFactory | None = None,
        endpoint_close: EndpointClose | None = None,
        readiness: Readiness | None = None,
        coordination: Coordination | None = None,
        routing: Routing | None = None,
        panic: Panic | None = None,
        max_in_flight: int | None = None,
        concurrency: AdaptiveConcurrency | None = None,
        slow_start: SlowStart | None = None,
    ) -> None:
        knobs = checked_settings(
            discovery,
            policy=policy,
            circuit=circuit,
            classifier=classifier,
            on_discovery_end=on_discovery_end,
            clock=clock,
            seed=seed,
            retry_budget=retry_budget,
            no_eligible_alert_after=no_eligible_alert_after,
            log_limit=log_limit,
            health_check=health_check,
            endpoint_factory=endpoint_factory,
            endpoint_close=endpoint_close,
            readiness=readiness,
            coordination=coordination,
            routing=routing,
            panic=panic,
            max_in_flight=max_in_flight,
            concurrency=concurrency,
            slow_start=slow_start,
        )
        self._assemble(knobs)

    def _assemble(self, knobs: Settings) -> None:
        """Build the balancer's parts from its checked arguments, each given its collaborators."""
        self._discovery = knobs.discovery
        self._on_end = knobs.on_discovery_end
        self._clock_arg = knobs.clock
        self._clock = Clock(knobs.clock or anyio.current_time)
        self._rng = random.Random(knobs.seed)  # noqa: S311 - not for security
        self._drain_waiters: dict[Member, anyio.Event] = {}
        # Each part gets what it needs in its constructor. The pool comes first, the parts
        # that read it next, and the listener through which the pool reports to them last:
        # ``Pool.listen`` is the one link made afterwards (the pool and those parts refer to
        # each other), with the permits' exit and the wait queue's (each tells the other).
        self._timer = Timer()
        wake = self._timer.wake
        self._pool = Pool(
            knobs.circuit, knobs.policy, self._rng, routing=knobs.routing, panic=knobs.panic, load=knobs.load
        )
        resources: dict[Member, object] = {}  # the endpoint factory's, per member
        self._exit = PermitExit(self._pool, self._clock, self._exit_verdict, self._observer_failed, resources)
        self._waiting = WaitQueue(
            self._select,
            self._waiter_refused,
            self._now,
            wake,
            self._exit.signal,
            demand=self._waiter_demand,
        )
        self._exit.released = self._waiting.changed
        self._telemetry = Telemetry(
            self._pool, alert_after=knobs.no_eligible_alert_after, log_limit=knobs.log_limit, wake=wake
        )
        self._health: HealthRunner | None = None
        if knobs.health_check is not None:
            health_rng = random.Random(self._rng.getrandbits(64))  # noqa: S311 - jitter only
            self._health = HealthRunner(
                knobs.health_check, self._pool, health_rng.random, wake=wake, on_change=self._telemetry.health_changed
            )
        self._membership = Membership(
            self._pool,
            resources,
            factory=knobs.endpoint_factory,
            close=knobs.endpoint_close,
            readiness=knobs.readiness,
            on_change=None if self._health is None else self._health.apply,
            wake=wake,
        )
        self._coordinator = None
        if knobs.coordination is not None:
            self._coordinator = Coordinator(
                knobs.coordination, self._pool, knobs.circuit, self._rng, on_fallback=self._coordination_fallback
            )
        self._pool.listen(
            BalancerListener(
                self._now,
                wake,
                self._drain_waiters,
                telemetry=self._telemetry,
                membership=self._membership,
                coordinator=self._coordinator,
                replan=self._waiting.changed,
            )
        )
        self._discovery_over = False
        self._cancelled: type[BaseException] = BaseException
        self._task_group: anyio.abc.TaskGroup | None = None
        self._running = False
        self._starting = False
        self._owner = 0
        self._closed = False
        self._gate = 0
        self._budget = Budget(knobs.retry_budget)
        self._call_observers = ()
        self._internals = BalancerInternals(
            clock=self._now,  # __aenter__ rebinds self._clock; _now reads the current one
            budget=self._budget,
            classifier=knobs.classifier,
            log=self._telemetry.log,
            pool=self._pool,
            timer=self._timer,
            acquire=self.acquire,
            random=self._rng.random,
        )
        """The one internal interface contrib and the simulator use (see ``_internal.py``)."""
        # The one timer's clients (see poise_py._timer): another client is one more entry.
        parts: tuple[TimerClient | None, ...] = (
            self._pool,
            self._waiting,
            self._membership,
            self._telemetry,
            self._health,
            self._coordinator,
        )
        self._timer.clients = tuple(part for part in parts if part is not None)

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> LoadBalancer:
        if self._running or self._starting:  # a second task entering while the first still starts
            raise AlreadyRunning("this LoadBalancer is already running")
        self._starting = True
        try:
            return await self._start()
        finally:
            self._starting = False

    async def _start(self) -> LoadBalancer:
        """``__aenter__``'s body, run while it is marked as starting."""
        self._clock = backend_clock() if self._clock_arg is None else Clock(self._clock_arg)
        self._exit.clock = self._clock
        self._owner = get_ident()
        self._cancelled = anyio.get_cancelled_exc_class()
        self._closed = False
        self._discovery_over = False
        source = self._discovery
        await self._membership.prepare()
        if isinstance(source, StaticDiscovery):
            # Applied before the task group exists: a bad list raises with nothing to undo.
            await self._apply(source.snapshot, ignore_duplicate=True)
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self._waiting.open()
        self._membership.attach(task_group, self._clock)
        self._running = True
        self._gate = self._owner
        if not isinstance(source, StaticDiscovery):
            task_group.start_soon(self._run_discovery, source)
        if self._health is not None:
            self._health.attach(task_group, self._clock)
        task_group.start_soon(partial(self._timer.run, self._clock, injected=self._clock_arg is not None))
        coordinator = self._coordinator
        if coordinator is not None:
            try:
                await coordinator.start(self._clock, wake=self._timer.wake)
            except BaseException:  # cancelled (or failed) while starting: close what was opened
                await self.__aexit__(None, None, None)  # not in a new scope: the task group's is innermost
                raise
            task_group.start_soon(coordinator.work)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        task_group = self._task_group
        assert task_group is not None  # noqa: S101 - set by __aenter__
        self._running = False
        self._gate = 0
        self._task_group = None
        self._waiting.close(not_running)
        task_group.cancel_scope.cancel()
        if self._health is not None:
            self._health.detach()
        self._telemetry.close()
        # The body's exception is not the task group's business: close the group on its
        # own (its tasks only wait and never raise), so the caller's exception propagates
        # as itself rather than wrapped in an ExceptionGroup.
        try:
            await task_group.__aexit__(None, None, None)
        finally:
            membership = self._membership
            membership.detach()
            membership.notify()  # wait_ready() callers wake up and see NotRunning
            await membership.aclose()  # shielded inside
            coordinator = self._coordinator
            if coordinator is not None:
                with anyio.CancelScope(shield=True):
                    await coordinator.aclose()  # give back unused probe leases
        return None

    @property
    def running(self) -> bool:
        """True inside the balancer's ``async with`` block."""
        return self._running

    def _on_owner_thread(self, method: str, *, hand_over: str = "anyio.from_thread.run_sync") -> None:
        """Refuse a mutating call from a thread other than the one running the balancer.

        Raises:
            WrongThread: the balancer is running and this is not its event loop's thread.
        """
        if self._running and get_ident() != self._owner:
            raise WrongThread(
                f"{method} was called from another thread: a LoadBalancer belongs to the event loop that "
                f"runs its `async with` block; hand the call to that loop ({hand_over})"
            )

    # -- calls (acquire is PermitIssuer's: poise_py/_issuer.py) ---------------------------

    async def call(
        self,
        fn: Callable[..., Awaitable[T]],
        /,
        *args: Any,
        attempts: int = 3,
        key: Hashable | None = None,
        hedge: Hedge | None = None,
        wait: float | None = None,
        backoff: RetryBackoff | None = None,
        deadline: float | None = None,
        **kwargs: Any,
    ) -> T:
        """Call ``await fn(endpoint, *args, **kwargs)``, retrying on other endpoints.

        After a TRANSIENT, SUSPECT, FATAL or PERMANENT fault the next attempt goes to an
        endpoint not yet tried; a CALLER fault is raised at once (the request is bad, not
        the endpoint). Retries are bounded by ``attempts`` and by the balancer's retry
        budget, so a dead pool does not multiply its load. The error raised is the last
        real exception, carrying the attempts as ``poise_attempts`` (and a note); a
        :class:`SelectionError` is raised only if not even the first attempt could start.

        Args:
            fn: the call, awaited as ``fn(endpoint, *args, **kwargs)`` on each attempt.
            *args: passed to ``fn`` after the endpoint.
            attempts: at most this many attempts, hedges included.
            key: the routing key for hashing policies.
            hedge: send a copy to an endpoint not yet tried when no answer came within
                the hedge's delay (:class:`Hedge`); the first success wins, the others are
                cancelled through their permits. At most ``max(attempts,
                hedge.max_attempts)`` attempts. Default None.
            wait: seconds the first attempt may wait for an eligible endpoint
                (``acquire(wait=...)``). Default None: fail at once.
            backoff: the wait before each retry (:class:`RetryBackoff`: full jitter, or the
                server's pushback). Default None: retry at once.
            deadline: seconds for the whole call, retries, hedges and waits included;
                past it the attempt in flight is cancelled (no strike) and
                ``TimeoutError`` is raised. Default None.
            **kwargs: passed to ``fn``.
        """
        if hedge is None and wait is None and backoff is None and deadline is None:
            return await call_with_retries(self._internals.attempts(attempts, key=key), fn, args, kwargs)
        return await call_with_options(
            self,
            fn,
            args,
            kwargs,
            attempts=attempts,
            key=key,
            hedge=hedge,  # checked by the driver's hedging state
            wait=wait,
            backoff=backoff,
            deadline=deadline,
        )

    def coordination_statistics(self) -> CoordinationStatistics | None:
        """Counters of fleet coordination (None without ``coordination=``)."""
        return None if self._coordinator is None else self._coordinator.statistics()

    @property
    def retries_denied(self) -> int:
        """Retries and hedges :meth:`call` (and the transports) skipped because the retry budget was spent."""
        return self._budget.denied

    def _waiter_demand(self) -> None:
        """Callers wait for an endpoint: the fleet hears the demand, as from a refused ``acquire``."""
        if self._coordinator is not None:
            self._coordinator.refused(self._clock())

    def _waiter_refused(self, exc: SelectionError) -> SelectionError:
        """A waiter's time ran out: report the refusal as ``acquire`` does (may raise a readiness error)."""
        self._refused(exc)
        return exc

    def _exit_verdict(self, exc: BaseException, endpoint_id: str) -> Classification | None:
        """How a permit block left by ``exc`` is recorded, or None to cancel."""
        if isinstance(exc, BaseExceptionGroup):
            _, rest = exc.split(self._cancelled)
            leaf = _first_exception(rest) if rest is not None else None
        else:
            leaf = exc if isinstance(exc, Exception) and not isinstance(exc, self._cancelled) else None
        if leaf is None:  # cancellation, KeyboardInterrupt, SystemExit, GeneratorExit
            return None
        return self._internals.classify(leaf, endpoint_id)

    # -- operators and views -----------------------------------------------------------

    def set_status(self, endpoint_id: str, status: AdminStatus) -> None:
        """Set an operator status for one endpoint (KeyError if unknown).

        DRAINING and DISABLED stop new permits (in-flight ones finish: see
        :meth:`drained`); FORCED_HEALTHY and FORCED_UNHEALTHY overrule active health. A
        change bumps the endpoint's probe generation, so a probe in flight cannot
        overwrite it. AUTO hands the endpoint back to fresh probes and to its circuit, and
        also clears a PERMANENT block or a hard-cap retirement (a fresh circuit).

        Raises:
            KeyError: no live endpoint has this id.
            ConfigError: ``endpoint_id`` is not a string, or ``status`` is not an :class:`AdminStatus`.
            WrongThread: called from a thread other than the running balancer's.
        """
        self._on_owner_thread("set_status()")
        _check_id(endpoint_id)
        if not isinstance(status, AdminStatus):
            raise ConfigError("status", f"must be an AdminStatus, got {status!r}")
        member = self._pool.set_admin(endpoint_id, status, self._clock())
        if status is AdminStatus.AUTO and member.circuit.parked:
            self._pool.reset_circuit(member, self._clock())
        if self._health is not None:
            self._health.set_admin(member, status, self._clock())
        if status not in _DRAINS:
            waiter = self._drain_waiters.pop(member, None)
            if waiter is not None:
                waiter.set()  # the waiter sees the status and raises NotDraining

    async def drained(self, endpoint_id: str) -> None:
        """Wait until a DRAINING (or DISABLED) endpoint has no permit in flight.

        Returns at once if none is in flight (an endpoint in any other status raises, idle or
        not). Typical use: ``lb.set_status(id, AdminStatus.DRAINING)``, ``await
        lb.drained(id)``, then take the endpoint down.
        Bound the wait with ``anyio.fail_after`` if in-flight calls may hang.

        Raises:
            KeyError: no live endpoint has this id.
            ConfigError: ``endpoint_id`` is not a string.
            NotDraining: the endpoint is not DRAINING or DISABLED, or an operator moved it
                out of those statuses while permits were still in flight.
            WrongThread: called from a thread other than the running balancer's.
        """
        self._on_owner_thread("drained()", hand_over="anyio.from_thread.run")
        _check_id(endpoint_id)
        member = self._pool.members[endpoint_id]
        pool = self._pool
        while True:
            if pool.orphans:
                pool.release_orphans()
            if member.live and member.admin not in _DRAINS:  # first: an idle endpoint in service is no answer
                raise NotDraining(
                    f"endpoint {endpoint_id!r} is {member.admin.value}: it takes new permits, set it DRAINING first"
                )
            if member.inflight == 0:
                return
            waiter = self._drain_waiters.get(member)
            if waiter is None:
                waiter = self._drain_waiters[member] = anyio.Event()
            await waiter.wait()

    def statistics(self) -> BalancerStatistics:
        """Frozen counters: pool-wide totals (departed endpoints included) and per endpoint.

        Every count saturates at ``2**64 - 1``; the per-endpoint series are bounded by the
        live pool. A pure read: it fires no timer and emits nothing (the balancer's timer
        moves circuits and reports alerts on time), so a metrics reader may call it from
        another thread; there ``taken_at`` is NaN if the balancer's clock cannot be read.
        """
        telemetry = self._telemetry
        return _reread(
            lambda now: telemetry.statistics(
                now,
                retries_denied=self._budget.denied,
                readiness_failures=self._membership.readiness_failures,
                tails=(*self._internals.hedge_totals(), self._waiting.waited, self._waiting.expired),
            ),
            self._clock,
        )

    def events(self, *, buffer: int = DEFAULT_EVENT_BUFFER) -> EventStream:
        """Subscribe to the balancer's typed events: ``async for event in lb.events():``.

        The subscription starts now (before the first iteration). Each subscriber has its
        own buffer of ``buffer`` events; a subscriber that falls behind loses the oldest
        (counted in ``stream.dropped``) and never slows the balancer. The stream ends when
        the balancer stops, so start the reading task in a task group that outlives
        ``async with lb``, or close the stream yourself (``async with lb.events() as s:``).
        A stream subscribed while the balancer is stopped carries its next run's events and
        ends when that run does (it waits until the balancer is started again).
        Subscribe on the balancer's own thread (:class:`WrongThread` otherwise).
        """
        self._on_owner_thread("events()")
        return self._telemetry.subscribe(buffer)

    def add_observer(self, observer: Observer) -> None:
        """Call ``observer(event)`` synchronously for every event from now on.

        The callback runs inside the balancer's bookkeeping: it must not block, and should
        not call back into the balancer (hand the event to a task instead). An exception
        it raises is logged (rate-limited) and otherwise ignored. Add it on the balancer's
        own thread (:class:`WrongThread` otherwise).
        """
        self._on_owner_thread("add_observer()")
        self._telemetry.add_observer(observer)

    def remove_observer(self, observer: Observer) -> None:
        """Stop calling ``observer`` (ValueError if it was not added; WrongThread from another thread)."""
        self._on_owner_thread("remove_observer()")
        self._telemetry.remove_observer(observer)

    def add_call_observer(self, observer: CallObserver) -> None:
        """Call ``observer(ended)`` with a :class:`CallEnded` as each permit issued from now on ends.

        ``ended`` carries the endpoint, the outcome (success, fault tier or cancellation)
        and the duration from ``acquire`` to the report on the balancer's clock: what a
        call-duration histogram needs. The callback runs synchronously after the outcome
        is recorded, on every call: keep it cheap, never block. An exception it raises is
        logged (rate-limited) and otherwise ignored. A permit garbage-collected without a
        report is counted as a cancellation but not observed. With no call observer,
        permits pay nothing for this. Add it on the balancer's own thread
        (:class:`WrongThread` otherwise).
        """
        self._on_owner_thread("add_call_observer()")
        if not callable(observer):
            raise ConfigError("observer", f"must be callable, got {observer!r}")
        self._call_observers = (*self._call_observers, observer)

    def remove_call_observer(self, observer: CallObserver) -> None:
        """Stop calling ``observer`` for permits issued from now on.

        Raises:
            ValueError: ``observer`` was not added.
            WrongThread: called from a thread other than the running balancer's.
        """
        self._on_owner_thread("remove_call_observer()")
        observers = list(self._call_observers)
        observers.remove(observer)
        self._call_observers = tuple(observers)

    def _observer_failed(self, observer: object, exc: Exception) -> None:
        self._telemetry.log.log(
            logging.ERROR,
            ("call-observer", id(observer)),
            self._clock(),
            "poise_py: call observer %r raised",
            observer,
            exc_info=exc,
        )

    @property
    def discovery_rejected(self) -> int:
        """Discovery updates rejected (stale, duplicate, incoherent); the stream went on."""
        return self._telemetry.count(DiscoveryRejected)

    def snapshot(self) -> PoolSnapshot:
        """A frozen view of every endpoint and of the pool.

        A pure read, like :meth:`statistics`: safe from another thread (``taken_at`` is
        NaN there if the balancer's clock cannot be read).
        """
        pool = self._pool
        health = None if self._health is None else self._health.snapshot
        return _reread(lambda now: pool_snapshot(pool, now, health=health), self._clock)

    # -- background --------------------------------------------------------------------

    async def _apply(self, update: Update, *, ignore_duplicate: bool = False) -> None:
        membership = self._membership
        if ignore_duplicate and membership.revision == update.revision:
            return
        changes = await membership.apply(update, self._clock)
        now = self._clock()
        self._closed = False
        self._gate = self._owner if self._running else 0
        self._telemetry.emit(
            DiscoveryApplied(
                at=now,
                revision=update.revision,
                added=tuple(e.id for e in changes.added),
                removed=tuple(changes.removed),
                updated=tuple(e.id for e in changes.updated),
                size=len(self._pool.members),
            )
        )
        if self._coordinator is not None:
            self._coordinator.members_changed()

    def _discovery_rejected(self, update: object, exc: DiscoveryError) -> None:
        """Report a rejected update: counted, logged (rate-limited) and emitted as an event."""
        revision = getattr(update, "revision", None)
        self._telemetry.emit(
            DiscoveryRejected(at=self._clock(), revision=revision if isinstance(revision, int) else None, error=exc)
        )

    async def _run_discovery(self, source: AsyncIterable[Update]) -> None:
        try:
            iterator = aiter(source)
        except Exception:  # a stream that cannot even start has failed, as one that fails later
            logger.exception("poise_py: the discovery stream failed")
            self._discovery_ended()
            return
        # A Subscription can restart from a full snapshot once we reject one of its updates.
        resync: Callable[[], None] | None = getattr(iterator, "resync", None)
        try:
            # An async generator source is closed here, in this task, however the loop ends.
            async with (
                contextlib.aclosing(iterator) if isinstance(iterator, AsyncGenerator) else contextlib.nullcontext()
            ):
                async for update in iterator:
                    try:
                        await self._apply(update)
                    except DiscoveryError as exc:
                        self._discovery_rejected(update, exc)
                        if resync is not None:
                            resync()
        except Exception:
            logger.exception("poise_py: the discovery stream failed")
        self._discovery_ended()

    def _discovery_ended(self) -> None:
        self._discovery_over = True
        if self._on_end is DiscoveryEnd.FAIL_CLOSED:
            self._membership.clear(self._clock())
            self._closed = True
            self._gate = 0
            waiting = self._waiting  # nothing can come now: a waiter ends as a new acquire would
            waiting.close(lambda: waiting.explained(DiscoveryClosed(DISCOVERY_CLOSED)))
            logger.warning("poise_py: the discovery stream ended; failing closed")
        else:
            logger.info("poise_py: the discovery stream ended; serving the last known good pool")
        self._membership.notify()

    async def wait_ready(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 - the contract's API
        """Wait until the pool holds an endpoint that may serve (discovered, and ready if checked).

        Returns at once if one already does. Raises rather than wait for what cannot come.

        Args:
            timeout: seconds to wait at most; None waits as long as it takes.

        Raises:
            ReadyTimeout: nothing became usable within ``timeout``.
            ReadinessError: readiness failures quarantined every endpoint.
            DiscoveryClosed: the stream ended under ``DiscoveryEnd.FAIL_CLOSED``.
            EmptyPool: the stream ended (last-known-good) without delivering an endpoint.
            NotRunning: outside ``async with lb`` (also if the balancer stops meanwhile).
            WrongThread: called from a thread other than the running balancer's.
        """
        self._on_owner_thread("wait_ready()", hand_over="anyio.from_thread.run")
        if timeout is not None:
            timeout = check_duration("timeout", timeout, allow_zero=True)
        membership = self._membership
        with anyio.move_on_after(timeout):
            while True:
                if not self._running:
                    raise NotRunning("wait_ready() needs a running balancer: use it inside `async with lb:`")
                if self._closed:
                    raise DiscoveryClosed("the discovery stream ended and the balancer fails closed")
                if membership.usable:
                    return
                readiness = membership.readiness_error()
                if readiness is not None:
                    raise readiness
                if self._discovery_over and not self._pool.members:
                    raise EmptyPool("the discovery stream ended without delivering any endpoint")
                await membership.changed()
        raise ReadyTimeout(f"no endpoint became usable within {timeout}s")

    @property
    def discovery_revision(self) -> int | None:
        """The revision of the live pool, or None before the first update."""
        return self._membership.revision

    @property
    def readiness_failures(self) -> int:
        """Failed readiness checks so far (saturating at ``2**64 - 1``)."""
        return self._membership.readiness_failures

    def _coordination_fallback(self, at: float, error: BaseException, endpoint_id: str | None, storage: str) -> None:
        self._telemetry.emit(CoordinationFallback(at=at, endpoint_id=endpoint_id, error=error, storage=storage))

    def _now(self) -> float:
        """The current clock reading (the clock is chosen again by ``async with``)."""
        return self._clock()


def _reread(read: Callable[[float], T], clock: Callable[[], float]) -> T:
    """``read(now)``, again if a dict changed size under a reader on another thread."""
    try:
        now = clock()
    except Exception:  # noqa: BLE001 - outside the event loop the backend clock cannot be read
        now = math.nan
    for _ in range(3):
        try:
            return read(now)
        except (RuntimeError, KeyError):  # the pool changed under a reader thread: read again
            continue
    return read(now)


def _first_exception(group: BaseException) -> Exception | None:
    if isinstance(group, BaseExceptionGroup):
        for inner in group.exceptions:
            found = _first_exception(inner)
            if found is not None:
                return found
        return None
    return group if isinstance(group, Exception) else None


_DRAINS = frozenset({AdminStatus.DRAINING, AdminStatus.DISABLED})


def _check_id(endpoint_id: object) -> None:
    """An endpoint id is a string: anything else is a ConfigError (an unhashable one would be a TypeError)."""
    if not isinstance(endpoint_id, str):
        raise ConfigError("endpoint_id", f"must be an endpoint's id (a string), got {endpoint_id!r:.80}")
