"""The static discovery source: one fixed list of endpoints."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import anyio

from .._core._updates import Snapshot, Update
from .._endpoint import Endpoint


class StaticDiscovery:
    """A fixed list of endpoints: one snapshot, applied as the balancer starts, never ending."""

    snapshot: Snapshot
    """The one snapshot it delivers."""

    def __init__(self, endpoints: Iterable[Endpoint]) -> None:
        """Deliver ``endpoints`` (a collection of :class:`Endpoint`; ConfigError otherwise)."""
        self.snapshot = Snapshot(1, endpoints)

    def __aiter__(self) -> AsyncIterator[Update]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[Update]:
        yield self.snapshot
        await anyio.sleep_forever()
