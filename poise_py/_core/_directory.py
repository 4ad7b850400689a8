"""Revisioned, transactional membership: validate an update before anything is built.

:meth:`Directory.plan` checks an update against the live revision and ids and returns
the :class:`Changes` it would make, raising a typed :class:`DiscoveryError` (and
changing nothing) if the update is stale, duplicate, overflowing or incoherent. Only
after the caller has built whatever the change needs (endpoint factories) does it call
:meth:`Directory.commit`. A snapshot is diffed against the live pool, so survivors keep
their identity (and the balancer their health state) whatever their position.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import attrs

from .._endpoint import Endpoint
from .._errors import (
    DiscoveryError,
    DuplicateIdentity,
    DuplicateRevision,
    RevisionOverflow,
    StaleRevision,
    UnknownIdentity,
)
from ._updates import Delta, Snapshot, Update

MAX_REVISION = 2**63 - 1
"""The largest revision a directory accepts (a signed 64-bit counter, as in etcd)."""


@attrs.frozen(kw_only=True)
class Changes:
    """What an update does to the live pool."""

    revision: int
    added: tuple[Endpoint, ...] = ()
    removed: tuple[str, ...] = ()
    updated: tuple[Endpoint, ...] = ()

    @property
    def empty(self) -> bool:
        """True when the update changes no endpoint (only the revision)."""
        return not (self.added or self.removed or self.updated)


STEP = 2048
"""Endpoints (or ids) one planning or building step handles: the bound on a step's work.

The shell yields to the event loop between steps, so applying an update of any size
never holds the loop for longer than one step (a few milliseconds) at a time."""


def _take_unique(endpoints: tuple[Endpoint, ...], start: int, seen: dict[str, Endpoint], what: str) -> None:
    """Index ``endpoints[start:start + STEP]`` by id into ``seen``; DuplicateIdentity on a repeat."""
    for e in endpoints[start : start + STEP]:
        endpoint_id = e.id
        if endpoint_id in seen:
            raise DuplicateIdentity(f"{what} names endpoint {endpoint_id!r} twice")
        seen[endpoint_id] = e


class Planner:
    """One update's plan, computed in bounded steps (pure: the caller decides when to go on).

    Call :meth:`step` until it returns the :class:`Changes`; each call handles at most
    :data:`STEP` endpoints or ids, so a shell can yield to its event loop between calls.
    A :class:`DiscoveryError` is raised by the step that finds it (the revision and the
    update's type are checked at construction). The live endpoints must not change
    while a plan is in progress (the directory's owner applies one update at a time);
    an abandoned planner changes nothing.
    """

    def __init__(self, directory: Directory, update: Update, live: Mapping[str, Endpoint]) -> None:
        if not isinstance(update, Snapshot | Delta):
            raise DiscoveryError(f"an update must be a Snapshot or a Delta, got {update!r}")
        self._revision = directory.check_revision(update.revision)
        self._live = live
        self._steps: Iterator[None] = (
            self._diff(update.endpoints) if isinstance(update, Snapshot) else self._delta(update)
        )
        self._changes: Changes | None = None
        self.steps: int = 0
        """Steps taken so far (each bounded by :data:`STEP`)."""

    def step(self) -> Changes | None:
        """Do one bounded step; the changes once the plan is complete, else None."""
        if self._changes is None:
            self.steps += 1
            next(self._steps, None)
        return self._changes

    def run(self) -> Changes:
        """Every remaining step at once."""
        while (changes := self.step()) is None:
            pass
        return changes

    def _diff(self, endpoints: tuple[Endpoint, ...]) -> Iterator[None]:
        """The changes from the live endpoints to ``endpoints``: one lookup per endpoint."""
        revision = self._revision
        what = f"snapshot {revision}"
        incoming: dict[str, Endpoint] = {}
        count = len(endpoints)
        for start in range(0, count, STEP):
            _take_unique(endpoints, start, incoming, what)
            yield
        added: list[Endpoint] = []
        updated: list[Endpoint] = []
        get = self._live.get
        for start in range(0, count, STEP):
            for endpoint in endpoints[start : start + STEP]:
                old = get(endpoint.id)
                if old is None:
                    added.append(endpoint)
                elif old is not endpoint and old != endpoint:
                    updated.append(endpoint)
            yield
        removed: list[str] = []
        if count - len(added) != len(self._live):
            ids = list(self._live)
            for start in range(0, len(ids), STEP):
                removed.extend([i for i in ids[start : start + STEP] if i not in incoming])
                yield
        self._changes = Changes(revision=revision, added=tuple(added), removed=tuple(removed), updated=tuple(updated))

    def _delta(self, update: Delta) -> Iterator[None]:
        revision = self._revision
        what = f"delta {revision}"
        live = self._live
        named: dict[str, Endpoint] = {}
        both = (*update.added, *update.updated)
        for start in range(0, len(both), STEP):
            _take_unique(both, start, named, what)
            yield
        removed = update.removed
        gone: set[str] = set()
        for start in range(0, len(removed), STEP):
            for i in removed[start : start + STEP]:
                if i in gone:
                    raise DuplicateIdentity(f"{what} removes {i!r} twice")
                gone.add(i)
            yield
        added = update.added
        for start in range(0, len(added), STEP):
            for e in added[start : start + STEP]:
                if e.id in live and e.id not in gone:
                    raise DuplicateIdentity(f"{what} adds {e.id!r}, which is live; use updated=")
            yield
        updated: list[Endpoint] = []
        for start in range(0, len(update.updated), STEP):
            for e in update.updated[start : start + STEP]:
                old = live.get(e.id)
                if old is None or e.id in gone:
                    raise UnknownIdentity(f"{what} updates {e.id!r}, which is not live")
                if old != e:
                    updated.append(e)
            yield
        leaving: list[str] = []
        for start in range(0, len(removed), STEP):
            leaving.extend([i for i in removed[start : start + STEP] if i in live])
            yield
        self._changes = Changes(revision=revision, added=added, removed=tuple(leaving), updated=tuple(updated))


class Directory:
    """The live revision; plans updates against the live endpoints."""

    def __init__(self) -> None:
        self.revision: int | None = None

    def check_revision(self, revision: object) -> int:
        """Raise unless ``revision`` is newer than the live one and in range."""
        if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
            raise DiscoveryError(f"revision must be an int >= 0, got {revision!r}")
        if revision > MAX_REVISION:
            raise RevisionOverflow(f"revision {revision} is past the maximum {MAX_REVISION}")
        live = self.revision
        if live is not None:
            if revision == live:
                raise DuplicateRevision(f"revision {revision} is already live")
            if revision < live:
                raise StaleRevision(f"revision {revision} is older than the live {live}")
        return revision

    def plan(self, update: Update, live: Mapping[str, Endpoint]) -> Changes:
        """Validate ``update`` against ``live`` (id -> endpoint) and return its changes, in one go."""
        return Planner(self, update, live).run()

    def planner(self, update: Update, live: Mapping[str, Endpoint]) -> Planner:
        """A :class:`Planner` for ``update`` against ``live``, to run in bounded steps."""
        return Planner(self, update, live)

    def commit(self, changes: Changes) -> None:
        """Make ``changes.revision`` the live revision (after the pool applied them)."""
        self.revision = changes.revision
