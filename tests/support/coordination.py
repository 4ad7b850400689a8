"""Fixtures for fleet coordination: a real redis-server, and fleets of balancers over a storage.

A *fleet* hands out storages that share one set of records (an :class:`InMemoryStorage`
family, or one Redis namespace), builds balancers on them with a shared :class:`FakeClock`,
and moves time, breaks and repairs the storage the same way for both, so each behavioural
test runs unchanged against the embedded storage and against a real Redis.

Time: balancers read the fake clock; the in-memory storage reads the same clock; for
Redis, whose clock is the server's ``TIME``, :meth:`Fleet.advance` rewinds every stored
time of the namespace by the same amount, which is what the passing of time looks like to
the scripts. Syncs are driven explicitly (``sync_interval`` is an hour), so no test sleeps.
"""

from __future__ import annotations

import abc
import contextlib
import gc
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import pytest

import poise_py as poise
from poise_py import CircuitState, Fault
from poise_py._coordination._protocol import Changes, OpenWait, ProbeReport, Reply, SharedState
from tests.support.clocks import FakeClock, endpoints
from tests.support.redis_server import RedisCluster, RedisServer, RedisServerError

COREDIS_LEAK = "ignore:Unclosed <MemoryObject:ResourceWarning"
"""coredis 6.9 leaks the memory streams of a connection that failed to connect (it creates
them in ``__init__`` and closes them only once connected), so killing Redis under a client
makes anyio warn when they are collected. Tests that kill Redis ignore exactly that."""

ESCALATING = poise.CircuitPolicy(
    consecutive_failures=1,
    minimum_volume=1,
    permitted_probes=1,
    escalation=poise.Escalation(base=30.0, maximum=300.0, jitter=0.0),
    max_ejection_percent=1.0,
)
"""One strike trips; open waits 30, 60, 120, 240, 300 s with no jitter."""


def open_wait(record: SharedState) -> float:
    """How long the record's OPEN round lasts, in storage seconds."""
    assert record.reopen_at is not None
    assert record.opened_at is not None
    return record.reopen_at - record.opened_at


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the session (installed from Debian's package if missing)."""
    try:
        server = RedisServer(tmp_path_factory.mktemp("redis"))
        server.start()
    except RedisServerError as exc:
        pytest.fail(str(exc))
    yield server
    server.stop()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of the test's own, to kill and restart."""
    try:
        server = RedisServer(tmp_path / "redis")
        server.start()
    except RedisServerError as exc:
        pytest.fail(str(exc))
    yield server
    server.stop()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Unclosed <MemoryObject", ResourceWarning)
        gc.collect()  # the clients' failed connections (see COREDIS_LEAK), while the filter holds


class FlakyStorage:
    """Wraps a storage; ``down`` makes every call fail, ``slow`` makes every call hang."""

    def __init__(self, inner: poise.InMemoryStorage, fleet: MemoryFleet) -> None:
        self._inner = inner
        self._fleet = fleet

    def __repr__(self) -> str:
        return repr(self._inner)

    @property
    def protocol_version(self) -> int:
        return self._inner.protocol_version

    async def _gate(self) -> None:
        if self._fleet.down:
            raise poise.CoordinationUnavailable("storage is down (test)")
        if self._fleet.slow_calls:
            await anyio.sleep_forever()

    async def read(self, keys: Sequence[str]) -> list[SharedState]:
        await self._gate()
        return await self._inner.read(keys)

    async def changes(self, since: int, *, limit: int = 1000) -> Changes:
        await self._gate()
        return await self._inner.changes(since, limit=limit)

    async def trip_open(self, key: str, *, expected_version: int, wait: OpenWait) -> Reply:
        await self._gate()
        return await self._inner.trip_open(key, expected_version=expected_version, wait=wait)

    async def begin_half_open_if_elapsed(
        self, key: str, *, expected_version: int, permitted: int, lease: float
    ) -> Reply:
        await self._gate()
        return await self._inner.begin_half_open_if_elapsed(
            key, expected_version=expected_version, permitted=permitted, lease=lease
        )

    async def lease_probe(self, key: str, *, expected_version: int) -> Reply:
        await self._gate()
        return await self._inner.lease_probe(key, expected_version=expected_version)

    async def report_probe(self, key: str, *, expected_version: int, report: ProbeReport) -> Reply:
        await self._gate()
        return await self._inner.report_probe(key, expected_version=expected_version, report=report)

    async def close(self, key: str, *, expected_version: int) -> Reply:
        await self._gate()
        return await self._inner.close(key, expected_version=expected_version)


class Fleet(abc.ABC):
    """Balancers sharing one storage; see the module docstring."""

    kind = "fleet"

    def __init__(self) -> None:
        self.clock = FakeClock()
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Fleet:
        await self._stack.__aenter__()
        self._reader = await self.storage()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._stack.__aexit__(et, e, tb)

    @abc.abstractmethod
    async def storage(self, *, protocol_version: int = poise.PROTOCOL_VERSION) -> poise.Storage:
        """A storage on the fleet's shared records, speaking ``protocol_version``."""

    async def balancer(self, *ids: str, **kwargs: Any) -> poise.LoadBalancer:
        """A running balancer over ``ids`` (default one endpoint, "a"), closed with the fleet."""
        lb = await self.build(*ids, **kwargs)
        await self._stack.enter_async_context(lb)
        return lb

    async def build(
        self,
        *ids: str,
        circuit: poise.CircuitPolicy = ESCALATING,
        protocol_version: int = poise.PROTOCOL_VERSION,
        seed: int = 0,
        timeout: float = 5.0,
        probe_lease: float = 30.0,
        max_open_wait: float | None = None,
        on_change: Callable[[poise.CoordinationChange], None] | None = None,
        **kwargs: Any,
    ) -> poise.LoadBalancer:
        """A balancer over ``ids`` (default one endpoint, "a"), not started."""
        storage = await self.storage(protocol_version=protocol_version)
        coordination = poise.Coordination(
            storage,
            sync_interval=3600.0,
            timeout=timeout,
            probe_lease=probe_lease,
            max_open_wait=max_open_wait,  # None: these tests exercise the policy's whole backoff
            on_change=on_change,
        )
        return poise.LoadBalancer(
            poise.StaticDiscovery(endpoints(*(ids or ("a",)))),
            circuit=circuit,
            clock=self.clock,
            seed=seed,
            coordination=coordination,
            **kwargs,
        )

    async def balancers(self, n: int, *ids: str, **kwargs: Any) -> list[poise.LoadBalancer]:
        return [await self.balancer(*ids, seed=i, **kwargs) for i in range(n)]

    async def sync(self, *lbs: poise.LoadBalancer) -> None:
        """Let each balancer do everything pending with a full poll, twice over.

        The second pass lets every balancer see what the others published in the first.
        """
        for _ in range(2 if len(lbs) > 1 else 1):
            for lb in lbs:
                coordinator = lb._coordinator
                assert coordinator is not None
                await coordinator.sync(poll=True)

    async def advance(self, seconds: float) -> None:
        """Move the balancers' clock and the storage's clock forward together."""
        self.clock.advance(seconds)

    async def record(self, key: str = "a") -> SharedState:
        """The shared record of ``key``, read with a storage of this fleet's own."""
        return (await self._reader.read([key]))[0]

    @abc.abstractmethod
    async def poison(self, key: str, how: str) -> None:
        """Make ``key``'s record unusable: ``how`` is "wrong type", "unknown state" or "non-numeric version"."""

    @abc.abstractmethod
    async def flush(self) -> None:
        """Lose every record (Redis: FLUSHALL)."""

    @abc.abstractmethod
    async def kill(self) -> None:
        """Make the storage unreachable."""

    @abc.abstractmethod
    async def restart(self) -> None:
        """Make it reachable again, empty (no persistence)."""

    @abc.abstractmethod
    def slow(self) -> contextlib.AbstractAsyncContextManager[None]:
        """While inside, every storage call hangs (past any timeout)."""


class MemoryFleet(Fleet):
    """A fleet over one :class:`InMemoryStorage` (per-instance protocol views of it)."""

    kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.base = poise.InMemoryStorage(clock=self.clock)
        self.down = False
        self.slow_calls = False

    async def storage(self, *, protocol_version: int = poise.PROTOCOL_VERSION) -> poise.Storage:
        return FlakyStorage(poise.InMemoryStorage.sharing(self.base, protocol_version=protocol_version), self)

    async def flush(self) -> None:
        self.base.clear()

    async def poison(self, key: str, how: str) -> None:
        # In memory a record is a SharedState: an unusable one is how a storage reports one.
        self.base._records[key] = SharedState(version=-1, problem=f"key {key}: {how}")

    async def kill(self) -> None:
        self.down = True

    async def restart(self) -> None:
        self.base.clear()  # a restart without persistence loses the records
        self.down = False

    @contextlib.asynccontextmanager
    async def slow(self) -> AsyncIterator[None]:
        self.slow_calls = True
        try:
            yield
        finally:
            self.slow_calls = False


class RedisFleet(Fleet):
    """A fleet over one Redis namespace, one client per storage: coredis, or redis-py (``redis.asyncio``)."""

    kind = "redis"

    def __init__(self, server: RedisServer, client: str = "coredis") -> None:
        super().__init__()
        self.server = server
        self.client = client
        self.namespace = f"t{uuid.uuid4().hex[:12]}"

    async def storage(self, *, protocol_version: int = poise.PROTOCOL_VERSION) -> poise.Storage:
        if self.client == "redis-py":
            import redis.asyncio
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            # No client-side retries: the balancer's own timeout and fallback are under test.
            py_client = redis.asyncio.Redis(
                host="127.0.0.1",
                port=self.server.port,
                socket_connect_timeout=2.0,
                socket_timeout=5.0,
                retry=Retry(NoBackoff(), 0),
            )
            self._stack.push_async_callback(py_client.aclose)
            return poise.RedisStorage(py_client, namespace=self.namespace, protocol_version=protocol_version)
        import coredis

        client: coredis.Redis[bytes] = coredis.Redis(
            host="127.0.0.1", port=self.server.port, connect_timeout=2.0, stream_timeout=5.0
        )
        await self._stack.enter_async_context(client)
        return poise.RedisStorage(client, namespace=self.namespace, protocol_version=protocol_version)

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        if self.server.running:  # else its records are lost anyway
            rewind(self.server, self.namespace, seconds)

    async def flush(self) -> None:
        assert self.server.command("FLUSHALL") == "OK"

    async def poison(self, key: str, how: str) -> None:
        await poison_redis(self.server, self.namespace, key, how)

    async def kill(self) -> None:
        self.server.stop()

    async def restart(self) -> None:
        self.server.start()

    @contextlib.asynccontextmanager
    async def slow(self) -> AsyncIterator[None]:
        self.server.command("CLIENT", "PAUSE", "60000", "WRITE")  # scripts wait; UNPAUSE still runs
        try:
            yield
        finally:
            self.server.command("CLIENT", "UNPAUSE")


class ClusterFleet(Fleet):
    """A fleet over one namespace of a real Redis Cluster, one ``coredis.RedisCluster`` per storage.

    The namespace is the keys' hash tag, so the fleet's records live on one shard; time
    passes for them on the master that serves that slot.
    """

    kind = "cluster"

    def __init__(self, cluster: RedisCluster) -> None:
        super().__init__()
        self.cluster = cluster
        self.namespace = f"t{uuid.uuid4().hex[:12]}"

    async def storage(self, *, protocol_version: int = poise.PROTOCOL_VERSION) -> poise.Storage:
        import coredis

        global _cluster_clients_made  # noqa: PLW0603 - see collect_coredis_leaks
        _cluster_clients_made = True
        seed = self.cluster.masters[0]
        client: coredis.RedisCluster[bytes] = coredis.RedisCluster(
            host="127.0.0.1", port=seed.port, connect_timeout=2.0, stream_timeout=5.0
        )
        await self._stack.enter_async_context(client)
        return poise.RedisStorage(client, namespace=self.namespace, protocol_version=protocol_version)

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        try:
            return await super().__aexit__(et, e, tb)
        finally:
            with warnings.catch_warnings():
                # coredis's cluster client leaks the memory streams of connections it opened
                # to learn the topology (see COREDIS_LEAK): collect them while the filter holds.
                warnings.filterwarnings("ignore", "Unclosed <MemoryObject", ResourceWarning)
                gc.collect()

    @property
    def server(self) -> RedisServer:
        """The master serving this fleet's slot now."""
        return self.cluster.master_of(f"{{{self.namespace}}}:circuit:a")

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        rewind(self.server, self.namespace, seconds)

    async def poison(self, key: str, how: str) -> None:
        await poison_redis(self.server, self.namespace, key, how)

    async def flush(self) -> None:
        for master in self.cluster.masters:
            assert master.command("FLUSHALL") == "OK"

    async def kill(self) -> None:
        for node in self.cluster.nodes:
            node.stop()

    async def restart(self) -> None:
        for node in self.cluster.nodes:
            node.start()  # each keeps its nodes.conf: the cluster re-forms, empty
        await anyio.to_thread.run_sync(self.cluster.wait_ok)

    @contextlib.asynccontextmanager
    async def slow(self) -> AsyncIterator[None]:
        shard = self.server
        shard.command("CLIENT", "PAUSE", "60000", "WRITE")
        try:
            yield
        finally:
            shard.command("CLIENT", "UNPAUSE")


_REWIND = """
local cursor = '0'
repeat
  local found = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = found[1]
  for _, key in ipairs(found[2]) do
    if redis.call('TYPE', key).ok == 'hash' then
      for _, field in ipairs({'opened_at', 'reopen_at'}) do
        local t = redis.call('HGET', key, field)
        if t and tonumber(t) then
          redis.call('HSET', key, field, string.format('%.17g', tonumber(t) - tonumber(ARGV[2])))
        end
      end
    end
  end
until cursor == '0'
return 1
"""


async def poison_redis(server: RedisServer, namespace: str, key: str, how: str) -> None:
    """Make one record of a namespace unusable, the way ``how`` says (see :meth:`Fleet.poison`)."""
    name = f"{{{namespace}}}:circuit:{key}"
    if how == "wrong type":
        server.command("DEL", name)
        server.command("SET", name, "not a hash")
    elif how == "unknown state":
        server.command("HSET", name, "state", "ajar", "version", "3")
    else:
        server.command("HSET", name, "state", "open", "version", "seven")


def rewind(server: RedisServer, namespace: str, seconds: float) -> None:
    """Age every record of a namespace by ``seconds``: the scripts compare these times with ``TIME``."""
    server.command("EVAL", _REWIND, "0", f"{{{namespace}}}:circuit:*", repr(float(seconds)))


FLEETS = ["memory", "redis", "redis-py"]
"""The storages every behavioural test runs against: embedded, Redis through coredis, Redis
through redis-py (asyncio only: its Trio runs are deselected, see below); ``fleet`` adds a
three-master Redis Cluster through ``coredis.RedisCluster``."""


_cluster_clients_made = False
"""A ``coredis.RedisCluster`` was made since the last collection of what it leaks."""


def collect_coredis_leaks() -> None:
    """Collect coredis's leaked streams (see COREDIS_LEAK) while ignoring exactly their warning."""
    global _cluster_clients_made  # noqa: PLW0603 - one flag for the whole session
    _cluster_clients_made = False
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Unclosed <MemoryObject", ResourceWarning)
        for _ in range(3):
            gc.collect()


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """The cluster client's leaks outlive the test that made them: collect them before the next."""
    if _cluster_clients_made:
        collect_coredis_leaks()
    return (yield)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Iterator[None]:
    """Session teardown collects what coredis leaked (see COREDIS_LEAK; its cluster client's
    streams outlive the tests): inside pytest's own warning filters, ignore exactly that."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Unclosed <MemoryObject", ResourceWarning)
        yield
        for _ in range(3):
            gc.collect()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """One Redis Cluster for the session: three masters, one replica each, real redis-servers."""
    with started_cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


@contextlib.contextmanager
def started_cluster(path: Path) -> Iterator[RedisCluster]:
    """A real Redis Cluster under ``path``, stopped afterwards; a failure to start fails the test."""
    cluster = RedisCluster(path)
    try:
        cluster.start()
    except RedisServerError as exc:
        cluster.stop()
        pytest.fail(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=[*FLEETS, "cluster"])
def fleet(request: pytest.FixtureRequest) -> Fleet:
    """A fleet over the embedded storage, the session's Redis with each client, then a Redis Cluster."""
    if request.param == "memory":
        return MemoryFleet()
    if request.param == "cluster":
        return ClusterFleet(request.getfixturevalue("redis_cluster"))
    return RedisFleet(
        request.getfixturevalue("redis_server"), client="coredis" if request.param == "redis" else "redis-py"
    )


@pytest.fixture(params=FLEETS)
def faulty_fleet(request: pytest.FixtureRequest) -> Fleet:
    """A fleet whose storage the test may kill, restart, flush and slow down."""
    if request.param == "memory":
        return MemoryFleet()
    return RedisFleet(
        request.getfixturevalue("private_redis"), client="coredis" if request.param == "redis" else "redis-py"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (never skip) the Trio runs of redis-py fleets: redis-py runs on asyncio only."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        trio = params.get("anyio_backend") == "trio"  # the backend's name (tests/conftest.py)
        redis_py = "redis-py" in (params.get("fleet"), params.get("faulty_fleet"))
        (dropped if trio and redis_py else kept).append(item)
        if params.get("fleet") == "cluster":
            item.add_marker(pytest.mark.filterwarnings(COREDIS_LEAK))  # the cluster client leaks too
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


# -- calls and reads through a fleet's balancers --------------------------------------


async def fail(lb: poise.LoadBalancer, *, exclude: tuple[str, ...] = ()) -> str:
    """One SUSPECT call through ``lb``; returns the endpoint it went to."""
    permit = lb.acquire(exclude=exclude)
    permit.fail(Fault.SUSPECT)
    return permit.endpoint.id


async def grab_probes(fleet: Fleet, lbs: list[poise.LoadBalancer], *, each: int | None = None) -> list[poise.Permit]:
    """Every probe permit the balancers get when they ask (held, not reported), ``each`` at most per balancer.

    Leases follow demand: a refused acquire is demand, and the sync after it leases a slot
    for it, which the next acquire takes.
    """
    return [permit for _, permit in await grab_held_probes(fleet, lbs, each=each)]


async def grab_held_probes(
    fleet: Fleet, lbs: list[poise.LoadBalancer], *, each: int | None = None
) -> list[tuple[poise.LoadBalancer, poise.Permit]]:
    """As :func:`grab_probes`, each probe permit paired with the balancer that issued it."""
    probes: list[tuple[poise.LoadBalancer, poise.Permit]] = []
    for lb in lbs:
        mine = 0
        while each is None or mine < each:
            try:
                permit = lb.acquire()
            except poise.NoEligibleEndpoints:
                before = stats(lb).leases
                await fleet.sync(lb)
                if stats(lb).leases == before:
                    break
                continue
            assert permit.probe, "a closed permit while the fleet is half-open"
            probes.append((lb, permit))
            mine += 1
    return probes


def state_of(lb: poise.LoadBalancer, endpoint_id: str = "a") -> CircuitState:
    return lb.snapshot()[endpoint_id].state


def stats(lb: poise.LoadBalancer) -> poise.CoordinationStatistics:
    s = lb.coordination_statistics()
    assert s is not None
    return s
