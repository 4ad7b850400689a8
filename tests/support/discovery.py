"""Helpers for the discovery tests: a tap that says when the balancer consumed an update."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

import anyio

import poise_py as poise


class Tap:
    """Wraps a discovery source; :meth:`wait` returns once the consumer has taken ``n`` updates.

    The consumer asks for update ``n + 1`` only after it has applied update ``n``, so
    ``await tap.wait(n)`` means "the balancer has applied (or rejected) ``n`` updates".
    """

    def __init__(self, source: AsyncIterable[poise.Update]) -> None:
        self.source = source
        self.consumed = 0
        self._changed = anyio.Event()

    def __aiter__(self) -> AsyncIterator[poise.Update]:
        return self._run()

    async def _run(self) -> AsyncIterator[poise.Update]:
        async for update in self.source:
            yield update
            self.consumed += 1
            self._changed.set()
            self._changed = anyio.Event()

    async def wait(self, n: int) -> None:
        while self.consumed < n:
            await self._changed.wait()


def live_ids(lb: poise.LoadBalancer) -> set[str]:
    """The ids in the balancer's pool."""
    return {e.id for e in lb.snapshot().endpoints}
