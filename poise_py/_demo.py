"""``poise demo``: real HTTP backends on loopback, injected faults, poise_py against naive round-robin.

Everything runs inside one Trio task group: the backends (a small h11 server per port),
the balancer, the client workers and the live view. Ctrl-C cancels the group and every
task ends with it.
"""

from __future__ import annotations

import functools
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import attrs
import h11
import httpx
import trio
from anyio.abc import SocketAttribute
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

import poise_py as poise
from poise_py.sim._engine import percentile

MAX_HEADER = 16_384


@attrs.define(eq=False)
class Backend:
    """One loopback HTTP server with an injected behaviour."""

    name: str
    behaviour: str
    rng: random.Random
    started: float = attrs.field(factory=time.monotonic)
    recent: list[float] = attrs.field(factory=list)
    port: int = 0
    hits: int = 0

    def respond(self) -> tuple[int, list[tuple[str, str]], float]:
        """(status, headers, delay seconds) for the next request."""
        self.hits += 1
        now = time.monotonic()
        if self.behaviour == "broken":
            return 500, [], 0.002
        if self.behaviour == "flapping":
            down = int((now - self.started) / 1.5) % 2 == 1  # 1.5 s up, 1.5 s down
            return (500 if down else 200), [], 0.003
        if self.behaviour == "slow":
            return 200, [], 0.060 + self.rng.random() * 0.04
        if self.behaviour == "rate-limited":
            self.recent = [t for t in self.recent if t > now - 1.0]
            if len(self.recent) >= 40:
                return 429, [("retry-after", "2")], 0.001
            self.recent.append(now)
        return 200, [], 0.002 + self.rng.random() * 0.004


async def _serve_connection(stream: anyio.abc.SocketStream, backend: Backend) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER)
    async with stream:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                try:
                    data = await stream.receive(65536)
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    return
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                status, headers, delay = backend.respond()
                await anyio.sleep(delay)
                body = f"{backend.name} {status}\n".encode()
                out = conn.send(
                    h11.Response(status_code=status, headers=[*headers, ("content-length", str(len(body)))])
                )
                out = (out or b"") + (conn.send(h11.Data(data=body)) or b"") + (conn.send(h11.EndOfMessage()) or b"")
                try:
                    await stream.send(out)
                except (anyio.BrokenResourceError, OSError):
                    return
            elif isinstance(event, h11.EndOfMessage):
                if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                    conn.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return


async def start_backend(tg: anyio.abc.TaskGroup, backend: Backend) -> None:
    """Listen on a free loopback port and serve ``backend`` in ``tg``."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    backend.port = listener.extra(SocketAttribute.local_port)  # noqa: S610 - anyio, not Django

    async def handle(stream: anyio.abc.SocketStream) -> None:
        await _serve_connection(stream, backend)

    async def serve() -> None:
        async with listener:
            await listener.serve(handle)

    tg.start_soon(serve)


BEHAVIOURS = [
    ("steady-1", "steady"),
    ("steady-2", "steady"),
    ("flapping", "flapping"),
    ("broken", "broken"),
    ("slow", "slow"),
    ("rate-limited", "rate-limited"),
]


@attrs.frozen(kw_only=True)
class RunSummary:
    """One configuration's demo run."""

    name: str
    requests: int
    successes: int
    p50: float | None
    p99: float | None
    ejections: int
    probes: int
    broken_hits: int
    seconds: float

    @property
    def success_rate(self) -> float:
        """Successful requests / requests."""
        return self.successes / self.requests if self.requests else 0.0


def _state_table(title: str, lb: poise.LoadBalancer, done: int, total: int) -> Table:
    table = Table(title=f"{title}: {done}/{total} requests")
    for col in ("endpoint", "state", "epoch", "in-flight", "successes", "faults", "ejections", "probes"):
        table.add_column(col, justify="left" if col in {"endpoint", "state"} else "right")
    colours = {
        "closed": "green",
        "half_open": "yellow",
        "open": "red",
        "blocked": "magenta",
        "retired": "grey50",
    }
    for e in lb.snapshot().endpoints:
        c = e.counters
        table.add_row(
            e.id,
            f"[{colours[e.state.value]}]{e.state.value}[/]",
            str(e.epoch),
            str(e.inflight),
            str(c.successes),
            str(sum(c.faults.values())),
            str(c.ejections),
            str(c.probes),
        )
    return table


async def _drive(
    name: str,
    lb: poise.LoadBalancer,
    backends: dict[str, Backend],
    requests: int,
    show: Callable[[Table], None] | None,
) -> RunSummary:
    latencies: list[float] = []
    successes = 0
    issued = 0
    start = time.monotonic()
    broken_before = backends["broken"].hits

    async with httpx.AsyncClient(timeout=httpx.Timeout(0.05, connect=0.2)) as client:

        async def fetch(endpoint: poise.Endpoint) -> None:
            response = await client.get(f"http://127.0.0.1:{endpoint.address}/")
            response.raise_for_status()

        async def worker() -> None:
            nonlocal successes, issued
            while issued < requests:
                issued += 1
                t0 = time.monotonic()
                try:
                    await lb.call(fetch, attempts=2)
                except (httpx.HTTPError, poise.SelectionError):
                    continue
                successes += 1
                latencies.append(time.monotonic() - t0)

        async with lb:
            async with anyio.create_task_group() as tg:
                for _ in range(16):
                    tg.start_soon(worker)
                while show is not None and issued < requests:
                    show(_state_table(name, lb, issued, requests))
                    await anyio.sleep(0.1)
            snap = lb.snapshot()
        if show is not None:
            show(_state_table(name, lb, requests, requests))
    latencies.sort()
    return RunSummary(
        name=name,
        requests=requests,
        successes=successes,
        p50=percentile(latencies, 0.5),
        p99=percentile(latencies, 0.99),
        ejections=sum(e.counters.ejections for e in snap.endpoints),
        probes=sum(e.counters.probes for e in snap.endpoints),
        broken_hits=backends["broken"].hits - broken_before,
        seconds=time.monotonic() - start,
    )


def _everything_transient(exc: BaseException) -> poise.Fault:
    return poise.Fault.TRANSIENT  # naive: retry elsewhere, learn nothing


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _summary_table(runs: list[RunSummary]) -> Table:
    table = Table(title="poise demo: the same traffic, two balancers")
    for col in ("balancer", "success", "p50", "p99", "ejections", "probes", "calls to 'broken'", "time"):
        table.add_column(col, justify="left" if col == "balancer" else "right")
    best = max(r.success_rate for r in runs)
    for r in runs:
        rate = f"{r.success_rate * 100:.1f}%"
        table.add_row(
            r.name,
            f"[bold green]{rate}[/]" if r.success_rate == best else rate,
            _ms(r.p50),
            _ms(r.p99),
            str(r.ejections),
            str(r.probes),
            str(r.broken_hits),
            f"{r.seconds:.1f} s",
        )
    return table


async def _main(requests: int, seed: int, console: Console, *, live: bool) -> list[RunSummary]:
    rng = random.Random(seed)  # noqa: S311 - fault injection, not security
    backends = {name: Backend(name, kind, random.Random(rng.random())) for name, kind in BEHAVIOURS}  # noqa: S311
    runs: list[RunSummary] = []
    async with anyio.create_task_group() as servers:
        for backend in backends.values():
            await start_backend(servers, backend)
        endpoints = [poise.Endpoint(b.name, address=b.port) for b in backends.values()]
        configs: list[tuple[str, dict[str, Any]]] = [
            (
                "poise_py",
                {
                    "policy": poise.PowerOfTwoChoices(),
                    "classifier": poise.classify.http(),
                    "circuit": poise.CircuitPolicy(
                        consecutive_failures=3, escalation=poise.Escalation(base=1.0, maximum=8.0)
                    ),
                },
            ),
            (
                "naive round-robin",
                {
                    "policy": poise.RoundRobin(),
                    "classifier": _everything_transient,
                    # naive: a run of TRANSIENT faults must not eject either
                    "circuit": poise.CircuitPolicy(consecutive_transient_failures=None),
                },
            ),
        ]
        for name, options in configs:
            lb = poise.LoadBalancer(poise.StaticDiscovery(endpoints), seed=seed, **options)
            if live and console.is_terminal:
                with Live(console=console, refresh_per_second=10, transient=False) as view:

                    def show(table: Table, view: Live = view) -> None:
                        view.update(Group(table))

                    runs.append(await _drive(name, lb, backends, requests, show))
            else:
                runs.append(await _drive(name, lb, backends, requests, None))
        servers.cancel_scope.cancel()
    return runs


def run_demo(*, requests: int = 3000, seed: int = 7, live: bool = True) -> int:
    """Run the demo; print the summary; 0 when poise_py came out ahead."""
    console = Console(width=None if sys.stdout.isatty() else 140)
    console.print(
        "[bold]poise demo[/]: 6 HTTP backends on 127.0.0.1 (2 steady, 1 flapping, 1 returning 500s,"
        " 1 slow, 1 rate-limited with Retry-After)"
    )
    runs = trio.run(functools.partial(_main, requests, seed, console, live=live))
    console.print(_summary_table(runs))
    ahead = runs[0].success_rate >= runs[1].success_rate
    console.print(
        f"poise_py served {runs[0].success_rate * 100:.1f}% vs {runs[1].success_rate * 100:.1f}% for naive"
        f" round-robin, and sent {runs[0].broken_hits} calls to the broken backend instead of {runs[1].broken_hits}."
    )
    return 0 if ahead else 1
