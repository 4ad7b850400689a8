"""``poise demo``: real HTTP backends on loopback, injected faults, poise_py against naive round-robin.

Everything runs inside one Trio task group: the backends (a small h11 server per port),
both balancers, the traffic, the live view and, with ``--web``, the status page. The two
balancers run at the same time over the same backends: one pacer sends request ``i`` to
each of them at the same instant, ``RATE`` a second. Each balancer has its own HTTP
clients, and the backends keep each client's rate limit and call counts apart, so neither
balancer spends the other's quota. Ctrl-C cancels the group and every task ends with it.

The backends and the clients share one event loop, so the clients' timeout also counts
this process's own delays. The first demo drove 16 workers per balancer as fast as the
loop went: the loop was saturated, calls queued for 20-25 ms at the median and over 100 ms
at the tail, and the steady backends' 2-6 ms answers timed out against a 50 ms timeout
(SUSPECT faults, trips refused by the ejection guard: EndpointDegraded). Now the traffic
is paced, the timeout leaves ``CLIENT_TIMEOUT`` of slack, full garbage collections (up to
45 ms each) are kept off the setup's objects, and the loop's lag is measured: if a steady
backend still shows faults, the summary and the page say how far the process fell behind.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import os
import random
import socket
import ssl
import sys
import time
import webbrowser
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence

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
CLIENT_HEADER = "x-poise-demo-client"
"""The header naming the balancer a request came through; the backends keep each one's counts."""

RATE = 200
"""Requests a second sent to each balancer, on one schedule for both."""
CLIENT_TIMEOUT = 0.2
"""The clients' read timeout: the slow backend's answers miss it, a steady backend's would
need this process to stall for about 200 ms to."""
SLOW_ANSWER = (0.25, 0.35)
"""The slow backend's answers take between these many seconds."""
IN_FLIGHT = 32
"""Requests in flight per balancer at most: past it the schedule waits (a starved process
catches up without piling up requests that would all time out)."""
RATE_LIMIT = 20
"""Requests a second the rate-limited backend serves each client; past it, 429 with Retry-After."""
STEADY_ANSWER = "2-6 ms"
"""What a steady backend takes to answer (see :meth:`Backend.respond`)."""
SHOW_EVERY = 0.25
"""Seconds between redraws of the terminal's live view."""


@attrs.define(eq=False)
class Backend:
    """One loopback HTTP server with an injected behaviour, keeping each client's counts apart."""

    name: str
    behaviour: str
    rng: random.Random
    clock: Callable[[], float] = time.monotonic
    started: float = attrs.field(default=attrs.Factory(lambda self: self.clock(), takes_self=True))
    port: int = 0
    hits: Counter[str] = attrs.field(factory=Counter)
    recent: dict[str, deque[float]] = attrs.field(factory=dict)

    def respond(self, client: str) -> tuple[int, list[tuple[str, str]], float]:
        """(status, headers, delay seconds) for ``client``'s next request."""
        self.hits[client] += 1
        now = self.clock()
        if self.behaviour == "broken":
            return 500, [], 0.002
        if self.behaviour == "flapping":
            down = int((now - self.started) / 1.5) % 2 == 1  # 1.5 s up, 1.5 s down
            return (500 if down else 200), [], 0.003
        if self.behaviour == "slow":
            low, high = SLOW_ANSWER
            return 200, [], low + self.rng.random() * (high - low)
        if self.behaviour == "rate-limited":
            recent = self.recent.setdefault(client, deque())
            while recent and recent[0] <= now - 1.0:
                recent.popleft()
            if len(recent) >= RATE_LIMIT:
                return 429, [("retry-after", "2")], 0.001
            recent.append(now)
        return 200, [], 0.002 + self.rng.random() * 0.004


def _client_of(request: h11.Request) -> str:
    return next((v.decode("latin-1") for k, v in request.headers if k == CLIENT_HEADER.encode()), "")


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
                status, headers, delay = backend.respond(_client_of(event))
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
STEADY = tuple(name for name, kind in BEHAVIOURS if kind == "steady")


@attrs.frozen(kw_only=True)
class RunSummary:
    """One balancer's side of the demo."""

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
    lines: deque[str] = attrs.field(factory=lambda: deque(maxlen=4))
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


@attrs.define(eq=False)
class LoopLag:
    """How far this process's event loop falls behind: a task that sleeps and measures the overshoot."""

    interval: float = 0.01
    worst: float = 0.0

    async def run(self) -> None:
        """Measure until cancelled."""
        while True:
            before = anyio.current_time()
            await anyio.sleep(self.interval)
            self.worst = max(self.worst, anyio.current_time() - before - self.interval)


@attrs.define(eq=False)
class Run:
    """One balancer's side of the run, counted as it goes."""

    name: str
    lb: poise.LoadBalancer
    learns: bool
    client: str
    log: EventLog = attrs.field(factory=EventLog)
    issued: int = 0
    done: int = 0
    successes: int = 0
    latencies: list[float] = attrs.field(factory=list)
    steady_errors: Counter[str] = attrs.field(factory=Counter)
    """What the calls to the steady backends raised, by exception type."""

    async def request(self, http: dict[str, httpx.AsyncClient], at: float) -> None:
        """One request through this balancer, sent at ``at`` (the loop's clock).

        ``http``: the balancer's HTTP client for each endpoint id.
        """

        async def fetch(endpoint: poise.Endpoint) -> None:
            try:
                host, port = endpoint.address
                response = await http[endpoint.id].get(f"http://{host}:{port}/")
                response.raise_for_status()
            except httpx.HTTPError as exc:
                if endpoint.id in STEADY:
                    self.steady_errors[type(exc).__name__] += 1
                raise

        try:
            await self.lb.call(fetch, attempts=2)
        except (httpx.HTTPError, poise.SelectionError):
            pass
        else:
            self.successes += 1
        finally:
            # From when it was sent, failed ones too: what its caller waited.
            self.latencies.append(anyio.current_time() - at)
            self.done += 1

    def steady_faults(self) -> int:
        """Faults the balancer recorded on the steady backends."""
        return sum(sum(e.counters.faults.values()) for e in self.lb.snapshot().endpoints if e.id in STEADY)

    def summary(self, backends: dict[str, Backend], seconds: float) -> RunSummary:
        """The run's figures."""
        latencies = sorted(self.latencies)
        return RunSummary(
            name=self.name,
            learns=self.learns,
            requests=self.done,
            successes=self.successes,
            p50=percentile(latencies, 0.5),
            p99=percentile(latencies, 0.99),
            ejections=sum(self.log.ejected.values()),  # times an endpoint left rotation, as the live view counts
            readmissions=sum(self.log.readmitted.values()),
            probes=sum(e.counters.probes for e in self.lb.snapshot().endpoints),
            broken_hits=backends["broken"].hits[self.client],
            seconds=seconds,
        )


@attrs.define(eq=False)
class Comparison:
    """The running comparison: what the terminal and the status page show above the balancers."""

    runs: list[Run]
    requests: int
    backends: dict[str, Backend]
    lag: LoopLag
    _final: list[tuple[str, str]] | None = attrs.field(init=False, default=None)

    def rows(self) -> list[tuple[str, str]]:
        """(label, text) rows: the traffic, success so far, calls to the broken backend, latency, steady.

        Once :meth:`finish` has run they are the final figures, and stay as they are.
        """
        if self._final is not None:
            return self._final
        ours = self.runs[0]
        return [
            ("traffic", f"{ours.issued}/{self.requests} requests to each balancer, {RATE} a second, the same schedule"),
            *self._figures(),
        ]

    def finish(self, seconds: float) -> None:
        """The traffic has ended after ``seconds``: freeze the rows, saying so."""
        ended = (
            "run ended",
            f"{self.runs[0].done} requests to each balancer in {seconds:.1f} s; final figures, served until Ctrl-C",
        )
        self._final = [ended, *self._figures()]

    def _figures(self) -> list[tuple[str, str]]:
        return [
            ("success", self._both(lambda r: _percent(r.successes / r.done) if r.done else "-")),
            ("calls to the broken backend", self._both(lambda r: str(self.backends["broken"].hits[r.client]))),
            ("p50 / p99", self._both(lambda r: _latencies(r.latencies))),
            ("steady backends", self.steady()),
        ]

    def _both(self, figure: Callable[[Run], str]) -> str:
        return " · ".join(f"{r.name} {figure(r)}" for r in self.runs)

    def steady(self) -> str:
        """What the steady backends went through with both balancers, and why, if it was not nothing."""
        faults = [(r, r.steady_faults()) for r in self.runs]
        if not any(n for _, n in faults):
            return f"no faults with either balancer (each answers in {STEADY_ANSWER})"
        errors: Counter[str] = sum((r.steady_errors for r in self.runs), Counter())
        kinds = ", ".join(f"{n} {kind}" for kind, n in errors.most_common())
        counts = ", ".join(f"{r.name} {n}" for r, n in faults)
        lag = f"this process's event loop fell up to {self.lag.worst * 1000:.0f} ms behind"
        if set(errors) <= _TIMEOUTS:
            why = (
                f"{lag}, and the clients' {CLIENT_TIMEOUT * 1000:.0f} ms timeout counts that delay too:"
                f" the backends answer in {STEADY_ANSWER}"
            )
        else:
            why = lag
        return f"faults: {counts} ({kinds}); {why}"


_TIMEOUTS = frozenset({"ReadTimeout", "WriteTimeout", "PoolTimeout", "ConnectTimeout"})


def _latencies(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    return f"{_ms(percentile(ordered, 0.5))} / {_ms(percentile(ordered, 0.99))}"


COLOURS = {
    "closed": "green",
    "half_open": "yellow",
    "open": "red",
    "blocked": "magenta",
    "retired": "grey50",
}


LIVE_COLUMNS = ("endpoint", "state", "ok", "faults", "ejected", "readmitted", "naive\nok", "naive\nerrors")
"""poise_py's circuits and traffic, then naive round-robin's traffic: it has no circuits worth showing
(its two headers take two lines, so that whole headers fit 80 columns)."""


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


def _live_rows(ours: Run, naive: Run) -> list[tuple[str, ...]]:
    theirs = {e.id: e.counters for e in naive.lb.snapshot().endpoints}
    rows: list[tuple[str, ...]] = []
    for e in ours.lb.snapshot().endpoints:
        c = e.counters
        state = e.state.value
        other = theirs.get(e.id)
        rows.append(
            (
                e.id,
                f"[{COLOURS[state]}]{state.replace('_', '-')}[/]",
                str(c.successes),
                str(sum(c.faults.values())),
                str(ours.log.ejected[e.id]),
                str(ours.log.readmitted[e.id]),
                "-" if other is None else str(other.successes),
                "-" if other is None else str(sum(other.faults.values())),
            )
        )
    return rows


def live_view(comparison: Comparison) -> Group:
    """The terminal's live view: both balancers per endpoint, the comparison, the last ejections."""
    ours, naive = comparison.runs
    title = f"poise_py and naive round-robin: {ours.issued}/{comparison.requests} requests each"
    rows = [Text.from_markup(f"[bold]{label}[/]: {text}") for label, text in comparison.rows()[1:]]
    return Group(
        table(title, LIVE_COLUMNS, _live_rows(ours, naive)),
        *rows,
        Text("poise_py's ejections and readmissions, newest last:", style="bold"),
        ours.log.render(),
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
    "p50/p99: every request's time, failed ones included; the backends and both clients share"
    " this one event loop, so its own queueing is part of it and moves by a few ms between runs."
    " Naive round-robin's quick failures (a 500 takes 2 ms) pull its p50 down. Success and calls"
    " to the broken backend are the balancers' own doing."
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


async def _traffic(runs: list[Run], requests: int, show: Callable[[], None] | None) -> None:
    """Send request ``i`` to every balancer at ``start + i / RATE`` and wait for the answers.

    A balancer with ``IN_FLIGHT`` requests unanswered holds the schedule up for both.

    Each balancer gets an HTTP client per endpoint, as a service would have a connection
    pool per upstream: httpx scans every connection of a pool on each request, and one
    pool shared by six backends' connections cost the demo more CPU than everything else.
    """
    timeout = httpx.Timeout(CLIENT_TIMEOUT, connect=0.2)
    tls = ssl.create_default_context()  # unused (plain HTTP), but each client would load its own
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            {
                name: await stack.enter_async_context(
                    httpx.AsyncClient(timeout=timeout, headers={CLIENT_HEADER: run.client}, verify=tls)
                )
                for name, _ in BEHAVIOURS
            }
            for run in runs
        ]
        tg = await stack.enter_async_context(anyio.create_task_group())
        slots = [anyio.Semaphore(IN_FLIGHT) for _ in runs]
        start = anyio.current_time()
        shown_at = -math.inf
        for i in range(requests):
            await anyio.sleep_until(start + i / RATE)
            for slot in slots:
                await slot.acquire()
            sent = anyio.current_time()
            for run, http, slot in zip(runs, clients, slots, strict=True):
                run.issued += 1
                tg.start_soon(_released, slot, run.request(http, sent))
            if show is not None and sent - shown_at >= SHOW_EVERY:
                shown_at = sent
                show()


async def _released(slot: anyio.Semaphore, request: Awaitable[None]) -> None:
    try:
        await request
    finally:
        slot.release()


async def _open_browser(url: str) -> str:
    """Open ``url`` in the user's browser; what to say about it.

    In a thread: some browsers' launchers wait for the browser.
    """
    if not _has_display():
        return "no graphical display here: open it in a browser"
    opened = await anyio.to_thread.run_sync(webbrowser.open, url, abandon_on_cancel=True)
    return "opened in your browser" if opened else "no browser could be started: open it yourself"


Browse = Callable[[str], Awaitable[str]]
"""Opens the status page's address once it serves, before the traffic; returns what to say about it."""


def _has_display() -> bool:
    """Whether a graphical browser can open here.

    Without a display, ``webbrowser`` picks a text browser that would take over this terminal.
    """
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


Linger = Callable[[], Awaitable[None]]
"""What ``--web`` does once the traffic has ended and the summary is printed."""


async def _until_ctrl_c() -> None:
    await anyio.sleep_forever()


async def _main(
    requests: int,
    seed: int,
    console: Console,
    *,
    live: bool,
    web: int | None,
    browse: Browse | None,
    linger: Linger,
) -> list[RunSummary]:
    """Run both balancers on the same traffic; print the report; with ``web``, serve the page until ``linger`` returns.

    ``browse`` is called with the page's address once it serves, before the traffic starts
    (None: do not open it).
    """
    rng = random.Random(seed)  # noqa: S311 - fault injection, not security
    backends = {name: Backend(name, kind, random.Random(rng.random())) for name, kind in BEHAVIOURS}  # noqa: S311
    async with anyio.create_task_group() as servers:
        for backend in backends.values():
            await start_backend(servers, backend)
        endpoints = [poise.Endpoint(b.name, address=("127.0.0.1", b.port)) for b in backends.values()]
        runs = [
            Run(name, lb, learns, client="poise_py" if learns else "naive")
            for name, lb, learns in build_balancers(endpoints, seed)
        ]
        comparison = Comparison(runs, requests, backends, LoopLag())
        for run in runs:
            run.lb.add_observer(run.log)
        async with runs[0].lb, runs[1].lb:
            url = None if web is None else await _serve_page(servers, comparison, web, console, browse)
            started = anyio.current_time()
            # What the imports and the setup made lives to the end: out of the collector's
            # way, a full collection takes a few ms instead of up to 45 ms, a stall that
            # counts against every call in flight.
            gc.freeze()
            try:
                async with anyio.create_task_group() as watch:
                    watch.start_soon(comparison.lag.run)
                    if live and console.is_terminal:
                        with Live(console=console, auto_refresh=False, transient=False) as view:

                            def show() -> None:
                                view.update(live_view(comparison), refresh=True)

                            await _traffic(runs, requests, show)
                            show()
                    else:
                        await _traffic(runs, requests, None)
                    watch.cancel_scope.cancel()
            finally:
                gc.unfreeze()
            seconds = anyio.current_time() - started
            comparison.finish(seconds)
        for run in runs:
            run.lb.remove_observer(run.log)
        summaries = [run.summary(backends, seconds) for run in runs]
        report(summaries, console, steady=comparison.steady())
        if url is not None:
            console.print(
                f"the run has ended; the status page keeps serving the final figures at [bold]{url}[/] until Ctrl-C"
            )
            await linger()
        servers.cancel_scope.cancel()
    return summaries


async def _serve_page(
    tg: anyio.abc.TaskGroup,
    comparison: Comparison,
    port: int,
    console: Console,
    browse: Browse | None,
) -> str:
    """Serve the status page of both balancers in ``tg``, say where, and open it; its address."""
    from .contrib.status import StatusApp, serve  # noqa: PLC0415 - only with --web

    app = StatusApp(
        {run.name: run.lb for run in comparison.runs},
        title="poise demo: poise_py and naive round-robin, the same traffic",
        poll_interval=0.5,
        headline=comparison.rows,
    )
    url = f"http://127.0.0.1:{await tg.start(serve, app, port)}/"
    note = "" if browse is None else f" ({await browse(url)})"
    console.print(f"status page: [bold]{url}[/]{note}")
    return url


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


def run_demo(
    *, requests: int = 3000, seed: int = 7, live: bool = True, web: int | None = None, browser: bool = True
) -> int:
    """Run the demo; print the summary; 0 when poise_py came out ahead (2: the web port is taken).

    With ``web``, the status page keeps serving after the summary until Ctrl-C
    (KeyboardInterrupt); ``browser`` opens it in the user's browser.

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
        f" 1 slow, 1 rate-limited with Retry-After; poise_py and naive round-robin each get {RATE} requests"
        " a second, on the same schedule"
    )
    # Ctrl-C lands at a checkpoint, so the task groups unwind as a cancellation and every
    # stream and generator in flight is closed before the run ends (no late finalizers).
    runs = trio.run(
        functools.partial(
            _main,
            requests,
            seed,
            console,
            live=live,
            web=web,
            browse=_open_browser if browser else None,
            linger=_until_ctrl_c,
        ),
        restrict_keyboard_interrupt_to_checkpoints=True,
    )
    return 0 if runs[0].success_rate >= runs[1].success_rate else 1


def report(runs: list[RunSummary], console: Console, *, steady: str | None = None) -> None:
    """The summary table and what it means (``steady``: what the steady backends went through)."""
    console.print(summary_table(runs))
    console.print(
        f"poise_py served {_percent(runs[0].success_rate)} vs {_percent(runs[1].success_rate)} for naive"
        f" round-robin, and sent {runs[0].broken_hits} calls to the broken backend instead of {runs[1].broken_hits}."
    )
    if steady is not None:
        console.print(f"{' and '.join(STEADY)}: {steady}")
    console.print(LATENCY_NOTE, style="dim")
