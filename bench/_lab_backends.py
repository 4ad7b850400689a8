"""The load lab's backends: real HTTP/1.1 servers that queue exactly as the simulator's endpoints do.

One child process (this file, run as a script by :meth:`Backends.spawn`) serves every endpoint
of a scenario on its own 127.0.0.1 port, with h11 on anyio (asyncio). Keeping them out
of the client's process means the client's CPU seconds are its own, and starting a fresh
process per configuration means one configuration's leftover queues never touch the next.

Each endpoint is the simulator's :class:`~poise_py.sim.EndpointModel` read from the
scenario and serves the way the engine's :class:`~poise_py.sim._station.Station` does:

- a request that finds its queue (calls waiting, not in service) at ``max_queue`` is
  answered at once with the endpoint's overload status (HTTP 503, or the scenario's own);
- otherwise it takes one of ``capacity_at(now)`` slots (the phase's capacity when the
  phase sets one; no limit for an endpoint without a capacity), or waits its turn in a
  FIFO queue; a slot is handed to the oldest waiting call the moment it frees, and a
  phase that raises the capacity starts waiting calls when it begins;
- it is then served for its service time, ``latency.draw(u) x latency_scale`` of the
  phase in force when it arrived (``anyio.sleep``: waiting costs no CPU), and answered
  200, or the phase's HTTP status for the share ``error_rate`` of calls (served for the
  phase's ``error_latency`` instead, when it sets one).

The two uniform draws of each attempt come in the request's ``x-lab-draw`` header (the
lab sends the simulator's own traffic stream, so both see the same service times); a
request without it draws its own. Time is wall-clock time since the configuration's
traffic started, which the client publishes before its first request. The server never
notices a client that gave up: it reads nothing while a call waits or is served, serves
an abandoned call when its turn comes, and ignores the failed write.

The child publishes, per endpoint, its calls in system (in service plus waiting) and the
longest its queue grew, in a small shared-memory file (:class:`Board`, an mmap) that the
client reads while it runs: the shortest-queue oracle routes by it and the report gives
the peaks.

Protocol with the parent: the argument is the board's path; stdin carries the pickled
endpoint models (an 8-byte length, then the bytes) and then stays open; the child writes
one JSON line ``{"ports": [...]}`` once every port listens, and exits when stdin closes.
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
import pickle
import random
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import h11
from anyio.abc import SocketAttribute
from anyio.lowlevel import EventLoopToken, current_token
from anyio.streams.buffered import BufferedByteReceiveStream

from poise_py import sim
from poise_py.sim import EndpointModel, HttpStatus, Overloaded

DRAW_HEADER = "x-lab-draw"
"""The request header carrying an attempt's two uniform draws: ``"<latency u> <error u>"``."""

_HEADER = struct.Struct("<dq")
_SLOT = struct.Struct("<qqqq")
_MAX_HEADER = 16_384
_STARTUP_TIMEOUT = 60.0
_STOP_TIMEOUT = 10.0
_SCRIPT = Path(__file__).resolve()


class Board:
    """Per-endpoint load figures shared between the backend process and the client (an mmap'd file).

    Layout: the traffic's start (a ``time.monotonic()`` reading, 0 until published) and
    the endpoint count, then for each endpoint its calls in system, its peak queue, the
    calls it served and those it shed (little-endian int64). The child is the only
    writer of the endpoint slots, the client the only writer of the start; aligned
    8-byte fields are read whole.
    """

    def __init__(self, path: Path, count: int | None = None) -> None:
        self.path = path
        if count is not None:
            path.write_bytes(_HEADER.pack(0.0, count) + bytes(_SLOT.size * count))
        with path.open("r+b") as file:
            self._map = mmap.mmap(file.fileno(), 0)
        _, self.count = _HEADER.unpack_from(self._map, 0)

    def close(self) -> None:
        """Unmap the file (the figures read so far stay valid)."""
        self._map.close()

    def publish_start(self, at: float) -> None:
        """The client's traffic starts at monotonic instant ``at``: the phases' time zero."""
        _HEADER.pack_into(self._map, 0, at, self.count)

    def elapsed(self) -> float:
        """Seconds of traffic so far (0 before the start is published)."""
        start: float = _HEADER.unpack_from(self._map, 0)[0]
        return max(0.0, time.monotonic() - start) if start else 0.0

    def publish(self, index: int, *, in_system: int, peak: int, served: int, shed: int) -> None:
        """Endpoint ``index``'s figures now."""
        _SLOT.pack_into(self._map, _HEADER.size + index * _SLOT.size, in_system, peak, served, shed)

    def in_system(self, index: int) -> int:
        """Endpoint ``index``'s calls in service plus waiting."""
        value: int = _SLOT.unpack_from(self._map, _HEADER.size + index * _SLOT.size)[0]
        return value

    def peak_queue(self, index: int) -> int:
        """The longest endpoint ``index``'s queue (calls waiting, not in service) has been."""
        value: int = _SLOT.unpack_from(self._map, _HEADER.size + index * _SLOT.size)[1]
        return value


class Station:
    """One endpoint's server side: ``capacity_at(now)`` slots and a FIFO queue, as the simulator's."""

    def __init__(self, index: int, model: EndpointModel, board: Board, rng: random.Random) -> None:
        self.index = index
        self.model = model
        self.board = board
        self.rng = rng
        self.busy = 0
        self.waiting: deque[anyio.Event] = deque()
        self.peak = self.served = self.shed = 0
        self.meter = sim.LoadMeter() if model.reports_load else None
        """What an ORCA server measures of itself (``reports_load``), as the simulator's endpoints do."""

    def _metered(self, now: float) -> None:
        if self.meter is not None:
            self.meter.busy(now, self.busy)

    def _capacity(self, now: float) -> float:
        capacity = self.model.capacity_at(now)
        return math.inf if capacity is None else capacity

    def _publish(self) -> None:
        self.board.publish(
            self.index, in_system=self.busy + len(self.waiting), peak=self.peak, served=self.served, shed=self.shed
        )

    def kick(self) -> None:
        """Hand free slots (a call's end, or a phase's larger capacity) to the oldest waiting calls."""
        capacity = self._capacity(self.board.elapsed())
        while self.waiting and self.busy < capacity:
            self.busy += 1
            self.waiting.popleft().set()
        self._metered(self.board.elapsed())
        self._publish()

    async def call(self, draws: tuple[float, float] | None) -> tuple[int, list[tuple[str, str]]]:
        """Serve one call arriving now; its status and extra headers."""
        model = self.model
        now = self.board.elapsed()
        u_latency, u_error = draws if draws is not None else (self.rng.random(), self.rng.random())
        phase = model.phase_at(now)
        service = model.latency.draw(u_latency) * phase.latency_scale
        error = phase.error if u_error < phase.error_rate else None
        if error is not None and phase.error_latency is not None:
            service = phase.error_latency  # a failed call's own time, as the simulator's model has it
        if self.busy < self._capacity(now) and not self.waiting:
            self.busy += 1
            self._metered(now)
            self._publish()
        elif model.max_queue is not None and len(self.waiting) >= model.max_queue:
            self.shed += 1
            self._publish()
            return _answer(model.overload)
        else:
            turn = anyio.Event()
            self.waiting.append(turn)
            self.peak = max(self.peak, len(self.waiting))
            self._publish()
            await turn.wait()  # kick() counted this call as busy when it handed over the slot
        try:
            await anyio.sleep(service)
        finally:
            self.busy -= 1
            self.served += 1
            self.kick()
        status, headers = (200, []) if error is None else _answer(error)
        meter = self.meter
        if meter is not None:  # the answer carries the server's load report, as the simulator's do
            end = self.board.elapsed()
            meter.answered(end, error=error is not None)
            report = meter.report(end, self._capacity(end))
            headers = [*headers, ("endpoint-load-metrics", report.to_text())]
        return status, headers

    async def follow_phases(self) -> None:
        """Start waiting calls at each phase start (a phase may raise the capacity)."""
        for point in self.model.change_points():
            if point > 0:
                # The traffic's start comes from the other process (the board): no event to wait on.
                while (left := point - self.board.elapsed()) > 0:  # noqa: ASYNC110
                    await anyio.sleep(left)
                self.kick()


def _answer(observation: object) -> tuple[int, list[tuple[str, str]]]:
    """The status and headers the client sees for an overload or an error observation."""
    extra: tuple[tuple[str, str], ...] = ()
    if isinstance(observation, Overloaded):
        status, retry_after = 503, observation.retry_after
    elif isinstance(observation, HttpStatus):
        status, retry_after, extra = observation.status, observation.retry_after, observation.headers
    else:  # the parent refuses these scenarios before any backend starts
        raise TypeError(f"the lab's backends answer HTTP statuses only, got {observation!r}")
    headers = list(extra)
    if retry_after is not None:
        headers.append(("retry-after", f"{retry_after:g}"))  # as the simulator writes it
    return status, headers


def _draws(request: h11.Request) -> tuple[float, float] | None:
    for name, value in request.headers:
        if name == DRAW_HEADER.encode():
            parts = value.split()
            if len(parts) == 2:
                try:
                    return float(parts[0]), float(parts[1])
                except ValueError:
                    return None
    return None


async def _next_event(stream: anyio.abc.SocketStream, conn: h11.Connection) -> object:
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                data = b""
            conn.receive_data(data)
            continue
        return event


async def _serve_connection(station: Station, stream: anyio.abc.SocketStream) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEADER)
    async with stream:
        while True:
            try:
                event = await _next_event(stream, conn)
                if not isinstance(event, h11.Request):
                    return
                while not isinstance(await _next_event(stream, conn), h11.EndOfMessage):
                    pass
            except h11.RemoteProtocolError:
                return
            status, headers = await station.call(_draws(event))
            body = b"ok" if status == 200 else f"{status}".encode()
            headers = [*headers, ("content-length", f"{len(body)}"), ("content-type", "text/plain")]
            parts = (h11.Response(status_code=status, headers=headers), h11.Data(data=body), h11.EndOfMessage())
            try:
                await stream.send(b"".join(conn.send(part) or b"" for part in parts))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                return  # the client gave up on this call: the work is done all the same
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()


async def _serve(models: Sequence[EndpointModel], board: Board) -> None:
    rng = random.Random()  # only for requests that bring no draws
    stations = [Station(i, model, board, rng) for i, model in enumerate(models)]
    async with anyio.create_task_group() as tg:
        ports = []
        for station in stations:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
            ports.append(listener.extra(SocketAttribute.local_port))  # noqa: S610 - anyio, not Django

            async def handler(stream: anyio.abc.SocketStream, station: Station = station) -> None:
                await _serve_connection(station, stream)

            tg.start_soon(listener.serve, handler)
            tg.start_soon(station.follow_phases)
        watcher = threading.Thread(target=_watch_stdin, args=(current_token(), tg.cancel_scope), daemon=True)
        watcher.start()
        print(json.dumps({"ports": ports}), flush=True)


def _watch_stdin(token: EventLoopToken, scope: anyio.CancelScope) -> None:
    """Stop serving when the parent closes stdin (or dies); a daemon thread."""
    sys.stdin.buffer.read()
    with contextlib.suppress(RuntimeError):  # the event loop has already ended
        anyio.from_thread.run_sync(scope.cancel, token=token)


def _raise_file_limit() -> None:
    """Every waiting call holds a socket: let the process hold as many as the system allows."""
    try:
        import resource
    except ImportError:  # not POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65_536), hard))


def main(argv: Sequence[str]) -> None:
    """The child process: serve the models read from stdin until stdin closes."""
    (size,) = struct.unpack("<Q", sys.stdin.buffer.read(8))
    models = pickle.loads(sys.stdin.buffer.read(size))  # noqa: S301 - our own parent's data
    _raise_file_limit()
    board = Board(Path(argv[0]))
    try:
        anyio.run(_serve, models, board)
    finally:
        board.close()


def _board_dir() -> str | None:
    """Shared memory when the system has it (/dev/shm), else the temporary directory."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None  # noqa: S108


class Backends:
    """One backend process serving a scenario's endpoints: spawned, then ready, then stopped.

    :meth:`spawn` starts the process and returns at once, so a lab can start every
    configuration's process together before any traffic (a process waiting for its turn
    only sleeps in ``epoll``) and each configuration still gets a process that has never
    served a call. :meth:`ready` waits for its ports; :meth:`stop` ends it (closing its
    stdin; killed if it lingers) and may be called more than once.
    """

    def __init__(self, process: anyio.abc.Process, board: Board, directory: tempfile.TemporaryDirectory[str]) -> None:
        self._process = process
        self._directory = directory
        self.board = board
        self.ports: tuple[int, ...] = ()
        self._stopped = False

    @classmethod
    async def spawn(cls, models: Sequence[EndpointModel]) -> Backends:
        """Start a process that will serve ``models`` (not waiting for it to listen)."""
        directory = tempfile.TemporaryDirectory(prefix="poise-loadlab-", dir=_board_dir())
        try:
            board = Board(Path(directory.name) / "board", len(models))
            command = [sys.executable, str(_SCRIPT), str(board.path)]
            process = await anyio.open_process(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None)
        except BaseException:
            directory.cleanup()
            raise
        backends = cls(process, board, directory)
        try:
            assert process.stdin is not None
            payload = pickle.dumps(tuple(models))
            await process.stdin.send(struct.pack("<Q", len(payload)) + payload)
        except BaseException:
            await backends.stop()
            raise
        return backends

    async def ready(self) -> Backends:
        """Wait until every endpoint listens; its ports are then in :attr:`ports` (in the models' order).

        Raises:
            RuntimeError: the process did not start (its stderr is the parent's).
        """
        stdout = self._process.stdout
        assert stdout is not None
        try:
            with anyio.fail_after(_STARTUP_TIMEOUT):
                line = await BufferedByteReceiveStream(stdout).receive_until(b"\n", 1 << 20)
        except (anyio.IncompleteRead, anyio.DelimiterNotFound, anyio.EndOfStream, TimeoutError) as exc:
            raise RuntimeError(f"the load lab's backend process did not start: {exc!r}") from None
        self.ports = tuple(json.loads(line)["ports"])
        return self

    async def stop(self) -> None:
        """End the process (its abandoned work with it) and remove its board."""
        if self._stopped:
            return
        self._stopped = True
        process = self._process
        with anyio.CancelScope(shield=True):
            if process.stdin is not None:
                await process.stdin.aclose()
            with anyio.move_on_after(_STOP_TIMEOUT):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()
        self.board.close()
        self._directory.cleanup()


@asynccontextmanager
async def backends(models: Sequence[EndpointModel]) -> AsyncIterator[Backends]:
    """A fresh backend process serving ``models``, listening, for the block; stopped after."""
    running = await Backends.spawn(models)
    try:
        yield await running.ready()
    finally:
        await running.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
