"""Damaged bookkeeping keys (the change log's sequence and sorted set), and garbage in every key.

A script checks the change log before it writes anything, so it applies all its effects or
none; a damaged key is reported once, polls read every record meanwhile, and the next write
replaces the key. A hypothesis test writes random values of every type into every key the
storage uses while two balancers serve traffic: no call fails, no operation fails, and once
the keys are deleted no endpoint stays OPEN past its maximum wait plus two polls.
On a real redis-server (coredis and redis-py) and a Redis Cluster.
"""

from __future__ import annotations

import logging
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import poise_py as poise
from poise_py import CircuitState, Fault
from tests.support.coordination import ClusterFleet, Fleet, RedisFleet, fail, state_of, stats
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.real_clock]


@pytest.fixture(params=["redis", "redis-py", "cluster"])
def fleet(request: pytest.FixtureRequest) -> Fleet:
    """Redis fleets only: the change log is Redis's (named ``fleet`` so that redis-py skips Trio)."""
    if request.param == "cluster":
        return ClusterFleet(request.getfixturevalue("redis_cluster"))
    return RedisFleet(
        request.getfixturevalue("redis_server"), client="coredis" if request.param == "redis" else "redis-py"
    )


def server_of(fleet: Fleet) -> RedisServer:
    server: RedisServer = fleet.server  # type: ignore[attr-defined]
    return server


def key_of(fleet: Fleet, name: str) -> str:
    namespace: str = fleet.namespace  # type: ignore[attr-defined]
    return f"{{{namespace}}}:{name}"


DAMAGE = {
    "a sequence that is no number": ("sequence", ["SET", "abc"], "abc"),
    "a sequence that is a hash": ("sequence", ["HSET", "f", "1"], "a hash"),
    "a change log that is a string": ("changes", ["SET", "garbage"], "not a sorted set"),
    "a change log that is a list": ("changes", ["RPUSH", "x"], "a list"),
}


@pytest.mark.parametrize("how", list(DAMAGE))
async def test_a_damaged_change_log_is_reported_once_polls_read_everything_and_the_next_write_repairs_it(
    fleet: Fleet, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    name, command, said = DAMAGE[how]
    server = server_of(fleet)
    async with fleet:
        lbs = await fleet.balancers(2, "a", "b")
        await fleet.sync(*lbs)
        await fail(lbs[0], exclude=("b",))  # a change log exists
        await fleet.sync(*lbs)
        assert all(state_of(lb, "a") is CircuitState.OPEN for lb in lbs)
        key = key_of(fleet, name)
        server.command("DEL", key)
        server.command(command[0], key, *command[1:])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="poise_py"):
            for _ in range(3):
                await fleet.sync(*lbs)
            # a write applies all its effects, and says so: the trip is applied and published
            await fail(lbs[1], exclude=("a",))
            await fleet.sync(*lbs)
        record = await fleet.record("b")
        assert (record.state, record.version) == (CircuitState.OPEN, 1)
        assert all(state_of(lb, "b") is CircuitState.OPEN for lb in lbs), "the other balancer sees the write"
        assert stats(lbs[1]).published == 1
        for lb in lbs:
            s = stats(lb)
            assert s.connected
            assert (s.failures, s.fallbacks, s.resyncs) == (0, 0, 0)
            assert s.poisoned <= 1, "reported once per balancer, not once per poll"
        assert sum(stats(lb).poisoned for lb in lbs) >= 1
        lines = [r.getMessage() for r in caplog.records if "change log is damaged" in r.getMessage()]
        assert 1 <= len(lines) <= 2
        assert key in lines[0]
        assert said in lines[0]
        assert not [r for r in caplog.records if "unreachable" in r.getMessage()]
        # the write repaired the key: a sequence number with an expiry, a sorted set
        assert server.command("TYPE", key_of(fleet, "sequence")) == "string"
        assert int(server.command("GET", key_of(fleet, "sequence"))) >= 1  # type: ignore[call-overload]
        assert server.command("TYPE", key_of(fleet, "changes")) == "zset"
        ttl = server.command("PTTL", key_of(fleet, name))
        assert isinstance(ttl, int)
        assert ttl > 0
        # and polls are incremental again: the next change reaches the other balancer at its next poll
        await fleet.advance(1.0)
        await fleet.sync(*lbs)
        assert all(stats(lb).failures == 0 for lb in lbs)


async def test_a_change_log_member_naming_another_key_is_never_read(fleet: Fleet) -> None:
    server = server_of(fleet)
    async with fleet:
        lbs = await fleet.balancers(2, "a", "b")
        await fleet.sync(*lbs)
        await fail(lbs[0], exclude=("b",))
        await fleet.sync(*lbs)
        sequence = int(server.command("GET", key_of(fleet, "sequence")))  # type: ignore[call-overload]
        secret = key_of(fleet, "secret")  # same slot: a script could read it
        server.command("HSET", secret, "state", "open", "version", "1")
        server.command("ZADD", key_of(fleet, "changes"), str(sequence + 1), secret)
        server.command("ZADD", key_of(fleet, "changes"), "+inf", key_of(fleet, "circuit:zz"))
        server.command("SET", key_of(fleet, "sequence"), str(sequence + 1))
        storage = await fleet.storage()
        assert isinstance(storage, poise.RedisStorage)
        ledger = [key_of(fleet, "sequence"), key_of(fleet, "changes")]
        raw = await storage._run("changes", ledger, [str(sequence), "1000", key_of(fleet, "circuit:")])
        assert isinstance(raw, list)
        assert secret.encode() not in raw, "the script read a key that is no record"
        answer = await storage.changes(sequence)
        assert answer.states == {}, "only records of this namespace are read, and only up to the sequence"
        await fleet.sync(*lbs)
        assert all(stats(lb).failures == 0 for lb in lbs)


# -- garbage in every key --------------------------------------------------------------------

MAX_WAIT = 3.0
GARBAGE_POLICY = poise.CircuitPolicy(
    consecutive_failures=1,
    minimum_volume=1,
    permitted_probes=1,
    escalation=poise.Escalation(base=1.0, maximum=MAX_WAIT, jitter=0.0),
    max_retry_after=MAX_WAIT,
)
"""Every wait the fleet (and each local circuit) writes is at most 3 s; half the pool may be ejected."""

NUMBERS = st.one_of(
    st.integers(-(2**64), 2**64).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "abc", "0x10", " 5 ", "1e18", "-0", "9007199254740993", "2.5", "nan", "-inf"]),
)
TIMES = st.floats(-1e6, 1e6).map(lambda d: ("now", d))  # a deadline near the storage's clock
FIELDS = ["state", "version", "opened_at", "reopen_at", "failed_rounds", "probes_permitted", "probes_remaining",
          "probes_completed", "protocol_version", "junk"]  # fmt: skip
FIELD_VALUES = st.one_of(NUMBERS, TIMES, st.sampled_from(["closed", "open", "half_open", "ajar"]), st.text(max_size=6))
MEMBERS = st.one_of(st.sampled_from(["circuit:a", "circuit:b", "circuit:zz", "sequence"]), st.text(max_size=6))
VALUES = st.one_of(
    st.tuples(st.just("string"), st.one_of(NUMBERS, st.text(max_size=8))),
    st.tuples(st.just("hash"), st.dictionaries(st.sampled_from(FIELDS), FIELD_VALUES, min_size=1)),
    st.tuples(st.just("list"), st.lists(st.text(max_size=4), min_size=1, max_size=3)),
    st.tuples(st.just("set"), st.lists(st.text(max_size=4), min_size=1, max_size=3)),
    st.tuples(
        st.just("zset"),
        st.lists(
            st.tuples(st.one_of(st.floats(-1e20, 1e20), st.sampled_from([math.inf, -math.inf])), MEMBERS),
            min_size=1,
            max_size=3,
        ),
    ),
    st.tuples(st.just("delete"), st.none()),
)
KEYS = ["circuit:a", "circuit:b", "sequence", "changes"]
ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(KEYS), VALUES),
        st.tuples(st.just("trip"), st.integers(0, 1), st.sampled_from(["a", "b"])),
        st.tuples(st.just("advance"), st.floats(0.0, 5.0)),
    ),
    min_size=1,
    max_size=6,
)


def write_garbage(server: RedisServer, fleet: Fleet, name: str, value: tuple[str, object]) -> None:
    key = key_of(fleet, name)
    kind, payload = value
    server.command("DEL", key)
    if kind == "string":
        assert isinstance(payload, str)
        server.command("SET", key, payload)
    elif kind == "hash":
        assert isinstance(payload, dict)
        now = server.command("TIME")
        assert isinstance(now, list)
        clock = int(now[0]) + int(now[1]) / 1e6
        args: list[str] = []
        for field, v in payload.items():
            args += [field, repr(clock + v[1]) if isinstance(v, tuple) else str(v)]
        server.command("HSET", key, *args)
    elif kind in ("list", "set"):
        assert isinstance(payload, list)
        server.command("RPUSH" if kind == "list" else "SADD", key, *payload)
    elif kind == "zset":
        assert isinstance(payload, list)
        args = []
        for score, member in payload:
            args += [repr(score) if math.isfinite(score) else ("+inf" if score > 0 else "-inf"), key_of(fleet, member)]
        server.command("ZADD", key, *args)


async def serve(lbs: list[poise.LoadBalancer], calls: int = 4) -> None:
    """Calls that all succeed: none may fail to find an endpoint."""
    for lb in lbs:
        for _ in range(calls):
            async with lb.acquire():
                pass


@pytest.mark.backends("trio")
@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(actions=ACTIONS)
async def test_garbage_of_every_type_in_every_key_fails_no_call_and_wedges_no_endpoint(
    redis_server: RedisServer, actions: list[tuple[object, ...]]
) -> None:
    fleet = RedisFleet(redis_server)
    async with fleet:
        lbs = await fleet.balancers(2, "a", "b", circuit=GARBAGE_POLICY, max_open_wait=MAX_WAIT, probe_lease=MAX_WAIT)
        await fleet.sync(*lbs)
        for action in actions:
            match action:
                case ("write", str(name), (str(kind), payload)):
                    write_garbage(redis_server, fleet, name, (kind, payload))
                case ("trip", int(i), str(endpoint)):
                    try:
                        permit = lbs[i].acquire(exclude=("b",) if endpoint == "a" else ("a",))
                    except poise.NoEligibleEndpoints:
                        pass  # already ejected here
                    else:
                        permit.fail(Fault.SUSPECT)
                case ("advance", float(seconds)):
                    await fleet.advance(seconds)
            await fleet.sync(*lbs)
            await serve(lbs)
            assert [stats(lb).failures for lb in lbs] == [0, 0], "no garbage makes a script fail"
        # every key deleted: within the largest wait plus two polls nothing is OPEN
        for name in KEYS:
            redis_server.command("DEL", key_of(fleet, name))
        await fleet.sync(*lbs)  # the first poll
        await fleet.advance(MAX_WAIT + 1.0)
        await fleet.sync(*lbs)  # the second poll
        await serve(lbs)
        assert [state_of(lb, e) for lb in lbs for e in ("a", "b")].count(CircuitState.OPEN) == 0
        assert all(stats(lb).connected for lb in lbs)
        assert [stats(lb).failures for lb in lbs] == [0, 0]
