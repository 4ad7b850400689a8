"""``poise demo``: real HTTP backends on loopback, injected faults, poise_py against naive round-robin.

Everything runs inside one Trio task group: the backends (a small h11 server per port),
the balancer, the client workers and the live view. Ctrl-C cancels the group and every
task ends with it.
"""

from __future__ import annotations

import functools
import math
import random
import socket
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence

import anyio
import anyio.abc
import attrs
import h11
import httpx
import trio
from anyio.abc import SocketAttribute
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

import poise_py as poise
from poise_py._knobs import check_count
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


RUN_WORKERS = 16
"""Concurrent client tasks per run, all in this one process."""


@attrs.frozen(kw_only=True)
class RunSummary:
    """One configuration's demo run."""

    name: str
    learns: bool
    requests: int
    successes: int
    p50: float | None
    p99: float | None
    ejections: int
    readmissions: int
    probes: int
    broken_hits: int
    seconds: float

    @property
    def success_rate(self) -> float:
        """Successful requests / requests."""
        return self.successes / self.requests if self.requests else 0.0


@attrs.define(eq=False)
class EventLog:
    """The run's ejections and readmissions as they happen (a balancer observer)."""

    started: float = attrs.field(factory=time.monotonic)
    lines: deque[str] = attrs.field(factory=lambda: deque(maxlen=5))
    readmitted: Counter[str] = attrs.field(factory=Counter)
    ejected: Counter[str] = attrs.field(factory=Counter)

    def __call__(self, event: poise.BalancerEvent) -> None:
        """Observer: note ejections and readmissions (runs inside the balancer: no awaits)."""
        at = f"{time.monotonic() - self.started:5.1f} s"
        if isinstance(event, poise.EndpointReadmitted):
            self.readmitted[event.endpoint_id] += 1
            why = "probe succeeded" if event.cause is poise.Cause.PROBE_SUCCEEDED else _cause(event.cause)
            self.lines.append(f"{at}  [green]{event.endpoint_id} readmitted[/] ({why})")
        elif isinstance(event, poise.EndpointEjected):
            self.ejected[event.endpoint_id] += 1
            self.lines.append(f"{at}  [red]{event.endpoint_id} ejected[/] ({_cause(event.cause)})")

    def render(self) -> Text:
        """The last few lines, oldest first."""
        if not self.lines:
            return Text.from_markup("[dim]no ejections yet[/]")
        return Text.from_markup("\n".join(self.lines))


def _cause(cause: poise.Cause | None) -> str:
    return "health check" if cause is None else cause.value.replace("_", " ")


COLOURS = {
    "closed": "green",
    "half_open": "yellow",
    "open": "red",
    "blocked": "magenta",
    "retired": "grey50",
}


POISE_COLUMNS = ("endpoint", "state", "epoch", "in-flight", "ok", "faults", "ejected", "readmitted")
NAIVE_COLUMNS = ("endpoint", "in-flight", "ok", "errors", "share of calls")
"""Naive round-robin has no circuits worth showing, so only its traffic."""


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    """A compact table (single-space gutters) that keeps whole headers at 80 columns."""
    out = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )
    for col in columns:
        out.add_column(col, justify="left" if col in {"endpoint", "state", "balancer"} else "right", no_wrap=True)
    for row in rows:
        out.add_row(*row)
    return out


def _state_rows(lb: poise.LoadBalancer, log: EventLog, *, learns: bool) -> list[tuple[str, ...]]:
    snap = lb.snapshot()
    issued = sum(e.counters.issued for e in snap.endpoints) or 1
    rows: list[tuple[str, ...]] = []
    for e in snap.endpoints:
        c = e.counters
        faults = str(sum(c.faults.values()))
        if learns:
            state = e.state.value
            rows.append(
                (
                    e.id,
                    f"[{COLOURS[state]}]{state.replace('_', '-')}[/]",
                    str(e.epoch),
                    str(e.inflight),
                    str(c.successes),
                    faults,
                    str(log.ejected[e.id]),
                    str(log.readmitted[e.id]),
                )
            )
        else:
            rows.append((e.id, str(e.inflight), str(c.successes), faults, f"{c.issued / issued:.0%}"))
    return rows


def _live_view(title: str, lb: poise.LoadBalancer, log: EventLog, *, learns: bool) -> Group:
    rows = _state_rows(lb, log, learns=learns)
    state = table(title, POISE_COLUMNS if learns else NAIVE_COLUMNS, rows)
    if not learns:
        return Group(state, Text("(naive round-robin learns nothing: no circuits, no ejections)", style="dim"))
    return Group(state, Text("ejections and readmissions, newest last:", style="bold"), log.render())


async def _drive(
    name: str,
    lb: poise.LoadBalancer,
    backends: dict[str, Backend],
    requests: int,
    show: Callable[[Group], None] | None,
    *,
    learns: bool,
) -> RunSummary:
    latencies: list[float] = []
    successes = 0
    issued = 0
    broken_before = backends["broken"].hits
    log = EventLog()
    lb.add_observer(log)
    title = f"{name}: {{done}}/{requests} requests"

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
                    pass
                else:
                    successes += 1
                finally:
                    # Every request's time, failed ones too: what its caller waited.
                    latencies.append(time.monotonic() - t0)

        async with lb:
            async with anyio.create_task_group() as tg:
                for _ in range(RUN_WORKERS):
                    tg.start_soon(worker)
                while show is not None and issued < requests:
                    show(_live_view(title.format(done=issued), lb, log, learns=learns))
                    await anyio.sleep(0.1)
            snap = lb.snapshot()
        if show is not None:
            show(_live_view(title.format(done=requests), lb, log, learns=learns))
    lb.remove_observer(log)
    latencies.sort()
    return RunSummary(
        name=name,
        learns=learns,
        requests=requests,
        successes=successes,
        p50=percentile(latencies, 0.5),
        p99=percentile(latencies, 0.99),
        ejections=sum(log.ejected.values()),  # times an endpoint left rotation, as the live view counts
        readmissions=sum(log.readmitted.values()),
        probes=sum(e.counters.probes for e in snap.endpoints),
        broken_hits=backends["broken"].hits - broken_before,
        seconds=time.monotonic() - log.started,
    )


def _everything_transient(exc: BaseException) -> poise.Fault:
    return poise.Fault.TRANSIENT  # naive: retry elsewhere, learn nothing


def _percent(rate: float) -> str:
    """One decimal, rounded down: 2999 of 3000 is 99.9%, never 100.0%."""
    return f"{math.floor(rate * 1000) / 10:.1f}%"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.1f} ms" if seconds < 1.0 else f"{seconds:.2f} s"


def summary_table(runs: list[RunSummary]) -> Table:
    """The two runs side by side; what does not apply to naive round-robin is a dash."""
    best = max(r.success_rate for r in runs)
    rows = [
        (
            r.name,
            f"[bold green]{_percent(r.success_rate)}[/]" if r.success_rate == best else _percent(r.success_rate),
            _ms(r.p50),
            _ms(r.p99),
            str(r.ejections) if r.learns else "-",
            str(r.readmissions) if r.learns else "-",
            str(r.broken_hits),
        )
        for r in runs
    ]
    columns = ("balancer", "success", "p50", "p99", "ejected", "readmitted", "to broken")
    return table("the same traffic, two balancers", columns, rows)


LATENCY_NOTE = (
    "p50/p99: every request's time, failed ones included. Most of it is this process's own"
    " queueing ({workers} concurrent clients and 6 servers share one event loop), so it moves by"
    " several ms between runs; naive round-robin's quick failures (a 500 takes 2 ms) pull its p50"
    " down. Success and calls to the broken backend are the balancers' own doing."
)


def build_balancers(endpoints: list[poise.Endpoint], seed: int) -> list[tuple[str, poise.LoadBalancer, bool]]:
    """(name, balancer, learns) for poise_py and for naive round-robin."""
    return [
        (
            "poise_py",
            poise.LoadBalancer(
                poise.StaticDiscovery(endpoints),
                seed=seed,
                policy=poise.PowerOfTwoChoices(),
                classifier=poise.classify.http(),
                circuit=poise.CircuitPolicy(consecutive_failures=3, escalation=poise.Escalation(base=1.0, maximum=8.0)),
            ),
            True,
        ),
        (
            "naive round-robin",
            poise.LoadBalancer(
                poise.StaticDiscovery(endpoints),
                seed=seed,
                policy=poise.RoundRobin(),
                classifier=_everything_transient,
                # naive: a run of TRANSIENT faults must not eject either
                circuit=poise.CircuitPolicy(consecutive_transient_failures=None),
            ),
            False,
        ),
    ]


async def _main(requests: int, seed: int, console: Console, *, live: bool, web: int | None) -> list[RunSummary]:
    rng = random.Random(seed)  # noqa: S311 - fault injection, not security
    backends = {name: Backend(name, kind, random.Random(rng.random())) for name, kind in BEHAVIOURS}  # noqa: S311
    runs: list[RunSummary] = []
    async with anyio.create_task_group() as servers:
        for backend in backends.values():
            await start_backend(servers, backend)
        endpoints = [poise.Endpoint(b.name, address=b.port) for b in backends.values()]
        balancers = build_balancers(endpoints, seed)
        if web is not None:
            from .contrib.status import StatusApp, serve  # noqa: PLC0415 - only with --web

            app = StatusApp({name: lb for name, lb, _ in balancers}, title="poise demo", poll_interval=0.5)
            port = await servers.start(serve, app, web)
            console.print(f"status page: [bold]http://127.0.0.1:{port}/[/] (while the demo runs)")
        for name, lb, learns in balancers:
            if live and console.is_terminal:
                with Live(console=console, refresh_per_second=10, transient=False) as view:

                    def show(group: Group, view: Live = view) -> None:
                        view.update(group)

                    runs.append(await _drive(name, lb, backends, requests, show, learns=learns))
            else:
                runs.append(await _drive(name, lb, backends, requests, None, learns=learns))
        servers.cancel_scope.cancel()
    return runs


def _port_problem(port: int) -> str | None:
    """Why 127.0.0.1:port cannot be listened on (as the status server will), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            probe.listen()
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def run_demo(*, requests: int = 3000, seed: int = 7, live: bool = True, web: int | None = None) -> int:
    """Run the demo; print the summary; 0 when poise_py came out ahead (2: the web port is taken).

    Raises:
        ConfigError: ``requests`` is not an int >= 1.
    """
    check_count("requests", requests)
    if web:
        problem = _port_problem(web)
        if problem is not None:
            print(f"poise demo: cannot serve the status page on 127.0.0.1:{web}: {problem}", file=sys.stderr)
            return 2
    console = Console(width=None if sys.stdout.isatty() else 100)
    console.print(
        "[bold]poise demo[/]: 6 HTTP backends on 127.0.0.1: 2 steady, 1 flapping, 1 returning 500s,"
        " 1 slow, 1 rate-limited with Retry-After"
    )
    # Ctrl-C lands at a checkpoint, so the task groups unwind as a cancellation and every
    # stream and generator in flight is closed before the run ends (no late finalizers).
    runs = trio.run(
        functools.partial(_main, requests, seed, console, live=live, web=web),
        restrict_keyboard_interrupt_to_checkpoints=True,
    )
    report(runs, console)
    return 0 if runs[0].success_rate >= runs[1].success_rate else 1


def report(runs: list[RunSummary], console: Console) -> None:
    """The summary table and what it means."""
    console.print(summary_table(runs))
    console.print(
        f"poise_py served {_percent(runs[0].success_rate)} vs {_percent(runs[1].success_rate)} for naive"
        f" round-robin, and sent {runs[0].broken_hits} calls to the broken backend instead of {runs[1].broken_hits}."
    )
    console.print(LATENCY_NOTE.format(workers=RUN_WORKERS), style="dim")
