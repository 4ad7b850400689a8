"""A Redis Cluster of real redis-server processes: a master fails over while traffic flows.

The behavioural tests (a trip adopted fleet-wide, one probe per round, backoff that grows and
caps, ...) run on the session's cluster through the ``fleet`` fixture; this file kills the
master that serves the fleet's slot, on a cluster of its own, and checks that no call fails,
that the balancers fall back to their local circuits meanwhile, and that they coordinate
again through the promoted replica.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import poise_py as poise
from poise_py import CircuitState
from tests.support.coordination import COREDIS_LEAK, ClusterFleet, fail, started_cluster, state_of, stats
from tests.support.redis_server import RedisCluster

pytestmark = [pytest.mark.anyio, pytest.mark.real_clock, pytest.mark.filterwarnings(COREDIS_LEAK)]


@pytest.fixture
def private_cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    """Three masters with one replica each, to fail over."""
    with started_cluster(tmp_path / "cluster") as cluster:
        yield cluster
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Unclosed <MemoryObject", ResourceWarning)
        gc.collect()


async def answered_record(fleet: ClusterFleet, key: str) -> poise.SharedState:
    """``key``'s shared record, once the test's own reader reaches the promoted master.

    The reader is a client of its own: it may still hold the dead master's address for a
    while after the balancers' clients have learned the new topology, and raise
    CoordinationUnavailable meanwhile. Retried (bounded), never skipped.
    """
    with anyio.fail_after(30):
        while True:
            try:
                return await fleet.record(key)
            except poise.CoordinationUnavailable:
                await anyio.sleep(0.1)


async def test_a_master_failing_over_mid_traffic_fails_no_call_and_the_fleet_coordinates_again(
    private_cluster: RedisCluster,
) -> None:
    fleet = ClusterFleet(private_cluster)
    async with fleet:
        lbs = await fleet.balancers(3, "a", "b", "c", timeout=1.0)
        await fleet.sync(*lbs)
        await fail(lbs[0], exclude=("b", "c"))
        await fleet.sync(*lbs)
        assert all(state_of(lb, "a") is CircuitState.OPEN for lb in lbs)
        old_master = fleet.server
        replicas_before = {n.port for n in private_cluster.masters}
        # Replication is asynchronous: let the replica acknowledge the trip first (a write
        # it never received would read CLOSED after the failover, as after lost keys).
        assert old_master.command("WAIT", "1", "5000") == 1
        old_master.stop()  # the master of the fleet's slot dies; its replica must take over

        calls = 0
        fell_back = False
        with anyio.fail_after(60):
            while True:
                for lb in lbs:
                    for _ in range(5):
                        async with lb.acquire(exclude=("c",)) as permit:  # never raises
                            assert permit.endpoint.id == "b"
                        calls += 1
                await fleet.sync(*lbs)  # never raises either: a lost storage is a fallback
                fell_back = fell_back or not all(stats(lb).connected for lb in lbs)
                promoted = {n.port for n in private_cluster.masters} - replicas_before
                if promoted and all(stats(lb).connected for lb in lbs):
                    break
                await anyio.sleep(0.1)
        assert calls > 0
        assert fell_back, "the balancers noticed the dead master"
        assert fleet.server is not old_master
        # the promoted replica carries the record, and the fleet coordinates through it
        assert (await answered_record(fleet, "a")).state is CircuitState.OPEN
        assert all(state_of(lb, "a") is CircuitState.OPEN for lb in lbs)
        await fail(lbs[1], exclude=("a", "b"))
        await fleet.sync(*lbs)
        assert (await answered_record(fleet, "c")).state is CircuitState.OPEN
        assert all(state_of(lb, "c") is CircuitState.OPEN for lb in lbs)
        assert all(isinstance(stats(lb), poise.CoordinationStatistics) for lb in lbs)
