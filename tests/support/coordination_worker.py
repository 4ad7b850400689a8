"""One fleet member in its own process, for tests/coordination/test_processes.py.

``python -m tests.support.coordination_worker PORT NAMESPACE SEED PERMITTED`` starts a balancer
over endpoint "a" sharing Redis, syncs and takes every probe permit its leases give until
three rounds in a row bring none, prints
``{"probes": n}``, waits for "fail" or "succeed" on stdin, reports its probes that way,
syncs, prints ``{"done": true}`` and exits.
"""

from __future__ import annotations

import json
import sys

import anyio
import anyio.to_thread
import coredis

import poise_py as poise


async def main(port: int, namespace: str, seed: int, permitted: int) -> None:
    client: coredis.Redis[bytes] = coredis.Redis(host="127.0.0.1", port=port, connect_timeout=5.0)
    circuit = poise.CircuitPolicy(
        consecutive_failures=1,
        minimum_volume=1,
        permitted_probes=permitted,
        escalation=poise.Escalation(base=30.0, maximum=300.0, jitter=0.0),
    )
    storage = poise.RedisStorage(client, namespace=namespace)
    coordination = poise.Coordination(storage, sync_interval=3600.0, timeout=10.0, max_open_wait=None)
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint("a")]), circuit=circuit, seed=seed, coordination=coordination
    )
    async with client, lb:
        coordinator = lb._coordinator
        assert coordinator is not None
        probes: list[poise.Permit] = []
        quiet = 0
        while quiet < 3:  # take every probe the leases give, until nothing changes
            await coordinator.sync(poll=True)
            before = len(probes)
            while True:
                try:
                    permit = lb.acquire()
                except poise.NoEligibleEndpoints:
                    break
                if not permit.probe:
                    raise SystemExit(f"a closed permit while the fleet is half-open: {permit!r}")
                probes.append(permit)
            quiet = quiet + 1 if len(probes) == before else 0
        print(json.dumps({"probes": len(probes)}), flush=True)
        verdict = (await anyio.to_thread.run_sync(sys.stdin.readline)).strip()
        for permit in probes:
            if verdict == "succeed":
                permit.succeed()
            else:
                permit.fail(poise.Fault.SUSPECT)
        await coordinator.sync(poll=True)
        print(json.dumps({"done": True, "connected": coordinator.connected}), flush=True)


if __name__ == "__main__":
    port, namespace, seed, permitted = sys.argv[1:5]
    anyio.run(main, int(port), namespace, int(seed), int(permitted))
