"""Protocol 3's incremental polls: O(1) storage work when nothing changed, O(k) after k changes.

Counted by the storage itself: ``InMemoryStorage.operations`` (reads count once per record),
and for Redis the server's own ``INFO commandstats`` and keyspace lookups.
"""

from __future__ import annotations

import pytest

import poise_py as poise
from poise_py import CircuitState
from tests.support.coordination import Fleet, MemoryFleet, RedisFleet, fail, state_of
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.real_clock]

IDS = [f"e{i}" for i in range(1000)]


async def poll(lb: poise.LoadBalancer) -> None:
    coordinator = lb._coordinator
    assert coordinator is not None
    await coordinator.sync(poll=True)


async def test_an_idle_poll_reads_no_record_and_one_change_reads_one_in_memory() -> None:
    fleet = MemoryFleet()
    async with fleet:
        reader, writer = await fleet.balancers(2, *IDS)
        await fleet.sync(reader, writer)
        ops = fleet.base.operations
        before = ops.copy()
        await poll(reader)
        assert ops["read"] - before["read"] == 0
        assert ops.total() - before.total() == 1  # one `changes` call
        await fail(writer, exclude=tuple(i for i in IDS if i != "e7"))
        await poll(writer)  # publishes the trip (and reads it back: its own change)
        before = ops.copy()
        await poll(reader)
        assert ops["read"] - before["read"] == 1
        assert state_of(reader, "e7") is CircuitState.OPEN


def server_work(server: RedisServer) -> tuple[int, int]:
    """(script calls, keys looked up) the server has served so far."""
    calls = sum(server.command_count(c) for c in ("evalsha", "eval"))
    info = server.command("INFO", "stats")
    assert isinstance(info, bytes)
    stats = dict(line.split(":", 1) for line in info.decode().splitlines() if ":" in line)
    return calls, int(stats["keyspace_hits"]) + int(stats["keyspace_misses"])


async def test_an_idle_poll_is_one_command_and_one_key_on_redis_whatever_the_pool(redis_server: RedisServer) -> None:
    fleet = RedisFleet(redis_server)
    async with fleet:
        reader, writer = await fleet.balancers(2, *IDS)
        await fleet.sync(reader, writer)
        calls, keys = server_work(redis_server)
        await poll(reader)
        after = server_work(redis_server)
        assert after[0] - calls == 1
        assert after[1] - keys == 1  # the sequence counter, and nothing per endpoint
        await fail(writer, exclude=tuple(i for i in IDS if i != "e7"))
        await poll(writer)
        calls, keys = server_work(redis_server)
        await poll(reader)
        after = server_work(redis_server)
        assert after[0] - calls == 1
        assert after[1] - keys == 3  # the counter, the log, the one record
        assert state_of(reader, "e7") is CircuitState.OPEN


async def test_a_protocol_2_writers_trip_reaches_a_protocol_3_reader_at_its_next_full_read(fleet: Fleet) -> None:
    async with fleet:
        new = await fleet.balancer("a", "b")
        old = await fleet.balancer("a", "b", seed=1, protocol_version=2)
        await fleet.sync(new, old)
        await fail(old, exclude=("b",))
        await fleet.sync(old)
        await fleet.sync(new)
        assert state_of(new, "a") is CircuitState.CLOSED  # in no change log: not seen yet
        await fleet.advance(20.0)
        await fleet.sync(new)
        assert state_of(new, "a") is CircuitState.CLOSED
        await fleet.advance(11.0)  # past full_poll_interval (30 s) since the last full read
        await fleet.sync(new)
        # seen: the fleet's round (its 30 s wait is over by now, so it may be half-open already)
        assert state_of(new, "a") in (CircuitState.OPEN, CircuitState.HALF_OPEN)
        await fail(new, exclude=("a",))  # protocol 3 writes are seen by protocol 2 at once
        await fleet.sync(new)
        await fleet.sync(old)
        assert state_of(old, "b") is CircuitState.OPEN
