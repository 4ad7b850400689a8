"""The balancer as a discovery consumer: waiting, end modes, rejected updates, identity of survivors."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

import poise_py as poise
from tests.support.clocks import endpoints
from tests.support.discovery import Tap, live_ids

pytestmark = pytest.mark.anyio


def channel() -> tuple[anyio.abc.ObjectSendStream[poise.Update], anyio.abc.ObjectReceiveStream[poise.Update]]:
    send, receive = anyio.create_memory_object_stream[poise.Update](16)
    return send, receive


async def test_acquire_before_any_snapshot_raises_empty_pool_not_no_eligible() -> None:
    send, receive = channel()
    async with send, receive, poise.LoadBalancer(discovery=receive) as lb:
        with pytest.raises(poise.EmptyPool) as caught:
            lb.acquire()
        assert not isinstance(caught.value, poise.NoEligibleEndpoints)
        assert lb.discovery_revision is None


async def test_wait_ready_returns_once_the_first_nonempty_snapshot_is_applied() -> None:
    send, receive = channel()
    async with send, receive, poise.LoadBalancer(discovery=receive) as lb:
        async with anyio.create_task_group() as tg:

            async def publish_later() -> None:
                await send.send(poise.Snapshot(1, []))  # empty: not ready yet
                await anyio.wait_all_tasks_blocked()
                await send.send(poise.Snapshot(2, endpoints("a")))

            tg.start_soon(publish_later)
            await lb.wait_ready(timeout=60)
        assert lb.discovery_revision == 2
        async with lb.acquire() as permit:
            assert permit.endpoint.id == "a"


async def test_wait_ready_with_nothing_discovered_raises_ready_timeout() -> None:
    send, receive = channel()
    async with send, receive, poise.LoadBalancer(discovery=receive) as lb:
        with pytest.raises(poise.ReadyTimeout) as caught:
            await lb.wait_ready(timeout=0)
        assert isinstance(caught.value, TimeoutError)


async def test_wait_ready_outside_the_balancer_raises_not_running() -> None:
    lb = poise.LoadBalancer(discovery=poise.StaticDiscovery(endpoints("a")))
    with pytest.raises(poise.NotRunning):
        await lb.wait_ready(timeout=1)


async def test_wait_ready_rejects_a_negative_timeout() -> None:
    async with poise.LoadBalancer(discovery=poise.StaticDiscovery(endpoints("a"))) as lb:
        with pytest.raises(poise.ConfigError):
            await lb.wait_ready(timeout=-1)


async def test_fail_closed_empties_the_pool_when_the_stream_ends() -> None:
    send, receive = channel()
    lb = poise.LoadBalancer(discovery=receive, on_discovery_end=poise.DiscoveryEnd.FAIL_CLOSED)
    async with receive, lb:
        await send.send(poise.Snapshot(1, endpoints("a", "b")))
        await lb.wait_ready(timeout=60)
        permit = lb.acquire()
        await send.aclose()
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(poise.DiscoveryClosed):
            lb.acquire()
        with pytest.raises(poise.DiscoveryClosed):
            await lb.wait_ready(timeout=1)
        assert lb.snapshot().size == 0
        async with permit:  # issued before the end: it finishes cleanly
            pass


async def test_last_known_good_keeps_serving_when_the_stream_ends() -> None:
    send, receive = channel()
    lb = poise.LoadBalancer(discovery=receive, on_discovery_end=poise.DiscoveryEnd.LAST_KNOWN_GOOD)
    async with receive, lb:
        await send.send(poise.Snapshot(1, endpoints("a", "b")))
        await lb.wait_ready(timeout=60)
        await send.aclose()
        await anyio.wait_all_tasks_blocked()
        assert live_ids(lb) == {"a", "b"}
        async with lb.acquire():
            pass
        await lb.wait_ready(timeout=0)


async def test_last_known_good_with_nothing_delivered_makes_wait_ready_raise_empty_pool() -> None:
    send, receive = channel()
    async with receive, poise.LoadBalancer(discovery=receive) as lb:
        await send.aclose()
        with pytest.raises(poise.EmptyPool):
            await lb.wait_ready(timeout=60)


async def failing_stream(first: poise.Update) -> AsyncIterator[poise.Update]:
    yield first
    await anyio.lowlevel.checkpoint()
    raise ConnectionError("the control plane went away")


@pytest.mark.parametrize("mode", list(poise.DiscoveryEnd))
async def test_a_stream_error_ends_discovery_like_a_stream_end(
    mode: poise.DiscoveryEnd, caplog: pytest.LogCaptureFixture
) -> None:
    lb = poise.LoadBalancer(discovery=failing_stream(poise.Snapshot(1, endpoints("a"))), on_discovery_end=mode)
    async with lb:
        await anyio.wait_all_tasks_blocked()
        if mode is poise.DiscoveryEnd.FAIL_CLOSED:
            with pytest.raises(poise.DiscoveryClosed):
                lb.acquire()
        else:
            async with lb.acquire() as permit:
                assert permit.endpoint.id == "a"
    assert "the discovery stream failed" in caplog.text


async def test_a_rejected_update_is_counted_logged_and_the_stream_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    send, receive = channel()
    tap = Tap(receive)
    async with send, receive, poise.LoadBalancer(discovery=tap) as lb:
        await send.send(poise.Snapshot(5, endpoints("a", "b")))
        await send.send(poise.Snapshot(5, endpoints("x")))  # duplicate revision
        await send.send(poise.Snapshot(4, endpoints("x")))  # stale
        await send.send(poise.Delta(6, added=endpoints("a")))  # a is live: DuplicateIdentity
        await send.send(poise.Delta(6, updated=endpoints("zz")))  # not live: UnknownIdentity
        await send.send(poise.Snapshot(2**63, endpoints("x")))  # overflow
        await send.send(poise.Delta(6, added=endpoints("c"), removed=["a"]))
        await tap.wait(7)
        assert lb.discovery_rejected == 5
        assert lb.discovery_revision == 6
        assert live_ids(lb) == {"b", "c"}
    rejected = [r for r in caplog.records if "rejected" in r.getMessage()]
    assert len(rejected) == 5


async def test_a_delta_adding_a_live_id_and_a_new_one_applies_neither() -> None:
    send, receive = channel()
    tap = Tap(receive)
    async with send, receive, poise.LoadBalancer(discovery=tap) as lb:
        await send.send(poise.Snapshot(1, endpoints("a")))
        await send.send(poise.Delta(2, added=endpoints("new", "a")))
        await tap.wait(2)
        assert live_ids(lb) == {"a"}
        assert lb.discovery_revision == 1


async def test_survivors_keep_their_circuit_whatever_their_position() -> None:
    send, receive = channel()
    tap = Tap(receive)
    async with send, receive, poise.LoadBalancer(discovery=tap, policy=poise.RoundRobin()) as lb:
        await send.send(poise.Snapshot(1, endpoints("a", "b", "c")))
        await tap.wait(1)
        permit = lb.acquire(exclude=("b", "c"))
        assert permit.endpoint.id == "a"
        permit.fail(poise.Fault.FATAL)
        for _ in range(3):
            async with lb.acquire(exclude=("a", "c")):
                pass
        before = lb.snapshot()
        assert before["a"].state is poise.CircuitState.OPEN
        # Reversed order, a new member, and b's weight changed: a and b are the same endpoints.
        await send.send(
            poise.Snapshot(2, [poise.Endpoint("d"), *endpoints("c"), poise.Endpoint("b", weight=3), *endpoints("a")])
        )
        await tap.wait(2)
        after = lb.snapshot()
        assert after["a"].state is poise.CircuitState.OPEN
        assert after["a"].epoch == before["a"].epoch
        assert after["a"].counters == before["a"].counters
        assert after["b"].counters.successes == 3
        assert after["b"].endpoint.weight == 3
        assert after["d"].counters.successes == 0


async def test_removed_endpoint_permit_finishes_cleanly_and_a_readded_one_starts_fresh() -> None:
    send, receive = channel()
    tap = Tap(receive)
    async with send, receive, poise.LoadBalancer(discovery=tap) as lb:
        await send.send(poise.Snapshot(1, endpoints("a", "b")))
        await tap.wait(1)
        for _ in range(2):
            async with lb.acquire(exclude=("b",)):
                pass
        in_flight = lb.acquire(exclude=("b",))
        await send.send(poise.Delta(2, removed=["a"]))
        await tap.wait(2)
        assert live_ids(lb) == {"b"}
        in_flight.fail(poise.Fault.FATAL)  # late result of a removed endpoint: ignored
        assert lb.snapshot()["b"].state is poise.CircuitState.CLOSED
        await send.send(poise.Delta(3, added=endpoints("a")))
        await tap.wait(3)
        again = lb.snapshot()["a"]
        assert again.state is poise.CircuitState.CLOSED
        assert again.epoch == 0
        assert again.inflight == 0
        assert again.counters.successes == 0
        assert sum(again.counters.faults.values()) == 0


async def test_a_delta_that_removes_and_readds_an_id_gives_it_fresh_state() -> None:
    send, receive = channel()
    tap = Tap(receive)
    async with send, receive, poise.LoadBalancer(discovery=tap) as lb:
        await send.send(poise.Snapshot(1, endpoints("a", "b")))
        await tap.wait(1)
        lb.acquire(exclude=("b",)).fail(poise.Fault.FATAL)
        assert lb.snapshot()["a"].state is poise.CircuitState.OPEN
        await send.send(poise.Delta(2, removed=["a"], added=endpoints("a")))
        await tap.wait(2)
        assert lb.snapshot()["a"].state is poise.CircuitState.CLOSED
