"""What the per-call benches time: ``async with lb.acquire(): pass`` on a plain RoundRobin pool."""

from __future__ import annotations

from typing import Any

import poise_py as poise


def make_lb(size: int = 10, **options: Any) -> poise.LoadBalancer:
    """A RoundRobin balancer (seed 1) of ``size`` endpoints on 127.0.0.1, ports 10000 up; ``options``: more of its arguments."""
    eps = [poise.Endpoint(f"e{i}", address=("127.0.0.1", 10000 + i)) for i in range(size)]
    return poise.LoadBalancer(poise.StaticDiscovery(eps), policy=poise.RoundRobin(), seed=1, **options)


async def acquire_loop(lb: poise.LoadBalancer, n: int) -> None:
    """``n`` calls of ``async with lb.acquire(): pass``: the body the benches time on ``lb``."""
    acquire = lb.acquire
    for _ in range(n):
        async with acquire():
            pass
