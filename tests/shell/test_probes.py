"""The ready-made probes: TCP connect (anyio) and HTTP GET (httpx, an optional extra).

These do real loopback I/O and never sleep, so they run on the real clocks of both
backends: a virtual clock could jump past an I/O wait while the kernel is still busy.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import AsyncIterator

import anyio
import anyio.abc
import httpx
import pytest

import poise_py as poise
from poise_py import probes

pytestmark = [pytest.mark.anyio, pytest.mark.real_clock]


@pytest.fixture
async def listener() -> AsyncIterator[int]:
    """A loopback TCP listener that answers every connection with an empty HTTP 200."""

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            try:
                await stream.receive()
                await stream.send(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                pass

    server = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with server, anyio.create_task_group() as tg:
        tg.start_soon(server.serve, serve)
        yield server.extra(anyio.abc.SocketAttribute.local_port)  # noqa: S610 - anyio, not Django
        tg.cancel_scope.cancel()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_tcp_connect_passes_when_the_port_accepts(listener: int) -> None:
    probe = probes.tcp_connect()
    await probe(poise.Endpoint("a", address=("127.0.0.1", listener)))
    await probe(poise.Endpoint("b", address=f"127.0.0.1:{listener}"))
    await probes.tcp_connect(port=listener)(poise.Endpoint("c", address=("127.0.0.1", 1)))


async def test_tcp_connect_raises_when_the_port_refuses() -> None:
    with pytest.raises(OSError):
        await probes.tcp_connect()(poise.Endpoint("a", address=("127.0.0.1", closed_port())))


@pytest.mark.parametrize("address", [None, "no-port-here", ("host",), "http://example.com"])
async def test_tcp_connect_raises_probe_failed_for_an_address_without_host_and_port(address: object) -> None:
    with pytest.raises(poise.ProbeFailed) as info:
        await probes.tcp_connect()(poise.Endpoint("a", address=address))
    assert info.value.endpoint_id == "a"


def test_probe_knobs_are_checked_at_construction() -> None:
    with pytest.raises(poise.ConfigError):
        probes.tcp_connect(port=70_000)
    with pytest.raises(poise.ConfigError):
        probes.http_get("health")  # no leading slash
    with pytest.raises(poise.ConfigError):
        probes.http_get(scheme="ftp")
    with pytest.raises(poise.ConfigError):
        probes.http_get(client="not a client")  # type: ignore[arg-type]


def recording_client(status: int, seen: list[httpx.Request]) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_http_get_passes_on_an_expected_status_and_builds_the_url() -> None:
    seen: list[httpx.Request] = []
    async with recording_client(204, seen) as client:
        probe = probes.http_get("/ready", client=client, headers={"x-probe": "poise"})
        await probe(poise.Endpoint("a", address=("10.0.0.1", 8080)))
        await probe(poise.Endpoint("b", address="https://api.example.com/"))
        await probe(poise.Endpoint("c", address=("::1", 9000)))
        await probes.http_get(client=client, scheme="https", port=8443)(poise.Endpoint("d", address="10.0.0.2:80"))
    assert [str(r.url) for r in seen] == [
        "http://10.0.0.1:8080/ready",
        "https://api.example.com/ready",
        "http://[::1]:9000/ready",
        "https://10.0.0.2:8443/health",
    ]
    assert seen[0].headers["x-probe"] == "poise"


async def test_http_get_with_a_port_probes_a_base_url_on_that_port_and_takes_one_expected_status() -> None:
    seen: list[httpx.Request] = []
    async with recording_client(200, seen) as client:
        probe = probes.http_get(client=client, port=8080, expected_status=200)
        await probe(poise.Endpoint("a", address="https://api.example.com/v1"))
        await probe(poise.Endpoint("b", address="::1"))  # a bare IPv6 address: the port is the probe's
    assert [str(r.url) for r in seen] == ["https://api.example.com:8080/v1/health", "http://[::1]:8080/health"]


def test_http_get_refuses_an_expected_status_that_is_not_one() -> None:
    for bad in ("200", True, 2.5):
        with pytest.raises(poise.ConfigError) as info:
            probes.http_get(expected_status=bad)  # type: ignore[arg-type]
        assert info.value.knob == "expected_status"


async def test_tcp_connect_with_a_port_probes_a_bare_ipv6_address(monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[tuple[str, int]] = []

    async def connect(host: str, port: int) -> anyio.abc.SocketStream:
        tried.append((host, port))
        raise ConnectionRefusedError(host)

    monkeypatch.setattr(anyio, "connect_tcp", connect)
    with pytest.raises(ConnectionRefusedError):
        await probes.tcp_connect(port=8080)(poise.Endpoint("a", address="::1"))
    assert tried == [("::1", 8080)]  # not host ":" and port 1


async def test_http_get_raises_probe_failed_on_another_status() -> None:
    async with recording_client(503, []) as client:
        with pytest.raises(poise.ProbeFailed) as info:
            await probes.http_get(client=client)(poise.Endpoint("a", address=("10.0.0.1", 80)))
    assert info.value.endpoint_id == "a"
    assert "503" in str(info.value)


async def test_http_get_opens_its_own_client_when_given_none(listener: int) -> None:
    await probes.http_get("/")(poise.Endpoint("a", address=("127.0.0.1", listener)))


async def test_http_get_lets_a_transport_error_propagate() -> None:
    with pytest.raises(httpx.ConnectError):
        await probes.http_get()(poise.Endpoint("a", address=("127.0.0.1", closed_port())))


def test_http_get_without_httpx_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(poise.ConfigError) as info:
        probes.http_get()
    assert info.value.knob == "probes.http_get"


def test_importing_poise_py_does_not_import_httpx() -> None:
    code = "import sys, poise_py, poise_py.probes; assert 'httpx' not in sys.modules, 'httpx imported'"
    subprocess.run([sys.executable, "-c", code], check=True)  # noqa: S603 - our own interpreter


async def test_a_ready_made_probe_drives_the_balancer(listener: int) -> None:
    up = poise.Endpoint("up", address=("127.0.0.1", listener))
    down = poise.Endpoint("down", address=("127.0.0.1", closed_port()))
    check = poise.HealthCheck(probe=probes.tcp_connect(), interval=1.0, unhealthy_threshold=1, jitter=0.0)
    async with poise.LoadBalancer(poise.StaticDiscovery([up, down]), health_check=check) as lb:
        with anyio.fail_after(5):
            while lb.snapshot()["down"].eligible_reason is None:
                await anyio.sleep(0)  # a checkpoint: the kernel answers loopback at once
        assert lb.snapshot()["down"].eligible_reason is poise.IneligibleReason.UNHEALTHY
        async with lb.acquire() as permit:
            assert permit.endpoint.id == "up"
