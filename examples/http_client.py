"""An HTTP client balanced over three local servers, on Trio, with httpx.

Run: ``python examples/http_client.py`` (needs ``pip install 'poise_py[httpx,trio]'``).

Three tiny HTTP servers start on 127.0.0.1: "alpha" is healthy, "bravo" answers 500 to
everything, "charlie" is rate-limited (429, Retry-After: 30). An ``httpx.AsyncClient``
from :func:`~poise_py.contrib.httpx.balanced_client` sends 60 requests; each may be
retried on another server. bravo is ejected after a few strikes, charlie is
skipped for its Retry-After without a strike, and every request gets an answer. The
balancer's events and counters are printed at the end.
"""

from __future__ import annotations

import logging

import trio

import poise_py as poise
from poise_py.contrib.httpx import balanced_client

FAULTS = {"alpha": None, "bravo": (500, None), "charlie": (429, "30")}


async def serve(name: str, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """A minimal HTTP/1.1 server: reads one request per connection, answers per FAULTS."""
    fault = FAULTS[name]

    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                data += chunk
            status, retry_after = fault or (200, None)
            body = f"{name} says {status}".encode()
            head = f"HTTP/1.1 {status} X\r\ncontent-length: {len(body)}\r\nconnection: close\r\n"
            if retry_after:
                head += f"retry-after: {retry_after}\r\n"
            await stream.send_all(head.encode() + b"\r\n" + body)

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


async def main() -> None:
    async with trio.open_nursery() as servers:
        ports = {name: await servers.start(serve, name) for name in FAULTS}
        endpoints = [poise.Endpoint(name, address=("127.0.0.1", port)) for name, port in ports.items()]
        lb = poise.LoadBalancer(
            poise.StaticDiscovery(endpoints),
            policy=poise.RoundRobin(),
            # Two of three may be out at once: charlie's Retry-After window counts too.
            circuit=poise.CircuitPolicy(consecutive_failures=3, minimum_volume=3, max_ejection_percent=0.67),
            seed=1,
        )
        events: list[str] = []
        lb.add_observer(lambda e: events.append(f"{type(e).__name__}({getattr(e, 'endpoint_id', '')})"))
        answered: dict[str, int] = {}
        async with lb, balanced_client(lb, "http://inventory.internal", attempts=3) as client:
            for i in range(60):
                response = await client.get(f"/items/{i}")
                answered[response.text] = answered.get(response.text, 0) + 1
            stats = lb.statistics()
            snapshot = lb.snapshot()
        servers.cancel_scope.cancel()

    print("answers:", dict(sorted(answered.items())))
    print("events:", ", ".join(dict.fromkeys(events)))
    for e in snapshot.endpoints:
        c = stats.endpoints[e.id]
        f = c.faults
        print(
            f"{e.id:<8} {e.state.value:<9} successes={c.successes:<3} suspect={f[poise.Fault.SUSPECT]:<2}"
            f" transient={f[poise.Fault.TRANSIENT]:<2} ejections={c.ejections}"
        )
    failed = sum(n for text, n in answered.items() if not text.endswith("200"))
    print(f"requests answered 200: {60 - failed}/60")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="log: %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is too many here
    trio.run(main)
