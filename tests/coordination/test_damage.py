"""Records that look valid but are not: every field must be in range, or the endpoint decides locally.

A shared record is usable only if its state is known, its version and counts are integers in
range, and its deadlines lie within the storage's clock plus the largest wait the fleet
writes (plus slack). Anything else is damaged: one event naming the endpoint and the key,
that endpoint decided locally, and the next write repairs it. A storage clock that moves
back never holds a circuit open past its own wait. Against the embedded storage, Redis
through coredis and redis-py, and a Redis Cluster.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import poise_py as poise
from poise_py import CircuitState
from poise_py._coordination._protocol import SharedState
from tests.support.coordination import (
    COREDIS_LEAK,
    Fleet,
    MemoryFleet,
    RedisFleet,
    fail,
    open_wait,
    rewind,
    state_of,
    stats,
)
from tests.support.events import drain
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.real_clock]

_O = CircuitState.OPEN


def storage_now(fleet: Fleet) -> float:
    """The storage's clock: the fleet's fake clock in memory, ``TIME`` on the Redis server."""
    if isinstance(fleet, MemoryFleet):
        return fleet.base._clock()
    server: RedisServer = fleet.server  # type: ignore[attr-defined]
    reply = server.command("TIME")
    assert isinstance(reply, list)
    return int(reply[0]) + int(reply[1]) / 1e6


async def write_by_hand(fleet: Fleet, key: str, fields: dict[str, object]) -> None:
    """Write a record's fields by hand, as an operator or anyone with access to the storage could."""
    if isinstance(fleet, MemoryFleet):
        fleet.base._records[key] = SharedState(**fields)  # type: ignore[arg-type]
        return
    server: RedisServer = fleet.server  # type: ignore[attr-defined]
    namespace: str = fleet.namespace  # type: ignore[attr-defined]
    args: list[str] = []
    for name, value in fields.items():
        args += [name, value.value if isinstance(value, CircuitState) else repr(value)]
    server.command("HSET", f"{{{namespace}}}:circuit:{key}", *args)


RECORDS: dict[str, Callable[[float], dict[str, object]]] = {
    "open until 1e18 with no trip time": lambda now: {
        "state": _O, "version": 4, "reopen_at": 1e18, "protocol_version": 3,
    },
    "open until 1e18": lambda now: {
        "state": _O, "version": 4, "opened_at": now, "reopen_at": 1e18, "protocol_version": 3,
    },
    "open until a time no float holds": lambda now: {
        "state": _O, "version": 4, "opened_at": now, "reopen_at": 10**400, "protocol_version": 3,
    },
    "a fractional version": lambda now: {
        "state": _O, "version": 2.5, "opened_at": 0.5, "reopen_at": 1.0, "protocol_version": 3,
    },
    "more leases left than permitted": lambda now: {
        "state": CircuitState.HALF_OPEN, "version": 3, "opened_at": now - 40, "reopen_at": now + 20,
        "probes_permitted": 1, "probes_remaining": 10**6, "protocol_version": 3,
    },
}  # fmt: skip


@pytest.mark.parametrize("how", list(RECORDS))
async def test_a_valid_looking_record_out_of_range_is_reported_once_decided_locally_and_repaired_by_the_next_trip(
    fleet: Fleet, how: str
) -> None:
    async with fleet:
        lbs = await fleet.balancers(2, "a", "b", max_open_wait=3.0)
        streams = [lb.events() for lb in lbs]
        await fleet.sync(*lbs)
        await write_by_hand(fleet, "a", RECORDS[how](storage_now(fleet)))
        await fleet.advance(31.0)  # a write by hand is in no change log: the next full read finds it
        await fleet.sync(*lbs)
        await fleet.advance(30.0)
        await fleet.sync(*lbs)
        for lb, stream in zip(lbs, streams, strict=True):
            assert state_of(lb, "a") is CircuitState.CLOSED, "the endpoint is not wedged open"
            for _ in range(4):  # it serves calls, decided locally
                async with lb.acquire(exclude=("b",)) as permit:
                    assert permit.endpoint.id == "a"
            s = stats(lb)
            assert s.connected
            assert (s.poisoned, s.fallbacks, s.failures) == (1, 0, 0)
            fallbacks = [e for e in await drain(stream) if isinstance(e, poise.CoordinationFallback)]
            assert len(fallbacks) == 1, "one event per balancer, not one per poll"
            assert fallbacks[0].endpoint_id == "a"
            assert (":circuit:a" if fleet.kind != "memory" else "key a") in str(fallbacks[0].error)
        # the next trip rewrites the record, and the whole fleet follows it again
        await fail(lbs[0], exclude=("b",))
        await fleet.sync(*lbs)
        record = await fleet.record("a")
        assert record.problem is None
        assert record.state is _O
        assert record.version == 1
        assert open_wait(record) <= 3.0 + 1e-6
        assert all(state_of(lb, "a") is _O for lb in lbs)
        await fleet.advance(3.0)
        await fleet.sync(*lbs)
        probe = await probe_of(fleet, lbs[1])
        probe.succeed()
        await fleet.sync(*lbs)
        assert all(state_of(lb, "a") is CircuitState.CLOSED for lb in lbs)
        assert [stats(lb).poisoned for lb in lbs] == [1, 1]


async def probe_of(fleet: Fleet, lb: poise.LoadBalancer) -> poise.Permit:
    """A probe permit for "a" from ``lb``: its refused acquire is demand, which the next sync leases for."""
    try:
        return lb.acquire(exclude=("b",))
    except poise.NoEligibleEndpoints:
        await fleet.sync(lb)
    permit = lb.acquire(exclude=("b",))
    assert permit.probe
    return permit


async def tripped_on_two(fleet: Fleet) -> tuple[list[poise.LoadBalancer], list[poise.EventStream]]:
    """Two balancers over a and b, each with an event stream, after the first trips a fleet-wide."""
    lbs = await fleet.balancers(2, "a", "b")
    streams = [lb.events() for lb in lbs]
    await fleet.sync(*lbs)
    await fail(lbs[0], exclude=("b",))
    await fleet.sync(*lbs)
    return lbs, streams


def stepping(fleet: Fleet) -> Callable[[float], None]:
    """Let the test step the storage's clock back; call before entering the fleet."""
    if isinstance(fleet, MemoryFleet):
        offset = [0.0]
        clock = fleet.clock
        fleet.base = poise.InMemoryStorage(clock=lambda: clock() - offset[0])

        def step_memory(seconds: float) -> None:
            offset[0] += seconds

        return step_memory
    assert isinstance(fleet, RedisFleet) or fleet.kind == "cluster"

    def step_redis(seconds: float) -> None:
        # Redis's TIME cannot be stepped: move every stored time forward instead, which is
        # what a clock moved back looks like to the scripts.
        rewind(fleet.server, fleet.namespace, -seconds)  # type: ignore[attr-defined]

    return step_redis


async def test_a_storage_clock_that_steps_back_past_the_trip_holds_no_circuit_open_and_the_next_trip_repairs(
    fleet: Fleet,
) -> None:
    step_back = stepping(fleet)
    async with fleet:
        lbs, streams = await tripped_on_two(fleet)
        assert all(state_of(lb, "a") is _O for lb in lbs)  # a 30 s round, fleet-wide
        await fleet.advance(10.0)
        step_back(3600.0)  # a failover to a server an hour behind, or NTP
        await fleet.advance(20.0)  # the round's own 30 s are over: each balancer probes on its own
        await fleet.sync(*lbs)
        for stream in streams:
            (event,) = [e for e in await drain(stream) if isinstance(e, poise.CoordinationFallback)]
            assert event.endpoint_id == "a"
            assert "clock moved back" in str(event.error)
        probes = [lb.acquire(exclude=("b",)) for lb in lbs]
        assert all(p.probe for p in probes), "no circuit is held open for the size of the step"
        probes[0].fail(poise.Fault.SUSPECT)  # the next trip replaces the record
        probes[1].cancel()
        await fleet.sync(*lbs)
        record = await fleet.record("a")
        assert record.problem is None
        assert (record.state, record.version) == (_O, 1)
        assert all(state_of(lb, "a") is _O for lb in lbs)
        assert [stats(lb).poisoned for lb in lbs] == [1, 1]
        assert [stats(lb).failures for lb in lbs] == [0, 0]


async def test_a_storage_clock_that_steps_back_within_a_round_holds_it_no_longer_than_its_own_wait() -> None:
    fleet = MemoryFleet()
    step_back = stepping(fleet)
    async with fleet:
        lbs, streams = await tripped_on_two(fleet)
        await fleet.advance(25.0)
        await fleet.sync(*lbs)
        step_back(20.0)  # less than the round has run: the trip time still lies before the clock
        await fleet.advance(5.0)  # the round's own 30 s are over
        await fleet.sync(*lbs)
        await fleet.sync(*lbs)
        probes = [lb.acquire(exclude=("b",)) for lb in lbs]
        assert all(p.probe for p in probes), "not held 20 s longer than the round's own wait"
        for stream in streams:
            (event,) = [e for e in await drain(stream) if isinstance(e, poise.CoordinationFallback)]
            assert "clock moved back" in str(event.error)
        probes[0].fail(poise.Fault.SUSPECT)  # the next trip replaces the record the clock broke
        probes[1].cancel()
        await fleet.sync(*lbs)
        record = await fleet.record("a")
        assert (record.state, record.version) == (_O, 1)
        assert open_wait(record) == 30.0
        assert all(state_of(lb, "a") is _O for lb in lbs)


@pytest.mark.filterwarnings(COREDIS_LEAK)
async def test_a_storage_that_cannot_be_reached_at_start_up_counts_one_fallback_with_its_event(
    faulty_fleet: Fleet,
) -> None:
    fleet = faulty_fleet
    async with fleet:
        await fleet.kill()
        lb = await fleet.build(timeout=1.0)
        events = lb.events()
        async with lb:
            await fleet.sync(lb)
            await fleet.sync(lb)
            fallbacks = [e for e in await drain(events) if isinstance(e, poise.CoordinationFallback)]
            assert len(fallbacks) == 1
            s = stats(lb)
            assert not s.connected
            assert s.fallbacks == 1, "the statistics count the fallback the event reports"
            assert lb.statistics().pool.coordination_fallbacks == 1
            await fleet.restart()
            await fleet.sync(lb)
            assert stats(lb).connected
            assert stats(lb).resyncs == 1


@pytest.mark.backends("asyncio")
@pytest.mark.parametrize("client", ["coredis", "redis-py"])
async def test_a_wrong_password_is_reported_as_an_authentication_error_not_a_timeout(
    private_redis: RedisServer, client: str
) -> None:
    private_redis.command("CONFIG", "SET", "requirepass", "right")
    changes: list[poise.CoordinationChange] = []
    if client == "coredis":
        import coredis

        redis_client: object = coredis.Redis(host="127.0.0.1", port=private_redis.port, password="wrong")  # noqa: S106 - the wrong password is the test
    else:
        import redis.asyncio

        redis_client = redis.asyncio.Redis(host="127.0.0.1", port=private_redis.port, password="wrong")  # noqa: S106 - the wrong password is the test
    try:
        storage = poise.RedisStorage(redis_client)
        lb = poise.LoadBalancer(
            poise.StaticDiscovery([poise.Endpoint("a")]),
            coordination=poise.Coordination(storage, timeout=5.0, sync_interval=3600.0, on_change=changes.append),
        )
        events = lb.events()
        if client == "coredis":
            async with redis_client, lb:  # type: ignore[attr-defined]
                s = lb.coordination_statistics()
        else:
            async with lb:
                s = lb.coordination_statistics()
        assert s is not None
        assert (s.connected, s.fallbacks) == (False, 1)
        (event,) = [e for e in await drain(events) if isinstance(e, poise.CoordinationFallback)]
        text = f"{event.error} {changes[0].reason}"
        assert "Authentication" in text, text
        assert "took longer" not in text
    finally:
        if client == "redis-py":
            await redis_client.aclose()  # type: ignore[attr-defined]
