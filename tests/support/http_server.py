"""A small HTTP/1.1 server on anyio + h11 that injects faults, for tests on 127.0.0.1.

Each :class:`FaultServer` answers every request according to its ``fault`` (changeable
while it runs): None -> 200 with a body naming the server; ``"500"``, ``"401"``...
-> that status; ``"429:7"`` -> 429 with ``Retry-After: 7``; ``"reset"`` -> the connection
is reset (RST) before any response; ``"reset-body"`` -> headers and part of the body,
then a reset; ``"slow"`` -> no answer until :attr:`FaultServer.release` is set. It runs on
Trio and asyncio (anyio), so the same tests cover both backends.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import attrs
import h11
from anyio.abc import SocketAttribute


@attrs.define(eq=False)
class FaultServer:
    """One server: its name, its injected fault, what it saw."""

    name: str
    fault: str | None = None
    port: int = 0
    requests: list[h11.Request] = attrs.field(factory=list)
    arrived: anyio.Event = attrs.field(factory=anyio.Event)
    """Set when a request arrives (for ``slow``: the request is being held)."""
    release: anyio.Event = attrs.field(factory=anyio.Event)
    """Set it to let ``slow`` requests answer."""

    @property
    def address(self) -> tuple[str, int]:
        """Where it listens."""
        return ("127.0.0.1", self.port)

    @property
    def hits(self) -> int:
        """How many requests it received."""
        return len(self.requests)


async def _reset(stream: anyio.abc.SocketStream) -> None:
    sock = stream.extra(SocketAttribute.raw_socket)  # noqa: S610 - anyio, not Django
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


async def _send(stream: anyio.abc.SocketStream, conn: h11.Connection, *events: h11.Event) -> None:
    for event in events:
        data = conn.send(event)
        if data:
            await stream.send(data)


async def _next_event(stream: anyio.abc.SocketStream, conn: h11.Connection) -> object:
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                data = b""
            conn.receive_data(data)
            continue
        return event


async def _handle(server: FaultServer, stream: anyio.abc.SocketStream) -> None:
    conn = h11.Connection(h11.SERVER)
    async with stream:
        while True:
            event = await _next_event(stream, conn)
            if not isinstance(event, h11.Request):
                return
            server.requests.append(event)
            while not isinstance(await _next_event(stream, conn), h11.EndOfMessage):
                pass
            server.arrived.set()
            fault = server.fault
            if fault == "slow":
                await server.release.wait()
                fault = None
            if fault == "reset":
                await _reset(stream)
                return
            if fault == "reset-body":
                headers = [("content-length", "1000"), ("content-type", "text/plain")]
                await _send(stream, conn, h11.Response(status_code=200, headers=headers), h11.Data(data=b"x" * 10))
                await _reset(stream)
                return
            status, retry_after = 200, None
            if fault is not None:
                code, _, retry_after = fault.partition(":")
                status = int(code)
            body = f"{server.name}:{status}".encode()
            headers = [("content-length", str(len(body))), ("content-type", "text/plain")]
            if retry_after:
                headers.append(("retry-after", retry_after))
            await _send(
                stream,
                conn,
                h11.Response(status_code=status, headers=headers),
                h11.Data(data=body),
                h11.EndOfMessage(),
            )
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()


@asynccontextmanager
async def fault_servers(*names: str) -> AsyncIterator[list[FaultServer]]:
    """Run one :class:`FaultServer` per name on 127.0.0.1 for the block's duration."""
    servers = [FaultServer(name) for name in names]
    async with anyio.create_task_group() as tg:
        for server in servers:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
            server.port = listener.extra(SocketAttribute.local_port)  # noqa: S610 - anyio, not Django

            async def serve(listener: anyio.abc.Listener[anyio.abc.SocketStream], server: FaultServer = server) -> None:
                async def handler(stream: anyio.abc.SocketStream) -> None:
                    await _handle(server, stream)

                async with listener:
                    await listener.serve(handler)

            tg.start_soon(serve, listener)
        try:
            yield servers
        finally:
            tg.cancel_scope.cancel()
