"""Fleet coordination: what it costs on the hot path, how hard a fleet probes a dead dependency,
and how many Redis operations each shared state change takes.

Run: ``python bench/coordination.py`` (Trio). It starts its own redis-server (Debian's
package; installed first when missing and run as root) on a free loopback port. Prints:

1. ``acquire`` on a CLOSED circuit with and without coordination, in one run, as a ratio
   (target: within 1.05x either way; the hot path makes no round trip). The three
   balancers run side by side and are timed in interleaved rounds, so a change of the
   machine's load falls on all three alike; the ratio is the median of the rounds'
   (``bench._timing.cost_per_round``).
2. The probe rate against a dependency that stays down for a simulated hour (virtual time,
   Trio's MockClock; balancers are real, with InMemoryStorage on the same clock), for 1 and
   50 instances: each local, and coordinated with a constant wait (protocol 1) and with
   coordinated backoff (protocol 2).
3. Redis commands per state change of one shared circuit, counted by the server itself
   (``INFO commandstats``), for 1 and 10 instances.
4. Redis work per poll of one balancer, at 10 and 10,000 endpoints, when nothing changed and
   after one change: script calls and keys looked up (``keyspace_hits + keyspace_misses``),
   counted by the server, for protocol 2 (every poll reads every record) and protocol 3
   (the change log: incremental polls).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import coredis

import poise_py as poise
from bench._acquire import acquire_loop
from bench._timing import cost_per_round, interleaved, median_cost
from poise_py._coordination._lua import PRELUDE, SCRIPTS
from tests.support.clocks import FakeClock
from tests.support.coordination import rewind
from tests.support.redis_server import RedisServer

HOUR = 3600.0
CONSTANT = poise.Escalation(base=30.0, maximum=30.0)
BACKOFF = poise.Escalation(base=30.0, maximum=300.0)


def endpoints(n: int) -> poise.StaticDiscovery:
    return poise.StaticDiscovery([poise.Endpoint(f"e{i}") for i in range(n)])


# -- 1. the hot path ---------------------------------------------------------------------


async def hot_path(server: RedisServer, iterations: int, rounds: int) -> None:
    print("1. acquire + exit on a CLOSED circuit (RoundRobin, 10 endpoints)")
    print(f"   {rounds} interleaved rounds of {iterations:,} calls per balancer; the median of each round's ratio")
    print(f"{'coordination':<34}{'us/call':>10}{'x none':>9}{'range':>13}{'storage ops':>13}")
    client: coredis.Redis[bytes] = coredis.Redis(host="127.0.0.1", port=server.port)
    async with client, contextlib.AsyncExitStack() as stack:
        cases: list[tuple[str, poise.Coordination | None]] = [
            ("none", None),
            ("InMemoryStorage", poise.Coordination(poise.InMemoryStorage())),
            ("RedisStorage", poise.Coordination(poise.RedisStorage(client, namespace="bench-hot"))),
        ]
        balancers = []
        for _, coordination in cases:
            lb = poise.LoadBalancer(endpoints(10), policy=poise.RoundRobin(), seed=1, coordination=coordination)
            await stack.enter_async_context(lb)
            balancers.append(lb)

        def operations(lb: poise.LoadBalancer) -> int:
            stats = lb.coordination_statistics()
            return stats.operations if stats else 0

        before = [operations(lb) for lb in balancers]
        samples = await interleaved([functools.partial(acquire_loop, lb) for lb in balancers], iterations, rounds)
        for (name, _), lb, row, ops in zip(cases, balancers, samples, before, strict=True):
            ratios = cost_per_round(row, samples[0])
            spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
            print(
                f"{name:<34}{median_cost(row) * 1e6:>10.3f}{statistics.median(ratios):>9.2f}"
                f"{spread:>13}{operations(lb) - ops:>13}"
            )
    print(
        "   (range: the lowest and highest round; storage ops: operations issued while the rounds ran, polls included)"
    )


# -- 2. probe rate against a dependency that stays down ----------------------------------


async def dead_dependency(
    instances: int, escalation: poise.Escalation, protocol: int | None, cap: float | None = None
) -> tuple[int, int]:
    """Run ``instances`` balancers for an hour of virtual time against a dead endpoint.

    Each balancer sends one request a second; every call that reaches the endpoint fails.
    Returns (probes, calls that reached the endpoint) over the hour, fleet-wide.
    """
    circuit = poise.CircuitPolicy(escalation=escalation)
    storage = None if protocol is None else poise.InMemoryStorage(clock=trio.current_time, protocol_version=protocol)
    probes = calls = 0

    async def instance(seed: int) -> None:
        nonlocal probes, calls
        coordination = None if storage is None else poise.Coordination(storage, sync_interval=1.0, max_open_wait=cap)
        lb = poise.LoadBalancer(endpoints(1), circuit=circuit, seed=seed, coordination=coordination)
        async with lb:
            await trio.sleep(seed * 1.0 / max(instances, 1))  # instances do not call in lock-step
            end = HOUR
            while trio.current_time() < end:
                try:
                    permit = lb.acquire()
                except poise.NoEligibleEndpoints:
                    pass
                else:
                    calls += 1
                    probes += permit.probe
                    permit.fail(poise.Fault.SUSPECT)
                await trio.sleep(1.0)

    async with trio.open_nursery() as nursery:
        for seed in range(instances):
            nursery.start_soon(instance, seed)
    return probes, calls


def probe_rates() -> None:
    print()
    print("2. a dependency that stays down for one simulated hour; 1 request/s per instance")
    print(f"{'setup':<44}{'instances':>10}{'probes/h':>10}{'calls/h':>10}")
    setups: list[tuple[str, poise.Escalation, int | None, float | None]] = [
        ("local circuits, constant 30 s wait", CONSTANT, None, None),
        ("local circuits, backoff 30..300 s", BACKOFF, None, None),
        ("coordinated, constant 30 s wait (protocol 1)", CONSTANT, 1, None),
        ("coordinated, backoff 30..300 s (protocol 2)", BACKOFF, 2, None),
        ("coordinated, the defaults (shared cap 30 s)", BACKOFF, 2, 30.0),
    ]
    for name, escalation, protocol, cap in setups:
        for n in (1, 50):
            run: Callable[[], tuple[int, int]] = functools.partial(
                trio.run,
                dead_dependency,
                n,
                escalation,
                protocol,
                cap,
                clock=trio.testing.MockClock(autojump_threshold=0),
            )
            probes, calls = run()
            print(f"{name:<44}{n:>10}{probes:>10}{calls:>10}")


# -- 3. Redis commands per state change --------------------------------------------------


def redis_commands(server: RedisServer) -> int:
    return sum(server.command_count(c) for c in ("evalsha", "eval", "script|load"))


async def operations_per_change(server: RedisServer, instances: int) -> list[tuple[str, int]]:
    namespace = f"bench-ops-{instances}"
    clock = FakeClock()
    exact = poise.Escalation(base=30.0, maximum=300.0, jitter=0.0)
    circuit = poise.CircuitPolicy(consecutive_failures=1, minimum_volume=1, escalation=exact)
    rows: list[tuple[str, int]] = []
    async with contextlib.AsyncExitStack() as stack:
        lbs = []
        for seed in range(instances):
            client: coredis.Redis[bytes] = coredis.Redis(host="127.0.0.1", port=server.port)
            await stack.enter_async_context(client)
            storage = poise.RedisStorage(client, namespace=namespace)
            lb = poise.LoadBalancer(
                endpoints(1),
                circuit=circuit,
                clock=clock,
                seed=seed,
                # full reads (2 commands: the sequence, then every record) are section 4's business
                coordination=poise.Coordination(
                    storage, sync_interval=HOUR, max_open_wait=None, full_poll_interval=HOUR
                ),
            )
            await stack.enter_async_context(lb)
            lbs.append(lb)

        def issued() -> int:
            return sum(s.operations for lb in lbs if (s := lb.coordination_statistics()) is not None)

        async def phase(name: str, action: Callable[[], object] | None = None) -> None:
            if action is not None:
                action()  # synchronous: nothing reaches Redis before the syncs below
            before, ours = redis_commands(server), issued()
            # What each background task does when woken (a local move, a deadline), then
            # every balancer's next poll. Deadlines pass everywhere at once: all may ask.
            for poll in (False, True):
                for lb in lbs:
                    coordinator = lb._coordinator
                    assert coordinator is not None
                    await coordinator.sync(poll=poll)
            served = redis_commands(server) - before
            assert served == issued() - ours, "the server counted other commands than ours"
            rows.append((name, served - len(lbs)))

        await phase("nothing changes")

        def trip() -> None:
            lbs[0].acquire().fail(poise.Fault.SUSPECT)

        await phase("CLOSED -> OPEN (one trips, all mirror)", trip)

        def elapse() -> None:
            clock.advance(30.0)
            rewind(server, namespace, 30.0)
            _probes(lbs[0])  # one instance has traffic: its refused call is the demand a lease follows

        await phase("OPEN -> HALF_OPEN (begin + leases)", elapse)
        probes = _probes(lbs[0])
        assert len(probes) == 1, probes

        def fail_probes() -> None:
            for p in probes:
                p.fail(poise.Fault.SUSPECT)

        await phase("HALF_OPEN -> OPEN (probe fails)", fail_probes)
        clock.advance(60.0)
        rewind(server, namespace, 60.0)
        _probes(lbs[0])
        for lb in lbs:
            coordinator = lb._coordinator
            assert coordinator is not None
            await coordinator.sync(poll=True)
        probes = _probes(lbs[0])
        assert len(probes) == 1, probes

        def pass_probes() -> None:
            for p in probes:
                p.succeed()

        await phase("HALF_OPEN -> CLOSED (report + close)", pass_probes)
    return rows


def _probes(lb: poise.LoadBalancer) -> list[poise.Permit]:
    out = []
    while True:
        try:
            out.append(lb.acquire())
        except poise.NoEligibleEndpoints:
            return out


async def redis_operations(server: RedisServer) -> None:
    for body in SCRIPTS.values():  # loaded once per server; count the steady state
        server.command("SCRIPT", "LOAD", PRELUDE + body)
    print()
    print("3. Redis commands per shared state change, beyond the polls (a poll is 1 command per balancer,")
    print("   whatever the pool size); counted by the server and checked against the balancers' own count")
    one = await operations_per_change(server, 1)
    ten = await operations_per_change(server, 10)
    print(f"{'phase':<44}{'1 instance':>12}{'10 instances':>14}")
    for (name, a), (_, b) in zip(one, ten, strict=True):
        print(f"{name:<44}{a:>12}{b:>14}")


# -- 4. Redis work per poll ---------------------------------------------------------------


def server_work(server: RedisServer) -> tuple[int, int]:
    """(script calls, keys looked up) served so far."""
    info = server.command("INFO", "stats")
    assert isinstance(info, bytes)
    stats = dict(line.split(":", 1) for line in info.decode().splitlines() if ":" in line)
    return redis_commands(server), int(stats["keyspace_hits"]) + int(stats["keyspace_misses"])


async def per_poll(server: RedisServer, size: int, protocol: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """One balancer over ``size`` endpoints polls twice: nothing changed, then one change."""
    namespace = f"bench-poll-{size}-{protocol}"
    clock = FakeClock()
    circuit = poise.CircuitPolicy(consecutive_failures=1, minimum_volume=1, max_ejection_percent=1.0)
    async with contextlib.AsyncExitStack() as stack:
        lbs = []
        for seed in range(2):
            client: coredis.Redis[bytes] = coredis.Redis(host="127.0.0.1", port=server.port)
            await stack.enter_async_context(client)
            lb = poise.LoadBalancer(
                endpoints(size),
                circuit=circuit,
                clock=clock,
                seed=seed,
                coordination=poise.Coordination(
                    poise.RedisStorage(client, namespace=namespace, protocol_version=protocol), sync_interval=HOUR
                ),
            )
            await stack.enter_async_context(lb)
            lbs.append(lb)
        reader, writer = lbs
        for lb in lbs:
            coordinator = lb._coordinator
            assert coordinator is not None
            await coordinator.sync(poll=True)
        polling = reader._coordinator
        assert polling is not None

        async def measured() -> tuple[int, int]:
            before = server_work(server)
            await polling.sync(poll=True)
            after = server_work(server)
            return after[0] - before[0], after[1] - before[1]

        idle = await measured()
        writer.acquire(exclude=[f"e{i}" for i in range(1, size)]).fail(poise.Fault.SUSPECT)
        coordinator = writer._coordinator
        assert coordinator is not None
        await coordinator.sync()  # publishes the trip of e0
        changed = await measured()
        assert reader.snapshot()["e0"].state is poise.CircuitState.OPEN
    return idle, changed


async def poll_costs(server: RedisServer) -> None:
    print()
    print("4. Redis work per poll of one balancer (script calls / keys looked up), counted by the server")
    print(f"{'protocol':<34}{'endpoints':>10}{'nothing changed':>18}{'one change':>14}")
    for protocol, name in ((2, "2 (every poll reads every record)"), (3, "3 (change log)")):
        for size in (10, 10_000):
            (c0, k0), (c1, k1) = await per_poll(server, size, protocol)
            print(f"{name:<34}{size:>10}{f'{c0} / {k0}':>18}{f'{c1} / {k1}':>14}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=20_000, help="calls per balancer per round")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--skip-rates", action="store_true", help="skip the simulated hour (about a minute)")
    parser.add_argument("--polls-only", action="store_true", help="only section 4, the work per poll")
    args = parser.parse_args()
    logging.getLogger("poise_py").setLevel(logging.CRITICAL)  # the dead dependency is the point: no alerts
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            if not args.polls_only:
                trio.run(hot_path, server, args.iterations, args.rounds)
                if not args.skip_rates:
                    probe_rates()
                trio.run(redis_operations, server)
            trio.run(poll_costs, server)
        finally:
            server.stop()
