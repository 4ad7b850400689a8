"""Reading a balancer's events in tests."""

from __future__ import annotations

import poise_py as poise


async def drain(stream: poise.EventStream) -> list[poise.BalancerEvent]:
    """The events ``stream`` holds now, read through its public iterator (nothing waits)."""
    return [await anext(stream) for _ in range(stream.pending())]
