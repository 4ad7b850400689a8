"""FileDiscovery never blocks: a path that is not a regular file is refused unread, and a hung
read never keeps ``async with lb`` (nor the process) from ending.

Each test bounds its wait in real time: on a FileDiscovery that did block, it fails after a few
seconds instead of hanging the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

import poise_py as poise

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def writer_after(path: Path, seconds: float) -> Iterator[None]:
    """Open ``path`` (a FIFO) for writing and close it every ``seconds`` of real time.

    A reader blocked opening the FIFO then reads its end: a bounded wait for a
    FileDiscovery that would block, never a hung test.
    """
    stop = threading.Event()

    def unblock() -> None:
        give_up = time.monotonic() + seconds
        while not stop.wait(0.05):
            if time.monotonic() >= give_up:
                try:
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    continue  # no reader yet (ENXIO): try again
                give_up = time.monotonic() + seconds

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


async def test_a_fifo_is_refused_as_not_a_regular_file_without_waiting_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "pool.json"
    os.mkfifo(path)
    started = time.monotonic()
    with writer_after(path, 3.0), pytest.raises(poise.EndpointsFileError) as caught:
        await poise.FileDiscovery(path).load()
    assert "a FIFO, not a regular file" in caught.value.problem
    assert time.monotonic() - started < 2.0  # refused at once, not after the writer came


@pytest.mark.parametrize("kind", ["directory", "device"])
async def test_a_directory_or_a_device_is_refused_as_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    if kind == "directory":
        path = tmp_path / "pool.json"
        path.mkdir()
    else:
        path = Path(os.devnull)  # a character device: reading it would give b"" (or, for /dev/zero, no end)
    with pytest.raises(poise.EndpointsFileError) as caught:
        await poise.FileDiscovery(path, format="json").load()
    assert f"a {kind if kind == 'directory' else 'character device'}, not a regular file" in caught.value.problem


async def test_a_fifo_in_a_running_balancer_is_reported_once_and_the_stream_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "pool.json"
    os.mkfifo(path)
    errors: list[poise.EndpointsFileError] = []
    source = poise.FileDiscovery(path, interval=1.0, on_error=errors.append)
    with writer_after(path, 3.0):
        async with poise.LoadBalancer(discovery=source) as lb:
            give_up = time.monotonic() + 2.0
            while not errors and time.monotonic() < give_up:
                await anyio.sleep(0.5)
            assert [e.problem for e in errors] == ["is a FIFO, not a regular file: not read"]
            assert lb.discovery_revision is None


HUNG_READ = """
import sys, threading
import anyio
import poise_py as poise
from poise_py._discovery import _file

entered = threading.Event()

def hung_read(path, max_bytes):
    entered.set()
    threading.Event().wait()  # a read from a hung network mount: it never returns

_file._read = hung_read

async def main():
    with anyio.move_on_after(0.3):  # the caller gives up: async with lb must end now
        async with poise.LoadBalancer(poise.FileDiscovery("pool.json", interval=0.1)):
            await anyio.sleep(60)
    print("exited", entered.is_set(), flush=True)

anyio.run(main, backend=sys.argv[1])
"""


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_hung_read_keeps_neither_async_with_lb_nor_the_process_from_exiting(backend: str) -> None:
    try:
        done = subprocess.run(  # noqa: S603 - our interpreter, our script
            [sys.executable, "-c", HUNG_READ, backend],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=20,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the balancer (or the process) waited for the hung read")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "exited True\n"
