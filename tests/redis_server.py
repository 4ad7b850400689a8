"""A real ``redis-server`` for the coordination tests and benchmarks: started, stopped, restarted.

The server is Debian's package. When it is missing, :func:`redis_server_binary` installs
it if it can (root with apt-get) and otherwise raises :class:`RedisServerError` with the
command to run, so the Redis tests fail loudly instead of skipping.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import BinaryIO

INSTALL_HINT = (
    "the coordination tests need Debian's redis-server: run "
    "`sudo apt-get update && sudo apt-get install -y redis-server` (or put a redis-server on PATH)"
)


class RedisServerError(RuntimeError):
    """redis-server is not installed and could not be installed here."""


def redis_server_binary() -> str:
    """The path of ``redis-server``, installing Debian's package first if it is missing and we can."""
    found = shutil.which("redis-server")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt and hasattr(os, "geteuid") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for args in ([apt, "update", "-qq"], [apt, "install", "-y", "-qq", "redis-server"]):
            done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)  # noqa: S603
            if done.returncode != 0:
                raise RedisServerError(f"{' '.join(args)} failed ({done.stderr.strip()[-500:]}); {INSTALL_HINT}")
        found = shutil.which("redis-server")
        if found:
            return found
    raise RedisServerError(INSTALL_HINT)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _encode(*args: str | bytes) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a.encode() if isinstance(a, str) else a
        out.append(f"${len(b)}\r\n".encode() + b + b"\r\n")
    return b"".join(out)


def _read_reply(reader: BinaryIO) -> object:
    line = reader.readline()
    if not line:
        raise ConnectionError("redis closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        return reader.read(n + 2)[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read_reply(reader) for _ in range(n)]
    raise RuntimeError(f"unexpected reply {line!r}")


class RedisServer:
    """One ``redis-server`` on a loopback port: no persistence, its files in ``directory``."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.binary = redis_server_binary()
        self.directory = directory
        self.port = port or free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server (on the same port as before) and wait until it answers PING."""
        if self.running:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.directory),
            "--logfile",
            str(self.directory / "redis.log"),
            "--daemonize",
            "no",
        ]
        self._process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
        deadline = time.monotonic() + 15.0
        while True:
            with contextlib.suppress(OSError, RuntimeError):
                if self.command("PING") == "PONG":
                    return
            if self._process.poll() is not None or time.monotonic() > deadline:
                log = self.directory / "redis.log"
                text = log.read_text()[-2000:] if log.exists() else ""
                self.stop()
                raise RedisServerError(f"redis-server did not start on port {self.port}: {text}")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop the server at once; its keys are lost (no persistence)."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait(timeout=15)

    def command(self, *args: str | bytes, timeout: float = 5.0) -> object:
        """Send one command on a fresh connection and return the decoded reply."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(_encode(*args))
            with s.makefile("rb") as f:
                return _read_reply(f)

    def command_count(self, name: str) -> int:
        """How many times the server ran command ``name`` since it started (INFO commandstats)."""
        info = self.command("INFO", "commandstats")
        assert isinstance(info, bytes)
        prefix = f"cmdstat_{name.lower()}:calls="
        for line in info.decode().splitlines():
            if line.startswith(prefix):
                return int(line[len(prefix) :].split(",", 1)[0])
        return 0
