"""Revisioned, transactional membership: validate an update before anything is built.

:meth:`Directory.plan` checks an update against the live revision and ids and returns
the :class:`Changes` it would make, raising a typed :class:`DiscoveryError` (and
changing nothing) if the update is stale, duplicate, overflowing or incoherent. Only
after the caller has built whatever the change needs (endpoint factories) does it call
:meth:`Directory.commit`. A snapshot is diffed against the live pool, so survivors keep
their identity (and the balancer their health state) whatever their position.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

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


def _unique(endpoints: Collection[Endpoint], what: str) -> None:
    seen: set[str] = set()
    for e in endpoints:
        if e.id in seen:
            raise DuplicateIdentity(f"{what} names endpoint {e.id!r} twice")
        seen.add(e.id)


def _diff(revision: int, endpoints: tuple[Endpoint, ...], live: Mapping[str, Endpoint]) -> Changes:
    """The changes from ``live`` to ``endpoints``: one pass over the snapshot, one lookup each."""
    incoming = {e.id: e for e in endpoints}
    if len(incoming) != len(endpoints):
        _unique(endpoints, f"snapshot {revision}")
    added: list[Endpoint] = []
    updated: list[Endpoint] = []
    get = live.get
    for endpoint_id, endpoint in incoming.items():
        old = get(endpoint_id)
        if old is None:
            added.append(endpoint)
        elif old is not endpoint and old != endpoint:
            updated.append(endpoint)
    kept = len(incoming) - len(added)
    removed = () if kept == len(live) else tuple(i for i in live if i not in incoming)
    return Changes(revision=revision, added=tuple(added), removed=removed, updated=tuple(updated))


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
        """Validate ``update`` against ``live`` (id -> endpoint) and return its changes."""
        if not isinstance(update, Snapshot | Delta):
            raise DiscoveryError(f"an update must be a Snapshot or a Delta, got {update!r}")
        revision = self.check_revision(update.revision)
        if isinstance(update, Snapshot):
            return _diff(revision, update.endpoints, live)
        _unique((*update.added, *update.updated), f"delta {revision}")
        removed = tuple(dict.fromkeys(update.removed))
        gone = set(removed)
        for e in update.added:
            if e.id in live and e.id not in gone:
                raise DuplicateIdentity(f"delta {revision} adds {e.id!r}, which is live; use updated=")
        for e in update.updated:
            if e.id not in live or e.id in gone:
                raise UnknownIdentity(f"delta {revision} updates {e.id!r}, which is not live")
        return Changes(
            revision=revision,
            added=update.added,
            removed=tuple(i for i in removed if i in live),
            updated=tuple(e for e in update.updated if live[e.id] != e),
        )

    def commit(self, changes: Changes) -> None:
        """Make ``changes.revision`` the live revision (after the pool applied them)."""
        self.revision = changes.revision
