"""The gRPC worker pool: grpcio aio workers behind one balanced channel.

Run: ``python examples/grpc_pool.py`` (needs ``pip install 'poise_py[grpc]'``).

Four workers serve ``/wool.Worker/Dispatch`` on 127.0.0.1:

- ``w1`` is healthy;
- ``w2`` fails one call in four with an *unmarked* INTERNAL: ambiguous, so a strike, and
  its successes in between forgive it: it is never evicted;
- ``w3`` aborts with INTERNAL *and* the server-side marker ``wool-fault:
  worker-internal`` in its trailing metadata: the worker itself says "evict me", so the
  classifier makes it FATAL and it is ejected on the first occurrence;
- ``w4`` answers UNAVAILABLE one call in three: TRANSIENT, skipped without a strike.

The balancer's endpoint factory is ``ChannelFactory()`` (one ``grpc.aio`` channel per
worker, closed when the balancer stops); ``BalancedChannel(lb)`` stands where a
``grpc.aio.Channel`` would, so ``channel.unary_unary(METHOD)`` is what a generated stub
would build. The classifier is ``poise.classify.grpc(marker=("wool-fault",
"worker-internal"))``, and ``Dispatch`` is declared idempotent with 3 attempts, so a
skipped or failed worker costs the caller nothing but a retry on another one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections import Counter

# gRPC's core logs every GOAWAY at INFO as the workers stop ("Got goaway ... Cancelling all
# calls"); set before grpc is imported, and only if the caller did not choose a level.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import grpc
from grpc import aio

import poise_py as poise
from poise_py.contrib.grpc import BalancedChannel, ChannelFactory

MARKER = ("wool-fault", "worker-internal")
METHOD = "/wool.Worker/Dispatch"


def worker(name: str) -> grpc.GenericRpcHandler:
    """The service of one worker, with its fault."""
    calls = itertools.count(1)

    async def dispatch(request: bytes, context: aio.ServicerContext[bytes, bytes]) -> bytes:
        n = next(calls)
        if name == "w2" and n % 4 == 0:
            await context.abort(grpc.StatusCode.INTERNAL, "stream-open starvation")
        if name == "w3":
            await context.abort(grpc.StatusCode.INTERNAL, "worker shutting down", trailing_metadata=(MARKER,))
        if name == "w4" and n % 3 == 0:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "overloaded")
        return name.encode() + b":" + request

    handler = grpc.unary_unary_rpc_method_handler(dispatch)
    return grpc.method_handlers_generic_handler("wool.Worker", {"Dispatch": handler})


async def start(name: str) -> tuple[aio.Server, int]:
    server = aio.server()
    server.add_generic_rpc_handlers((worker(name),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def main() -> None:
    names = ["w1", "w2", "w3", "w4"]
    started = [await start(name) for name in names]
    channels = ChannelFactory()
    lb = poise.LoadBalancer(
        poise.StaticDiscovery(
            [poise.Endpoint(n, address=("127.0.0.1", p)) for n, (_, p) in zip(names, started, strict=True)]
        ),
        policy=poise.RoundRobin(),
        classifier=poise.classify.grpc(marker=MARKER),
        circuit=poise.CircuitPolicy(consecutive_failures=3, minimum_volume=5),
        endpoint_factory=channels,
        endpoint_close=channels.close,
        seed=1,
    )
    ejected: list[str] = []
    lb.add_observer(
        lambda e: (
            ejected.append(f"{e.endpoint_id} ({e.cause.value})")
            if isinstance(e, poise.EndpointEjected) and e.cause
            else None
        )
    )
    served: Counter[str] = Counter()
    try:
        async with lb:
            await lb.wait_ready(timeout=10)
            channel = BalancedChannel(lb, classifier=poise.classify.grpc(marker=MARKER), idempotent={METHOD})
            dispatch = channel.unary_unary(METHOD)  # what a generated stub builds
            for i in range(120):
                reply: bytes = await dispatch(f"task-{i}".encode(), timeout=5.0)
                served[reply.split(b":")[0].decode()] += 1
            stats = lb.statistics()
            snapshot = lb.snapshot()
    finally:
        for server, _ in started:
            await server.stop(None)

    print("dispatched:", dict(sorted(served.items())), "of 120")
    print("ejected:", ", ".join(ejected) or "none")
    for e in snapshot.endpoints:
        c = stats.endpoints[e.id]
        f = c.faults
        print(
            f"{e.id} {e.state.value:<6} successes={c.successes:<3} transient={f[poise.Fault.TRANSIENT]:<2}"
            f" suspect={f[poise.Fault.SUSPECT]:<2} fatal={f[poise.Fault.FATAL]} ejections={c.ejections}"
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="log: %(levelname)s %(message)s")
    asyncio.run(main())
