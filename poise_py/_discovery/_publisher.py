"""One publisher, many subscribers: an in-memory discovery stream with coalescing.

Theory of operation
-------------------
The publisher keeps the pool it has published so far (the revision and the endpoints in
order), validated by the same :class:`~poise_py._core._directory.Directory` the balancer
uses, so a bad update raises at :meth:`DiscoveryPublisher.publish` and nobody sees it.

Each subscription holds at most one pending update. If a subscriber has consumed
everything before an update, it is handed that update as published (a Delta stays a
Delta: O(changes) for the balancer). If it is behind, its pending item becomes "the
latest snapshot", built once per revision and shared by every lagging subscriber: a slow
subscriber skips to the newest pool instead of queueing every step, and memory stays
bounded whatever the lag. Closing the publisher (or dropping it) wakes every subscriber;
each delivers its pending item, if any, then ends.

The publisher and its subscriptions live on one event loop thread: ``publish`` and
``close`` are plain synchronous calls, never awaited, safe from any task.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator

import anyio

from .._core._directory import Changes, Directory
from .._core._updates import Snapshot, Update
from .._endpoint import Endpoint
from .._errors import PublisherClosed


class _Latest:
    """The pending marker that means "the channel's latest snapshot, whatever it is then"."""

    __slots__ = ()


_LATEST = _Latest()


class _Channel:
    """The state a publisher shares with its subscriptions (they never hold the publisher)."""

    def __init__(self) -> None:
        self.directory: Directory = Directory()
        self.endpoints: dict[str, Endpoint] = {}
        self.closed: bool = False
        self.subscriptions: weakref.WeakSet[Subscription] = weakref.WeakSet()
        self._snapshot: Snapshot | None = None

    @property
    def revision(self) -> int | None:
        return self.directory.revision

    def latest(self) -> Snapshot:
        """The whole pool at the live revision, built at most once per revision."""
        snapshot = self._snapshot
        revision = self.directory.revision
        assert revision is not None  # noqa: S101 - only asked for once something was published
        if snapshot is None or snapshot.revision != revision:
            snapshot = self._snapshot = Snapshot(revision, tuple(self.endpoints.values()))
        return snapshot

    def publish(self, update: Update) -> None:
        if self.closed:
            raise PublisherClosed("this DiscoveryPublisher is closed")
        before = self.directory.revision
        changes = self.directory.plan(update, self.endpoints)
        self._commit(update, changes)
        for subscription in tuple(self.subscriptions):
            subscription._offer(update, before)

    def _commit(self, update: Update, changes: Changes) -> None:
        endpoints = self.endpoints
        if isinstance(update, Snapshot):
            self.endpoints = {e.id: e for e in update.endpoints}
            self._snapshot = update
        else:
            for endpoint_id in changes.removed:
                del endpoints[endpoint_id]
            for endpoint in changes.updated:
                endpoints[endpoint.id] = endpoint
            for endpoint in changes.added:
                endpoints[endpoint.id] = endpoint
            # Stale now (a new revision): holding it would keep every departed endpoint
            # alive until a lagging subscriber asked for a newer one.
            self._snapshot = None
        self.directory.commit(changes)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for subscription in tuple(self.subscriptions):
            subscription._wake()


class DiscoveryPublisher:
    """An in-memory discovery source: publish updates, subscribe any number of balancers.

    ``publish`` validates each update against what was published before (the same checks
    the balancer makes) and raises a :class:`DiscoveryError` for a stale, duplicate,
    overflowing or incoherent one, which no subscriber then sees. A slow subscriber is
    not queued every update: it receives the latest snapshot. ``close()``, or dropping
    the last reference to the publisher, wakes every subscriber, which receives the
    final snapshot (if it had not seen it yet) and then the end of its stream.

    Example::

        pub = poise.DiscoveryPublisher()
        lb = poise.LoadBalancer(discovery=pub.subscribe())
        pub.publish(poise.Snapshot(revision=1, endpoints=[...]))
        pub.publish(poise.Delta(revision=2, removed=["a"]))
        pub.close()
    """

    def __init__(self) -> None:
        self._channel = _Channel()

    def publish(self, update: Update) -> None:
        """Publish a :class:`Snapshot` or :class:`Delta` to every subscriber.

        Raises:
            DiscoveryError: the update does not apply to the published pool (a
                :class:`StaleRevision`, :class:`DuplicateRevision`, :class:`RevisionOverflow`,
                :class:`DuplicateIdentity` or :class:`UnknownIdentity`); nothing changed.
            PublisherClosed: the publisher was closed.
        """
        self._channel.publish(update)

    def subscribe(self) -> Subscription:
        """A new stream of updates for one consumer (pass it as ``discovery=``).

        It starts with the latest snapshot, if anything was published.
        """
        return Subscription(self._channel)

    def close(self) -> None:
        """End every subscription after its final snapshot. Idempotent."""
        self._channel.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._channel.closed

    @property
    def revision(self) -> int | None:
        """The revision last published, or None."""
        return self._channel.revision

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """The pool as published so far, in order."""
        return tuple(self._channel.endpoints.values())

    @property
    def subscribers(self) -> int:
        """How many subscriptions are still referenced."""
        return len(self._channel.subscriptions)

    def __del__(self) -> None:
        # Dropping the publisher ends the streams, as dropping poise-rs's sender does.
        # Only flags and Event.set(): safe wherever the garbage collector runs us.
        channel: _Channel | None = getattr(self, "_channel", None)  # None: __init__ refused its arguments
        if channel is not None:
            channel.close()


class Subscription:
    """One consumer's stream from a :class:`DiscoveryPublisher`: an async iterator of updates.

    Attributes:
        coalesced: updates this subscriber never saw one by one because it was behind
            (it received a later snapshot instead).
    """

    def __init__(self, channel: _Channel) -> None:
        self._channel = channel
        self._pending: Update | _Latest | None = None if channel.revision is None else _LATEST
        self._seen: int | None = None
        self._resync = False
        self._waiter: anyio.Event | None = None
        self.coalesced: int = 0
        channel.subscriptions.add(self)

    def resync(self) -> None:
        """Make the next update delivered a full snapshot (after a consumer rejected one).

        The balancer calls this when it rejects an update (say its endpoint factory
        failed), so a later Delta is never applied on top of a pool that missed one.
        """
        self._resync = True
        if self._pending is not None and self._pending is not _LATEST:
            self._pending = _LATEST

    def _offer(self, update: Update, before: int | None) -> None:
        if self._pending is None and not self._resync and self._seen == before:
            self._pending = update
        else:
            if self._pending is not None:
                self.coalesced += 1
            self._pending = _LATEST
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            waiter.set()

    def __aiter__(self) -> AsyncIterator[Update]:
        return self

    async def __anext__(self) -> Update:
        while True:
            pending = self._pending
            if pending is not None:
                self._pending = None
                update = self._channel.latest() if isinstance(pending, _Latest) else pending
                if isinstance(pending, _Latest):
                    self._resync = False
                self._seen = update.revision
                return update
            if self._channel.closed:
                raise StopAsyncIteration
            waiter = self._waiter
            if waiter is None:
                waiter = self._waiter = anyio.Event()
            await waiter.wait()
