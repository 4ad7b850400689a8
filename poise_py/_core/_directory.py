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

from .._discovery import Delta, Snapshot, Update
from .._endpoint import Endpoint
from .._errors import (
    DiscoveryError,
    DuplicateIdentity,
    DuplicateRevision,
    RevisionOverflow,
    StaleRevision,
    UnknownIdentity,
)

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
            _unique(update.endpoints, f"snapshot {revision}")
            incoming = {e.id: e for e in update.endpoints}
            return Changes(
                revision=revision,
                added=tuple(e for i, e in incoming.items() if i not in live),
                removed=tuple(i for i in live if i not in incoming),
                updated=tuple(e for i, e in incoming.items() if i in live and live[i] != e),
            )
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
