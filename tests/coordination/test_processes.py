"""Separate processes sharing one Redis: one probe budget per round, one failed-round count."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import anyio
import coredis

import poise_py as poise
from poise_py import CircuitState
from tests.support.coordination import rewind
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 4
PERMITTED = 2


def read_record(server: RedisServer, namespace: str) -> poise.SharedState:
    async def read() -> poise.SharedState:
        client: coredis.Redis[bytes] = coredis.Redis(host="127.0.0.1", port=server.port)
        async with client:
            return (await poise.RedisStorage(client, namespace=namespace).read(["a"]))[0]

    return anyio.run(read)


def trip(server: RedisServer, namespace: str) -> None:
    async def run() -> None:
        client: coredis.Redis[bytes] = coredis.Redis(host="127.0.0.1", port=server.port)
        async with client:
            wait = poise.OpenWait(escalation=poise.Escalation(base=30.0, maximum=300.0, jitter=0.0))
            reply = await poise.RedisStorage(client, namespace=namespace).trip_open("a", expected_version=0, wait=wait)
            assert reply.applied

    anyio.run(run)


def run_round(server: RedisServer, namespace: str, verdict: str) -> list[int]:
    """Start the workers together, collect their probe counts, then tell them the verdict."""
    procs = [
        subprocess.Popen(  # noqa: S603
            [
                sys.executable,
                "-m",
                "tests.support.coordination_worker",
                str(server.port),
                namespace,
                str(i),
                str(PERMITTED),
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(WORKERS)
    ]

    def kill_all() -> None:
        for p in procs:
            p.kill()

    watchdog = threading.Timer(120.0, kill_all)
    watchdog.start()
    try:
        counts = []
        for p in procs:
            assert p.stdout is not None
            counts.append(json.loads(p.stdout.readline())["probes"])
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(verdict + "\n")
            p.stdin.flush()
        for p in procs:
            assert p.stdout is not None
            done = json.loads(p.stdout.readline())
            assert done == {"done": True, "connected": True}
            assert p.stdin is not None
            p.stdin.close()
            assert p.wait() == 0
            p.stdout.close()
        return counts
    finally:
        watchdog.cancel()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_processes_sharing_redis_probe_exactly_permitted_times_per_round_and_count_failed_rounds(
    redis_server: RedisServer,
) -> None:
    namespace = f"p{uuid.uuid4().hex[:12]}"
    trip(redis_server, namespace)
    wait = 30.0
    for expected_rounds in (1, 2):
        rewind(redis_server, namespace, wait)  # the open wait has passed on the server's clock
        counts = run_round(redis_server, namespace, "fail")
        assert sum(counts) == PERMITTED, counts
        record = read_record(redis_server, namespace)
        assert record.state is CircuitState.OPEN
        assert record.failed_rounds == expected_rounds, "two failed probes, one failed round"
        assert record.reopen_at is not None
        assert record.opened_at is not None
        wait = record.reopen_at - record.opened_at
        assert wait == 30.0 * 2**expected_rounds
    rewind(redis_server, namespace, wait)
    counts = run_round(redis_server, namespace, "succeed")
    assert sum(counts) == PERMITTED, counts
    record = read_record(redis_server, namespace)
    assert record.state is CircuitState.CLOSED
    assert record.failed_rounds == 0
