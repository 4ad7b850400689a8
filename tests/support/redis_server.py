"""A real ``redis-server`` for the coordination tests and benchmarks: started, stopped, restarted.

The server is Debian's package. When it is missing, :func:`redis_server_binary` installs
it if it can (root with apt-get) and otherwise raises :class:`RedisServerError` with the
command to run, so the Redis tests fail loudly instead of skipping.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
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


def cluster_port(taken: set[int] | None = None) -> int:
    """A free loopback port for a cluster node, its bus port (+10000) free too.

    Both are below Linux's ephemeral range (32768 and up), so no outgoing connection takes
    one between this check and the node's start; ``taken`` holds the ports (node and bus)
    already handed to the cluster's other nodes, which are not listening yet either.
    """
    taken = set() if taken is None else taken
    for _ in range(200):
        port = random.randint(10_000, 22_000)
        if port in taken or port + 10_000 in taken:
            continue
        try:
            for p in (port, port + 10_000):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        taken.update((port, port + 10_000))
        return port
    raise RedisServerError("no free port pair for a Redis cluster node")


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

    def __init__(self, directory: Path, port: int | None = None, extra: Sequence[str] = ()) -> None:
        self.binary = redis_server_binary()
        self.directory = directory
        self.port = port or free_port()
        self.extra = list(extra)
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
            *self.extra,
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


class RedisCluster:
    """A Redis Cluster of real ``redis-server`` processes on loopback: ``masters`` masters, each
    with ``replicas`` replicas, built with ``redis-cli --cluster create``."""

    def __init__(self, directory: Path, *, masters: int = 3, replicas: int = 1) -> None:
        self.directory = directory
        self.replicas = replicas
        taken: set[int] = set()
        self.nodes = [
            RedisServer(
                directory / f"node{i}",
                port=cluster_port(taken),
                extra=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(directory / f"node{i}" / "nodes.conf"),
                    "--cluster-node-timeout",
                    "1000",
                    "--cluster-replica-validity-factor",
                    "0",
                ],
            )
            for i in range(masters * (1 + replicas))
        ]

    def start(self) -> None:
        """Start every node, create the cluster, and wait until every node says it is ok."""
        for node in self.nodes:
            node.start()
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RedisServerError("redis-cli is missing (Debian's redis-tools, installed with redis-server)")
        args = [cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes)]
        args += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
        done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=60)  # noqa: S603
        if done.returncode != 0:
            raise RedisServerError(f"redis-cli --cluster create failed: {done.stdout[-1000:]} {done.stderr[-1000:]}")
        self.wait_ok()

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Wait until every running node reports ``cluster_state:ok`` and agrees on the masters."""
        deadline = time.monotonic() + timeout
        while True:
            states = []
            for node in self.nodes:
                if node.running:
                    with contextlib.suppress(OSError, RuntimeError, ConnectionError):
                        info = node.command("CLUSTER", "INFO")
                        states.append(isinstance(info, bytes) and b"cluster_state:ok" in info)
                        continue
                    states.append(False)
            if states and all(states):
                return
            if time.monotonic() > deadline:
                raise RedisServerError("the Redis cluster did not reach cluster_state:ok")
            time.sleep(0.05)

    def master_of(self, key: str) -> RedisServer:
        """The running node that serves ``key``'s slot as a master."""
        for node in self.nodes:
            if not node.running:
                continue
            with contextlib.suppress(RuntimeError, OSError, ConnectionError):
                role = node.command("ROLE")
                if isinstance(role, list) and role[0] == b"master":
                    slot = node.command("CLUSTER", "KEYSLOT", key)
                    assert isinstance(slot, int)
                    count = node.command("CLUSTER", "COUNTKEYSINSLOT", str(slot))
                    if isinstance(count, int) and _serves(node, slot):
                        return node
        raise RedisServerError(f"no running master serves {key!r}")

    @property
    def masters(self) -> list[RedisServer]:
        """The running nodes that are masters now."""
        out = []
        for node in self.nodes:
            if node.running:
                with contextlib.suppress(RuntimeError, OSError, ConnectionError):
                    role = node.command("ROLE")
                    if isinstance(role, list) and role[0] == b"master":
                        out.append(node)
        return out

    def stop(self) -> None:
        """Stop every node."""
        for node in self.nodes:
            node.stop()


def _serves(node: RedisServer, slot: int) -> bool:
    """Whether ``node`` serves ``slot`` itself (CLUSTER SLOTS, read from that node)."""
    slots = node.command("CLUSTER", "SLOTS")
    assert isinstance(slots, list)
    for entry in slots:
        low, high, master = entry[0], entry[1], entry[2]
        if low <= slot <= high:
            return bool(master[1] == node.port)
    return False
