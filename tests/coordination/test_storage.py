"""The storage protocol itself, against InMemoryStorage and against Redis's Lua scripts."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import anyio
import coredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import poise_py as poise
from poise_py import CircuitState
from poise_py._coordination._lua import PRELUDE
from poise_py._coordination._protocol import FAILED_ROUNDS_CAP
from tests.support.coordination import Fleet, RedisFleet, open_wait
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.real_clock]

WAIT = poise.OpenWait(escalation=poise.Escalation(base=30.0, maximum=300.0, jitter=0.0))


async def open_round(storage: poise.Storage, fleet: Fleet, *, permitted: int = 1) -> poise.SharedState:
    """Trip "a" from CLOSED, let the wait pass, begin a half-open round."""
    record = (await storage.read(["a"]))[0]
    tripped = await storage.trip_open("a", expected_version=record.version, wait=WAIT)
    assert tripped.applied
    await fleet.advance(open_wait(tripped.state))
    begun = await storage.begin_half_open_if_elapsed(
        "a", expected_version=tripped.state.version, permitted=permitted, lease=60.0
    )
    assert begun.applied
    return begun.state


async def test_an_unknown_endpoint_reads_closed_at_version_zero(fleet: Fleet) -> None:
    async with fleet:
        storage = await fleet.storage()
        (record,) = await storage.read(["never-seen"])
        assert record.state is CircuitState.CLOSED
        assert (record.version, record.failed_rounds, record.protocol_version) == (0, 0, 0)
        assert await storage.read([]) == []


async def test_every_operation_is_fenced_by_the_expected_version(fleet: Fleet) -> None:
    async with fleet:
        s = await fleet.storage()
        assert not (await s.trip_open("a", expected_version=7, wait=WAIT)).applied
        round_ = await open_round(s, fleet)
        stale = round_.version - 1
        for reply in [
            await s.trip_open("a", expected_version=stale, wait=WAIT),
            await s.begin_half_open_if_elapsed("a", expected_version=stale, permitted=1, lease=60.0),
            await s.lease_probe("a", expected_version=stale),
            await s.report_probe("a", expected_version=stale, report=poise.ProbeReport.SUCCEEDED),
            await s.close("a", expected_version=stale),
        ]:
            assert not reply.applied
            assert reply.state.state is CircuitState.HALF_OPEN
            assert reply.state.version == round_.version, "a refused call changed the record"
        assert (await s.read(["a"]))[0].probes_remaining == 1


async def test_an_open_record_half_opens_only_when_the_storage_clock_reaches_reopen_at(fleet: Fleet) -> None:
    async with fleet:
        s = await fleet.storage()
        tripped = (await s.trip_open("a", expected_version=0, wait=WAIT)).state
        await fleet.advance(29.0)
        early = await s.begin_half_open_if_elapsed("a", expected_version=tripped.version, permitted=1, lease=60.0)
        assert not early.applied
        assert 0.0 < early.state.remaining() <= 1.0
        await fleet.advance(1.0)
        assert (
            await s.begin_half_open_if_elapsed("a", expected_version=tripped.version, permitted=1, lease=60.0)
        ).applied


async def test_trip_from_half_open_counts_a_failed_round_trip_from_closed_does_not_close_resets(
    fleet: Fleet,
) -> None:
    async with fleet:
        s = await fleet.storage()
        round_ = await open_round(s, fleet)
        assert round_.failed_rounds == 0
        for n in (1, 2, 3):
            tripped = await s.trip_open("a", expected_version=round_.version, wait=WAIT)
            assert tripped.state.failed_rounds == n
            assert open_wait(tripped.state) == pytest.approx(30.0 * 2**n, abs=1e-3)
            await fleet.advance(open_wait(tripped.state))
            round_ = (
                await s.begin_half_open_if_elapsed("a", expected_version=tripped.state.version, permitted=1, lease=60)
            ).state
            assert round_.failed_rounds == n
        closed = await s.close("a", expected_version=round_.version)
        assert closed.applied
        assert closed.state.state is CircuitState.CLOSED
        assert closed.state.failed_rounds == 0
        again = await s.trip_open("a", expected_version=closed.state.version, wait=WAIT)
        assert again.state.failed_rounds == 0
        assert open_wait(again.state) == pytest.approx(30.0, abs=1e-3)
        assert not (await s.trip_open("a", expected_version=again.state.version, wait=WAIT)).applied  # already open


async def test_concurrent_leases_never_exceed_the_round_budget(fleet: Fleet) -> None:
    async with fleet:
        storages = [await fleet.storage() for _ in range(4)]
        round_ = await open_round(storages[0], fleet, permitted=3)
        granted: list[bool] = []

        async def lease(s: poise.Storage) -> None:
            for _ in range(5):
                reply = await s.lease_probe("a", expected_version=round_.version)
                granted.append(reply.applied)

        async with anyio.create_task_group() as tg:
            for s in storages:
                tg.start_soon(lease, s)
        assert granted.count(True) == 3
        record = await fleet.record()
        assert record.probes_remaining == 0
        released = await storages[1].report_probe(
            "a", expected_version=round_.version, report=poise.ProbeReport.RELEASED
        )
        assert released.state.probes_remaining == 1
        done = await storages[2].report_probe("a", expected_version=round_.version, report=poise.ProbeReport.SUCCEEDED)
        assert done.state.probes_completed == 1


async def test_a_round_past_its_lease_gives_no_lease_and_may_begin_again(fleet: Fleet) -> None:
    async with fleet:
        s = await fleet.storage()
        round_ = await open_round(s, fleet)
        await fleet.advance(60.0)
        assert not (await s.lease_probe("a", expected_version=round_.version)).applied
        fresh = await s.begin_half_open_if_elapsed("a", expected_version=round_.version, permitted=2, lease=60.0)
        assert fresh.applied
        assert (fresh.state.version, fresh.state.probes_remaining) == (round_.version + 1, 2)


async def test_protocol_1_neither_counts_nor_resets_and_protocol_2_distrusts_its_count(fleet: Fleet) -> None:
    async with fleet:
        new, old = await fleet.storage(protocol_version=2), await fleet.storage(protocol_version=1)
        round_ = await open_round(new, fleet)
        tripped = (await new.trip_open("a", expected_version=round_.version, wait=WAIT)).state
        assert (tripped.failed_rounds, tripped.protocol_version) == (1, 2)
        assert (await old.read(["a"]))[0].failed_rounds == 0  # protocol 1 does not report it
        await fleet.advance(open_wait(tripped))
        begun = (
            await old.begin_half_open_if_elapsed("a", expected_version=tripped.version, permitted=1, lease=60)
        ).state
        assert begun.protocol_version == 1
        assert (await new.read(["a"]))[0].failed_rounds == 0  # last written by protocol 1: no count
        by_old = (await old.trip_open("a", expected_version=begun.version, wait=WAIT)).state
        assert open_wait(by_old) == pytest.approx(30.0, abs=1e-3)  # protocol 1: the base wait
        await fleet.advance(30.0)
        begun = (
            await new.begin_half_open_if_elapsed("a", expected_version=by_old.version, permitted=1, lease=60)
        ).state
        by_new = (await new.trip_open("a", expected_version=begun.version, wait=WAIT)).state
        assert (by_new.failed_rounds, open_wait(by_new)) == (1, pytest.approx(60.0, abs=1e-3))


async def test_a_retry_after_floor_holds_after_jitter(fleet: Fleet) -> None:
    async with fleet:
        s = await fleet.storage()
        wait = poise.OpenWait(escalation=poise.Escalation(base=10.0, maximum=20.0, jitter=0.5), unit=0.0, minimum=15.0)
        assert open_wait((await s.trip_open("a", expected_version=0, wait=wait)).state) == pytest.approx(15.0, abs=1e-3)


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_storages_refuse_a_protocol_they_do_not_speak(kind: str, redis_server: RedisServer) -> None:
    with pytest.raises(poise.ConfigError) as info:
        if kind == "memory":
            poise.InMemoryStorage(protocol_version=4)
        else:
            poise.RedisStorage(coredis.Redis(port=redis_server.port), protocol_version=0)
    assert info.value.knob.endswith("protocol_version")


def test_redis_storage_validates_its_knobs() -> None:
    client = coredis.Redis()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"namespace": ""}, "RedisStorage.namespace"),
        ({"namespace": "a{b}"}, "RedisStorage.namespace"),
        ({"retention": 0}, "RedisStorage.retention"),
        ({"retention": 1e14}, "RedisStorage.retention"),  # an expiry Redis cannot add to its clock
    ]
    for kwargs, knob in cases:
        with pytest.raises(poise.ConfigError) as info:
            poise.RedisStorage(client, **kwargs)
        assert info.value.knob == knob
    with pytest.raises(poise.ConfigError):
        poise.RedisStorage(object())


def test_keys_share_the_namespace_hash_tag_so_a_cluster_keeps_them_in_one_slot() -> None:
    storage = poise.RedisStorage(coredis.Redis(), namespace="payments")
    keys = [storage.key("a"), storage.key("b{x}"), storage.key("10.0.0.1:443")]
    assert all(k.startswith("{payments}:circuit:") for k in keys)
    assert {k[k.index("{") + 1 : k.index("}")] for k in keys} == {"payments"}


def test_importing_poise_py_does_not_import_coredis() -> None:
    code = "import sys, poise_py; assert 'coredis' not in sys.modules, 'coredis imported'"
    subprocess.run([sys.executable, "-c", code], check=True)  # noqa: S603
    code = "import sys, poise_py; assert 'redis' not in sys.modules, 'redis-py imported'"
    subprocess.run([sys.executable, "-c", code], check=True)  # noqa: S603


def test_a_redis_py_client_runs_on_asyncio_and_says_plainly_that_trio_is_not_supported(
    redis_server: RedisServer,
) -> None:
    import redis
    import redis.asyncio

    client = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
    storage = poise.RedisStorage(client, namespace="redis-py-backends")  # outside any event loop: fine

    async def on_trio() -> None:
        with pytest.raises(poise.ConfigError) as info:
            poise.RedisStorage(client)
        assert info.value.knob == "RedisStorage.client"
        assert "asyncio only" in str(info.value)
        with pytest.raises(poise.CoordinationError, match="asyncio only"):
            await storage.read(["a"])

    async def on_asyncio() -> None:
        assert (await storage.read(["a"]))[0].version == 0
        await client.aclose()

    anyio.run(on_trio, backend="trio")
    anyio.run(on_asyncio, backend="asyncio")
    with pytest.raises(poise.ConfigError) as info:
        poise.RedisStorage(redis.Redis())  # the synchronous client
    assert "redis.asyncio" in str(info.value)


# -- the Lua arithmetic is the core's, clamp included ---------------------------------


async def lua_window(server: RedisServer, n: int, esc: poise.Escalation) -> float:
    """Evaluate the scripts' ``window`` on the server."""
    script = (
        PRELUDE
        + "return fmt(window(tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), "
        + ("ARGV[6] == '1', tonumber(ARGV[7])))")
    )
    args = ["2", "60", str(n), repr(float(esc.base)), repr(float(esc.maximum))]
    args += ["1" if esc.backoff is poise.Backoff.LINEAR else "0", repr(float(esc.multiplier))]
    reply = server.command("EVAL", script, "0", *args)
    assert isinstance(reply, bytes)
    return float(reply)


escalations = st.builds(
    lambda base, factor, backoff, multiplier: poise.Escalation(
        base=base, maximum=base * factor, backoff=backoff, multiplier=multiplier, jitter=0.0
    ),
    base=st.floats(1e-3, 1e6),
    factor=st.floats(1.0, 1e6),
    backoff=st.sampled_from(poise.Backoff),
    multiplier=st.floats(1.0 + 1e-12, 1e3),
)


@pytest.mark.backends("trio")
@settings(max_examples=300, deadline=None)
@given(esc=escalations, n=st.one_of(st.integers(0, 80), st.integers(0, FAILED_ROUNDS_CAP)))
async def test_the_lua_window_is_the_cores_window_bit_for_bit(
    redis_server: RedisServer, esc: poise.Escalation, n: int
) -> None:
    got = await lua_window(redis_server, n, esc)
    assert got == esc.window(n)
    assert esc.base <= got <= esc.maximum
    assert math.isfinite(got)


@pytest.mark.backends("trio")
async def test_no_count_and_no_configuration_wedges_a_shared_circuit_open(redis_server: RedisServer) -> None:
    """Seed 002's design A without a clamp: multiplier ** count overflows; here it is capped."""
    extreme = [
        poise.Escalation(base=1e-3, maximum=1e9, multiplier=1e3, jitter=0.0),
        poise.Escalation(base=30.0, maximum=300.0, multiplier=1.0 + 1e-15, jitter=0.0),
        poise.Escalation(base=30.0, maximum=300.0, backoff=poise.Backoff.LINEAR, jitter=0.0),
    ]
    for esc in extreme:
        for n in (0, 1, 1024, 10**6, 2**31, FAILED_ROUNDS_CAP, 2**60):
            got = await lua_window(redis_server, n, esc)
            assert math.isfinite(got)
            assert esc.base <= got <= esc.maximum
    fleet = RedisFleet(redis_server)
    async with fleet:
        storage = await fleet.storage()
        assert isinstance(storage, poise.RedisStorage)
        key = storage.key("a")
        # a record whose count is at the saturation point, as if it had failed forever
        redis_server.command(
            "HSET", key, "state", "half_open", "version", "5", "failed_rounds", str(FAILED_ROUNDS_CAP),
            "protocol_version", "2", "opened_at", "1", "reopen_at", "1e18",
        )  # fmt: skip
        tripped = await storage.trip_open("a", expected_version=5, wait=WAIT)
        assert tripped.applied
        assert tripped.state.failed_rounds == FAILED_ROUNDS_CAP
        assert open_wait(tripped.state) == pytest.approx(300.0, abs=1e-3)


@pytest.mark.backends("trio")
async def test_redis_refuses_a_wait_no_escalation_could_produce(redis_server: RedisServer) -> None:
    fleet = RedisFleet(redis_server)
    async with fleet:
        storage = await fleet.storage()
        assert isinstance(storage, poise.RedisStorage)
        bad = ["30.0", "inf", "0", "2.0", "0.0", "0.5", "0.0"]  # maximum = inf
        with pytest.raises(poise.CoordinationError):
            await storage._run("trip_open", [storage.key("a")], ["0", *bad])
        with pytest.raises(poise.CoordinationError):
            await storage.begin_half_open_if_elapsed("a", expected_version=0, permitted=0, lease=1.0)


# -- protocol 3: the change log ---------------------------------------------------------


async def test_the_change_log_answers_nothing_when_idle_and_exactly_the_records_written_since(fleet: Fleet) -> None:
    async with fleet:
        s = await fleet.storage()
        changes = s.changes  # type: ignore[attr-defined]
        start = (await changes(-1)).sequence
        assert (await changes(start)).states == {}
        tripped = await s.trip_open("a", expected_version=0, wait=WAIT)
        await s.trip_open("b", expected_version=0, wait=WAIT)
        answer = await changes(start)
        assert answer.sequence == start + 2
        assert answer.states is not None
        assert set(answer.states) == {"a", "b"}
        assert answer.states["a"].version == tripped.state.version
        assert (await changes(answer.sequence)).states == {}
        assert (await changes(start, limit=1)).states is None  # too many: read everything
        await fleet.flush()
        assert (await changes(answer.sequence)).states is None  # the counter went backwards


async def test_a_protocol_2_writer_keeps_no_change_log(fleet: Fleet) -> None:
    async with fleet:
        new, old = await fleet.storage(), await fleet.storage(protocol_version=2)
        start = (await new.changes(-1)).sequence  # type: ignore[attr-defined]
        await old.trip_open("a", expected_version=0, wait=WAIT)
        assert (await new.changes(start)).states == {}  # type: ignore[attr-defined]
        assert (await new.read(["a"]))[0].state is CircuitState.OPEN  # a full read sees it
        with pytest.raises(poise.CoordinationError, match="protocol 3"):
            await old.changes(start)  # type: ignore[attr-defined]
