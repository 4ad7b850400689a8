"""grpc.aio in a process that runs one event loop per test.

grpc.aio delivers every completion through one process-wide queue, read by each event loop
that has used grpc. An event that arrives after its own loop has closed (a cancelled call's
last batch, a channel's final state change) is read by the next test's loop, which hands it
back with ``call_soon_threadsafe`` to the closed loop: ``RuntimeError: Event loop is closed``
raised in ``PollerCompletionQueue._handle_events``, and reported by the test runner as the
*next* test's failure. Nothing waits on such an event any more (its loop is gone), so
dropping it loses nothing; any other error still fails the test.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import AsyncIterator
from typing import Any

import pytest

POLLER = "PollerCompletionQueue._handle_events"


def stale_grpc_event(context: dict[str, Any]) -> bool:
    """Whether an asyncio error context is grpc handing an event back to a closed loop."""
    exc = context.get("exception")
    if not isinstance(exc, RuntimeError) or str(exc) != "Event loop is closed":
        return False
    return any(frame.f_code.co_name.endswith(POLLER) for frame, _ in traceback.walk_tb(exc.__traceback__))


@pytest.fixture
async def stale_grpc_events_dropped(
    anyio_backend: tuple[str, dict[str, Any]],
) -> AsyncIterator[list[dict[str, Any]]]:
    """On asyncio, this test's loop drops grpc's events for closed loops (see the module).

    The value is the list of the error contexts it dropped.
    """
    dropped: list[dict[str, Any]] = []
    if anyio_backend[0] != "asyncio":
        yield dropped
        return
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if stale_grpc_event(context):
            dropped.append(context)
            return
        if previous is None:
            loop.default_exception_handler(context)
        else:
            previous(loop, context)

    loop.set_exception_handler(handler)
    try:
        yield dropped
    finally:
        loop.set_exception_handler(previous)
