"""A runnable tour: three endpoints, one of them broken, on Trio with virtual time.

Run: ``python examples/quickstart.py``. The broken endpoint is ejected after a handful
of strikes, probed once its open window ends, and readmitted when it recovers; the
healthy ones never lose traffic. Prints what happened, phase by phase.
"""

from __future__ import annotations

import trio
import trio.testing

import poise_py as poise

BROKEN = {"b"}


async def call(endpoint: poise.Endpoint) -> str:
    """A pretend backend call: endpoint "b" fails while it is in BROKEN."""
    await trio.sleep(0.01)
    if endpoint.id in BROKEN:
        raise ConnectionResetError(f"{endpoint.id} reset the connection")
    return f"ok from {endpoint.id}"


async def traffic(lb: poise.LoadBalancer, requests: int) -> dict[str, int]:
    served: dict[str, int] = {}
    for _ in range(requests):
        try:
            async with lb.acquire() as permit:
                await call(permit.endpoint)
            served[permit.endpoint.id] = served.get(permit.endpoint.id, 0) + 1
        except ConnectionResetError:
            served["failed"] = served.get("failed", 0) + 1
    return served


def show(lb: poise.LoadBalancer, title: str) -> None:
    print(f"-- {title}")
    for e in lb.snapshot().endpoints:
        print(
            f"   {e.id}: {e.state.value:<9} epoch={e.epoch} successes={e.counters.successes}"
            f" faults={e.counters.faults[poise.Fault.SUSPECT]} ejections={e.counters.ejections}"
        )


async def main() -> None:
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint(i, address=f"10.0.0.{n}") for n, i in enumerate("abc", 1)]),
        policy=poise.RoundRobin(),
        seed=7,
    )
    async with lb:
        print("phase 1, b is broken:", await traffic(lb, 60))
        show(lb, "after phase 1: b ejected, a and c kept")
        await trio.sleep(40)  # virtual time: b's open window ends
        BROKEN.clear()
        print("phase 2, b recovered:", await traffic(lb, 60))
        show(lb, "after phase 2: b's probe succeeded, circuit closed at a new epoch")


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
