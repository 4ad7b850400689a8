"""Transactional membership for the balancer: plan, build, then commit; and readiness.

Theory of operation
-------------------
An update goes through three steps, and only the last one changes anything a caller of
``acquire`` can see:

1. *plan*: :meth:`Directory.plan` validates the revision and the identities against the
   live pool and computes the changes (typed :class:`DiscoveryError` otherwise). No
   endpoint is constructed before this passes.
2. *build*: the endpoint factory (sync or async) runs for each added endpoint. If it
   raises, whatever it already built for this update goes to ``endpoint_close``, and
   :class:`EndpointFactoryError` (cause chained) leaves the previous pool live.
3. *commit*: one synchronous call applies the changes to the pool (O(changes)) and makes
   the revision live. No await separates it from the pool, so no permit is issued from a
   half-applied update.

Survivors keep their :class:`Member` (circuit, windows, counters, resource). A
removed state is marked not live: its in-flight permits finish, their results are
ignored, and its resource is closed when the last one ends. A re-added id gets a new
state, a new resource and a fresh circuit.

Readiness: a resource with a ``ready()`` method (async, or sync) keeps its endpoint out
of selection as NOT_READY until ``ready()`` returns; a failure (it raises, returns False,
or outlasts :attr:`Readiness.timeout`) quarantines that endpoint alone for
:attr:`Readiness.cooldown`, after which it is checked again. Each check is a task in the
balancer's task group; the cool-downs are the pure
:class:`~poise_py._core._readiness.Quarantine`'s, and :class:`Membership` is a client of
the balancer's one timer (:mod:`poise_py._timer`) that starts the next check when one is
due. The pool is never
quarantined: if a failure leaves every member quarantined (none usable, none still
pending), :meth:`Membership.readiness_error` returns the :class:`ReadinessError` naming
it and its index at that moment.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias, TypeVar, overload

import anyio
import anyio.abc
import anyio.lowlevel
import attrs

from ._core import _directory
from ._core._directory import Changes, Directory
from ._core._pool import Pool
from ._core._readiness import Quarantine
from ._core._record import Member, sat_add
from ._discovery import Update
from ._endpoint import Endpoint
from ._errors import EndpointFactoryError, IneligibleReason, ReadinessError
from ._knobs import check_duration
from ._redact import shown

logger = logging.getLogger("poise_py")

EndpointFactory: TypeAlias = Callable[[Endpoint], Any]
"""Builds per-endpoint state (a connection pool, a client) from an endpoint; may be async."""

EndpointClose: TypeAlias = Callable[[Any], Awaitable[object] | object]
"""Releases what the factory built; may be async."""

ChangeHook: TypeAlias = Callable[[float, Sequence[str], Sequence[str]], None]
"""``hook(now, added_ids, removed_ids)``: told of each membership change as it is committed."""

_NOT_READY = IneligibleReason.NOT_READY
_QUARANTINED = IneligibleReason.QUARANTINED


@attrs.frozen(kw_only=True)
class Readiness:
    """How endpoints whose resource has a ``ready()`` method are admitted.

    Attributes:
        timeout: seconds one ``ready()`` call may take; longer counts as a failure.
        cooldown: seconds a failed endpoint stays QUARANTINED before it is checked again.
    """

    timeout: float = 10.0
    cooldown: float = 5.0

    def __attrs_post_init__(self) -> None:
        check_duration("Readiness.timeout", self.timeout)
        check_duration("Readiness.cooldown", self.cooldown)


def _ready_method(resource: object) -> Callable[[], object] | None:
    ready = getattr(resource, "ready", None)
    return ready if callable(ready) else None


_T = TypeVar("_T")


class LiveEndpoints(Mapping[str, Endpoint]):
    """The pool's members as ``id -> endpoint``, read in place (a view: nothing to keep in step)."""

    __slots__ = ("_members",)

    def __init__(self, members: Mapping[str, Member]) -> None:
        self._members = members

    def __getitem__(self, key: str) -> Endpoint:
        return self._members[key].endpoint

    @overload
    def get(self, key: str, /) -> Endpoint | None: ...
    @overload
    def get(self, key: str, default: Endpoint | _T, /) -> Endpoint | _T: ...
    def get(self, key: str, default: object = None, /) -> object:
        """The live endpoint ``key``, or ``default`` (one lookup, no exception on a miss)."""
        member = self._members.get(key)
        return default if member is None else member.endpoint

    def __contains__(self, key: object) -> bool:
        return key in self._members

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)


class Membership:
    """The balancer's membership: applies updates transactionally, owns resources and readiness.

    Args:
        pool: the pool whose members this manages.
        factory: the endpoint factory, or None (no resources, no readiness).
        close: releases a resource the factory built, or None.
        readiness: readiness knobs for resources with ``ready()``.
        on_change: told of each membership change, in the same synchronous step (active
            health tracks the members this way).
    """

    def __init__(
        self,
        pool: Pool,
        resources: dict[Member, object] | None = None,
        *,
        factory: EndpointFactory | None = None,
        close: EndpointClose | None = None,
        readiness: Readiness | None = None,
        on_change: ChangeHook | None = None,
        wake: Callable[[], None] | None = None,
    ) -> None:
        self.pool = pool
        self.resources: dict[Member, object] = {} if resources is None else resources
        """What the endpoint factory built for each member (``Permit.resource`` reads it)."""
        self.directory = Directory()
        self._live = LiveEndpoints(pool.members)
        """``id -> endpoint`` of the pool's members, read in place: what an update is planned against."""
        self._factory = factory
        self._close = close
        self._readiness = readiness or Readiness()
        self._on_change = on_change
        self._checks: dict[Member, anyio.CancelScope | None] = {}
        """Members not yet usable (NOT_READY or QUARANTINED), with their check's scope."""
        self._retiring: set[Member] = set()
        """Removed members whose resource waits for their last permit."""
        self._task_group: anyio.abc.TaskGroup | None = None
        self._changed: anyio.Event | None = None
        self._quarantined: dict[Member, None] = {}
        """Quarantined members, as an ordered set: the latest failure last."""
        self._exhausted: tuple[Member, int] | None = None
        """The failure that left every member quarantined, and its index then."""
        self._rebuild = False
        self._cooling: Quarantine[Member] = Quarantine(self._readiness.cooldown)
        self._clock: Callable[[], float] | None = None
        self.readiness_failures = 0
        """Failed ``ready()`` checks (saturating)."""
        self.wake: Callable[[], None] = _nothing if wake is None else wake
        """Tell the balancer's timer that the next cool-down may have moved."""

    # -- updates -----------------------------------------------------------------------

    @property
    def revision(self) -> int | None:
        """The live revision, or None before the first update."""
        return self.directory.revision

    async def apply(self, update: Update, clock: Callable[[], float]) -> Changes:
        """Plan, build and commit ``update``; if a step fails, raise a :class:`DiscoveryError`.

        Planning includes the pool's weight bound (:class:`WeightOverflow`), so nothing is
        built for an update the pool would refuse.
        """
        planner = self.directory.planner(update, self._live)
        while (changes := planner.step()) is None:
            await anyio.lowlevel.checkpoint()
        self.pool.check_weights(changes.added, changes.removed, changes.updated)  # WeightOverflow
        resources = await self._build(changes.added) if self._factory is not None else None
        pool = self.pool
        added = changes.added
        built: dict[str, Member] = {}
        for start in range(0, len(added), step := _directory.STEP):
            await anyio.lowlevel.checkpoint()
            built.update(pool.build(added[start : start + step], clock()))
        self._change(changes, resources, clock(), built)
        self.directory.commit(changes)
        return changes

    def clear(self, now: float) -> None:
        """Remove every member (fail-closed); the live revision stays what it was."""
        members = self.pool.members
        if members:
            self._change(Changes(revision=self.directory.revision or 0, removed=tuple(members)), None, now)

    async def _build(self, endpoints: Sequence[Endpoint]) -> list[object]:
        factory = self._factory
        assert factory is not None  # noqa: S101 - checked by the caller
        built: list[object] = []
        try:
            for n, endpoint in enumerate(endpoints):
                if n and not n % _directory.STEP:
                    await anyio.lowlevel.checkpoint()  # a sync factory must not hold the loop either
                try:
                    resource = factory(endpoint)
                    if inspect.isawaitable(resource):
                        resource = await resource
                except Exception as exc:
                    raise self._factory_failed(endpoint, exc) from exc
                built.append(resource)
        except BaseException:
            # Nothing of this update will be applied: release what it built, even if cancelled.
            with anyio.CancelScope(shield=True):
                for resource in built:
                    await self._close_one(resource)
            raise
        return built

    def _factory_failed(self, endpoint: Endpoint, exc: Exception) -> EndpointFactoryError:
        """The error for a factory that raised ``exc``, ending with the cause (what to do, often)."""
        kept = (
            "nothing was applied (no pool was live yet)"
            if self.directory.revision is None
            else "the previous pool stays live"
        )
        try:
            text = " ".join(str(exc).split())
        except Exception:  # noqa: BLE001 - a broken __str__ must not hide the failure
            text = ""
        cause = f"{type(exc).__name__}: {shown(text)}" if text else type(exc).__name__
        return EndpointFactoryError(endpoint.id, f"{kept}: {cause}")

    def _change(
        self,
        changes: Changes,
        resources: list[object] | None,
        now: float,
        built: Mapping[str, Member] | None = None,
    ) -> None:
        # Synchronous from here to the end: no permit sees a half-applied update.
        pool = self.pool
        members = pool.members
        gone = pool.apply(now, added=changes.added, removed=changes.removed, updated=changes.updated, built=built)
        if self._on_change is not None:
            self._on_change(now, [e.id for e in changes.added], changes.removed)
        if self._checks or self._cooling or self._quarantined or self._exhausted is not None:
            for member in gone:
                self._forget(member)
        if self.resources:
            for member in gone:
                if member in self.resources:
                    self._retire(member)
        if changes.added:
            self._exhausted = None
        if resources is not None:
            for endpoint, resource in zip(changes.added, resources, strict=True):
                member = members[endpoint.id]
                if resource is not None:
                    self.resources[member] = resource
                if _ready_method(resource) is not None:
                    pool.set_readiness(member, _NOT_READY)
                    self._checks[member] = None
                    if self._task_group is not None:
                        self._task_group.start_soon(self._check, member)
        self.notify()

    def _forget(self, member: Member) -> None:
        """A removed member's readiness bookkeeping goes (only when any is kept: a large update skips it)."""
        scope = self._checks.pop(member, None)
        if scope is not None:
            scope.cancel()
        self._cooling.remove(member)
        self._quarantined.pop(member, None)
        if self._exhausted is not None and self._exhausted[0] is member:
            self._exhausted = None

    def _retire(self, member: Member) -> None:
        """A removed member's resource is released now, or after its last permit."""
        if member.inflight == 0:
            self._dispose(member)
        else:
            self._retiring.add(member)

    def idle(self, member: Member) -> None:
        """A removed endpoint's last permit ended: release its resource now."""
        if member in self._retiring and self._task_group is not None:
            self._retiring.discard(member)
            self._dispose(member)

    def _dispose(self, member: Member) -> None:
        task_group = self._task_group
        if task_group is None:
            self._retiring.add(member)  # no task group to close it in: aclose() will
            return
        resource = self.resources.pop(member, None)
        if self._close is not None and resource is not None:
            task_group.start_soon(self._close_one, resource)

    async def _close_one(self, resource: object) -> None:
        close = self._close
        if close is None:
            return
        try:
            result = close(resource)
            if inspect.isawaitable(result):
                with anyio.CancelScope(shield=True):
                    await result
        except Exception:
            logger.exception("poise_py: endpoint_close raised for %r; ignored", resource)

    # -- lifecycle ---------------------------------------------------------------------

    async def prepare(self) -> None:
        """Before the balancer starts: rebuild the resources a previous run closed."""
        if not self._rebuild:
            return
        states = list(self.pool.members.values())
        resources = await self._build([s.endpoint for s in states])
        self._rebuild = False
        self._exhausted = None
        for member, resource in zip(states, resources, strict=True):
            if resource is not None:
                self.resources[member] = resource
            self._quarantined.pop(member, None)
            self._cooling.remove(member)
            if _ready_method(resource) is not None:  # a new resource is checked afresh
                self.pool.set_readiness(member, _NOT_READY)
                self._checks[member] = None
            else:
                self._checks.pop(member, None)
                self.pool.set_readiness(member, None)

    def attach(self, task_group: anyio.abc.TaskGroup, clock: Callable[[], float]) -> None:
        """Run readiness checks and closes in ``task_group`` (the balancer's), reading ``clock``."""
        self._task_group = task_group
        self._clock = clock
        self._cooling.clear()  # every pending check starts now, quarantined or not
        for member in self._checks:
            task_group.start_soon(self._check, member)

    def detach(self) -> None:
        """Stop using the task group (it has ended, or is ending): checks restart at the next attach."""
        self._task_group = None
        for member in self._checks:
            self._checks[member] = None

    # -- the timer client ----------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When a quarantined endpoint is next due for a check, or None."""
        return None if self._task_group is None else self._cooling.next_deadline()

    def handle_timer(self, now: float) -> None:
        """Start a check of every endpoint whose cool-down has ended at ``now``."""
        task_group = self._task_group
        if task_group is None:
            return
        checks = self._checks
        for member in self._cooling.due(now):
            if member in checks and checks[member] is None:
                task_group.start_soon(self._check, member)

    async def aclose(self) -> None:
        """When the balancer stops: close every resource (shielded); the next run rebuilds them."""
        if self._close is None:
            return
        states = [*self.pool.members.values(), *self._retiring]
        self._retiring.clear()
        self._rebuild = self._factory is not None and bool(self.pool.members)
        with anyio.CancelScope(shield=True):
            for member in states:
                resource = self.resources.pop(member, None)
                if resource is not None:
                    await self._close_one(resource)

    # -- readiness ---------------------------------------------------------------------

    @property
    def usable(self) -> int:
        """Members that passed readiness (or need none)."""
        return len(self.pool.members) - len(self._checks)

    def readiness_error(self) -> ReadinessError | None:
        """While every member is quarantined, the error naming the failure that did it; else None."""
        quarantined = self._quarantined
        if not quarantined or len(quarantined) != len(self.pool.members):
            return None
        if self._exhausted is None:  # a removal, not a failure, left only quarantined members
            self._exhaust(next(reversed(quarantined)))
        assert self._exhausted is not None  # noqa: S101 - just set
        member, index = self._exhausted
        return ReadinessError(index, member.endpoint.id)

    def _exhaust(self, member: Member) -> None:
        # O(n), but only when the pool becomes exhausted, not on every failure.
        index = list(self.pool.members).index(member.endpoint.id)
        self._exhausted = (member, index)
        logger.error(
            "poise_py: readiness failures quarantined the whole pool (last: %r at index %d)",
            member.endpoint.id,
            index,
        )

    async def _check(self, member: Member) -> None:
        if member not in self._checks or self._checks[member] is not None:
            return  # removed before it started, or already being checked
        ready = _ready_method(self.resources.get(member))
        if ready is None:  # pragma: no cover - only resources with ready() are queued
            return
        with anyio.CancelScope() as scope:
            self._checks[member] = scope
            problem = await _try_ready(ready, self._readiness.timeout)
            if problem is None:
                self._passed(member)
            else:
                self._failed(member, problem)

    def _passed(self, member: Member) -> None:
        if member not in self._checks:
            return  # removed while ready() was returning; its cancellation has not landed yet
        del self._checks[member]
        failures = self._cooling.passed(member)
        self._quarantined.pop(member, None)
        self._exhausted = None
        self.pool.set_readiness(member, None)
        if failures:
            logger.info("poise_py: endpoint %r passed readiness after %d failures", member.endpoint.id, failures)
        self.notify()

    def _failed(self, member: Member, problem: str) -> None:
        if member not in self._checks:
            return  # removed while ready() was failing
        self._checks[member] = None  # no check running: the next starts when the cool-down ends
        clock = self._clock
        assert clock is not None  # noqa: S101 - checks run only once attached
        failures = self._cooling.failed(member, clock())
        self.wake()
        self.readiness_failures = sat_add(self.readiness_failures)
        self.pool.set_readiness(member, _QUARANTINED)
        # One warning per failing streak, not one per check: rule 5 (rate-limit per-endpoint logs).
        log = logger.warning if failures == 1 else logger.debug
        log(
            "poise_py: endpoint %r failed readiness (%s); quarantined for %.3gs",
            member.endpoint.id,
            problem,
            self._readiness.cooldown,
        )
        quarantined = self._quarantined
        quarantined.pop(member, None)
        quarantined[member] = None
        if self._exhausted is None and len(quarantined) == len(self.pool.members):
            self._exhaust(member)
        self.notify()

    # -- waiting -----------------------------------------------------------------------

    async def changed(self) -> None:
        """Wait until membership or readiness next changes (or :meth:`notify`)."""
        event = self._changed
        if event is None:
            event = self._changed = anyio.Event()
        await event.wait()

    def notify(self) -> None:
        """Wake every :meth:`changed` waiter."""
        event = self._changed
        if event is not None:
            self._changed = None
            event.set()


async def _try_ready(ready: Callable[[], object], limit: float) -> str | None:
    """Run one readiness check for at most ``limit`` seconds; None if it passed, else what went wrong."""
    with anyio.move_on_after(limit):
        try:
            result = ready()
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:  # noqa: BLE001 - any failure of ready() is that endpoint's
            return f"{type(exc).__name__}: {exc}"
        return "ready() returned False" if result is False else None
    # Only a timeout gets here: every other path returned inside the block.
    return f"no answer within {limit:.3g}s"


def _nothing() -> None:
    """The default :attr:`Membership.wake`: no timer to tell."""
