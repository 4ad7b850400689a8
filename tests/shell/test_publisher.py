"""DiscoveryPublisher: one publisher, many subscribers, coalescing, and the end of the stream (Trio)."""

from __future__ import annotations

import gc
import weakref

import pytest
import trio
import trio.testing

import poise_py as poise
from tests.support.clocks import endpoints

pytestmark = [pytest.mark.anyio, pytest.mark.backends("trio")]


async def collect(sub: poise.Subscription, into: list[poise.Update]) -> None:
    into.extend([update async for update in sub])


async def test_every_subscriber_that_keeps_up_sees_each_update_as_published() -> None:
    pub = poise.DiscoveryPublisher()
    subs = [pub.subscribe() for _ in range(3)]
    seen: list[list[poise.Update]] = [[] for _ in subs]
    first = poise.Snapshot(1, endpoints("a", "b"))
    second = poise.Delta(2, added=endpoints("c"), removed=["a"])
    third = poise.Delta(3, updated=[poise.Endpoint("b", weight=5)])
    async with trio.open_nursery() as nursery:
        for sub, into in zip(subs, seen, strict=True):
            nursery.start_soon(collect, sub, into)
        for update in (first, second, third):
            await trio.testing.wait_all_tasks_blocked()
            pub.publish(update)
        await trio.testing.wait_all_tasks_blocked()
        pub.close()
    for into in seen:
        assert into == [first, second, third]
        assert into[1] is second  # a Delta is delivered as a Delta: O(changes) downstream
    assert all(sub.coalesced == 0 for sub in subs)


async def test_a_slow_subscriber_receives_the_latest_snapshot_not_every_update() -> None:
    pub = poise.DiscoveryPublisher()
    slow = pub.subscribe()
    pub.publish(poise.Snapshot(1, endpoints("a", "b")))
    pub.publish(poise.Delta(2, added=endpoints("c")))
    pub.publish(poise.Delta(3, removed=["a"], updated=[poise.Endpoint("b", weight=2)]))
    update = await slow.__anext__()
    assert update == poise.Snapshot(3, [poise.Endpoint("b", weight=2), poise.Endpoint("c")])
    assert slow.coalesced == 2
    pub.close()
    with pytest.raises(StopAsyncIteration):
        await slow.__anext__()


async def test_a_fast_and_a_slow_subscriber_each_end_on_the_final_pool() -> None:
    pub = poise.DiscoveryPublisher()
    fast, slow = pub.subscribe(), pub.subscribe()
    fast_seen: list[poise.Update] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(collect, fast, fast_seen)
        for revision in range(1, 6):
            await trio.testing.wait_all_tasks_blocked()
            pub.publish(poise.Snapshot(revision, endpoints(*(f"e{i}" for i in range(revision)))))
        await trio.testing.wait_all_tasks_blocked()
        pub.close()
    slow_seen = [u async for u in slow]
    assert [u.revision for u in fast_seen] == [1, 2, 3, 4, 5]
    assert [u.revision for u in slow_seen] == [5]
    assert slow_seen[0] == fast_seen[-1]


async def test_close_wakes_every_waiting_subscriber_and_ends_its_stream() -> None:
    pub = poise.DiscoveryPublisher()
    pub.publish(poise.Snapshot(1, endpoints("a")))
    seen: list[list[poise.Update]] = [[], [], []]
    async with trio.open_nursery() as nursery:
        for into in seen:
            nursery.start_soon(collect, pub.subscribe(), into)
        await trio.testing.wait_all_tasks_blocked()  # all three consumed revision 1 and wait
        pub.close()
    # Leaving the nursery proves every waiter woke and its stream ended.
    assert seen == [[poise.Snapshot(1, endpoints("a"))]] * 3


async def test_close_delivers_the_final_snapshot_before_the_end() -> None:
    pub = poise.DiscoveryPublisher()
    sub = pub.subscribe()
    pub.publish(poise.Snapshot(1, endpoints("a")))
    pub.publish(poise.Delta(2, added=endpoints("b")))
    pub.close()
    assert [u async for u in sub] == [poise.Snapshot(2, endpoints("a", "b"))]
    assert [u async for u in pub.subscribe()] == [poise.Snapshot(2, endpoints("a", "b"))]


async def test_dropping_the_publisher_wakes_and_ends_every_subscriber() -> None:
    pub = poise.DiscoveryPublisher()
    subs = [pub.subscribe(), pub.subscribe()]
    pub.publish(poise.Snapshot(1, endpoints("a")))
    seen: list[list[poise.Update]] = [[], []]
    async with trio.open_nursery() as nursery:
        for sub, into in zip(subs, seen, strict=True):
            nursery.start_soon(collect, sub, into)
        await trio.testing.wait_all_tasks_blocked()
        del pub
        gc.collect()
    assert seen == [[poise.Snapshot(1, endpoints("a"))]] * 2


async def test_a_late_subscriber_starts_from_the_latest_snapshot() -> None:
    pub = poise.DiscoveryPublisher()
    pub.publish(poise.Snapshot(1, endpoints("a")))
    pub.publish(poise.Delta(2, added=endpoints("b")))
    late = pub.subscribe()
    assert await late.__anext__() == poise.Snapshot(2, endpoints("a", "b"))
    pub.publish(poise.Delta(3, removed=["a"]))
    assert await late.__anext__() == poise.Delta(3, removed=["a"])


@pytest.mark.parametrize(
    ("update", "error"),
    [
        (poise.Snapshot(1, endpoints("x")), poise.DuplicateRevision),
        (poise.Snapshot(0, endpoints("x")), poise.StaleRevision),
        (poise.Snapshot(2**63, endpoints("x")), poise.RevisionOverflow),
        (poise.Snapshot(2, endpoints("x", "x")), poise.DuplicateIdentity),
        (poise.Delta(2, added=endpoints("a")), poise.DuplicateIdentity),
        (poise.Delta(2, updated=endpoints("zz")), poise.UnknownIdentity),
        (poise.Delta(2, removed=["a", "a"]), poise.DuplicateIdentity),
        (poise.Delta(2, removed=["zz", "zz"]), poise.DuplicateIdentity),
    ],
)
async def test_publish_rejects_an_incoherent_update_and_no_subscriber_sees_it(
    update: poise.Update, error: type[poise.DiscoveryError]
) -> None:
    pub = poise.DiscoveryPublisher()
    sub = pub.subscribe()
    pub.publish(poise.Snapshot(1, endpoints("a")))
    with pytest.raises(error):
        pub.publish(update)
    assert pub.revision == 1
    assert pub.endpoints == tuple(endpoints("a"))
    pub.close()
    assert [u async for u in sub] == [poise.Snapshot(1, endpoints("a"))]


async def test_publish_after_close_raises_publisher_closed() -> None:
    pub = poise.DiscoveryPublisher()
    pub.close()
    pub.close()  # idempotent
    with pytest.raises(poise.PublisherClosed):
        pub.publish(poise.Snapshot(1, endpoints("a")))


async def test_resync_turns_the_next_delta_into_a_full_snapshot() -> None:
    pub = poise.DiscoveryPublisher()
    sub = pub.subscribe()
    pub.publish(poise.Snapshot(1, endpoints("a")))
    assert await sub.__anext__() == poise.Snapshot(1, endpoints("a"))
    sub.resync()
    pub.publish(poise.Delta(2, added=endpoints("b")))
    assert await sub.__anext__() == poise.Snapshot(2, endpoints("a", "b"))
    pub.publish(poise.Delta(3, removed=["a"]))
    assert await sub.__anext__() == poise.Delta(3, removed=["a"])


async def test_a_balancer_follows_a_publisher_and_fails_closed_when_it_closes() -> None:
    pub = poise.DiscoveryPublisher()
    lb = poise.LoadBalancer(discovery=pub.subscribe(), on_discovery_end=poise.DiscoveryEnd.FAIL_CLOSED)
    async with lb:
        pub.publish(poise.Snapshot(revision=1, endpoints=endpoints("a", "b")))
        await lb.wait_ready(timeout=5)
        pub.publish(poise.Delta(revision=2, removed=["a"]))
        await trio.testing.wait_all_tasks_blocked()
        assert [e.id for e in lb.snapshot().endpoints] == ["b"]
        async with lb.acquire() as permit:
            assert permit.endpoint.id == "b"
        pub.close()
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(poise.DiscoveryClosed):
            lb.acquire()


def test_an_endpoint_removed_by_a_delta_is_not_kept_alive_by_the_publisher() -> None:
    pub = poise.DiscoveryPublisher()
    pub.publish(poise.Snapshot(1, [poise.Endpoint("a"), poise.Endpoint("b")]))
    gone = weakref.ref(next(e for e in pub.endpoints if e.id == "a"))
    pub.publish(poise.Delta(2, removed=["a"]))
    gc.collect()
    assert gone() is None
    assert [e.id for e in pub.endpoints] == ["b"]
