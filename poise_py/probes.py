"""Ready-made active health probes for ``HealthCheck(probe=...)``.

A probe is ``async def probe(endpoint) -> object``: it returns when the endpoint is
healthy and raises when it is not. The balancer times it out (``HealthCheck.timeout``),
so a probe need not. :func:`tcp_connect` uses anyio only; :func:`http_get` needs httpx
(``pip install 'poise_py[httpx]'``), imported when you call it, never by ``import poise_py``.

Both read the endpoint's ``address``: a ``(host, port)`` pair or a ``"host:port"`` string;
:func:`http_get` also takes a base URL (``"https://api.example.com"``).
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import TYPE_CHECKING

import anyio

from ._core._health_schedule import Probe
from ._endpoint import Endpoint
from ._errors import ConfigError, ProbeFailed
from ._extras import install_hint
from ._knobs import check_count, optional

if TYPE_CHECKING:
    import httpx

__all__ = ["Probe", "http_get", "tcp_connect"]


def _host_port(endpoint: Endpoint, port: int | None) -> tuple[str, int]:
    address = endpoint.address
    host: object
    if isinstance(address, tuple) and len(address) == 2:
        host, found = address
    elif isinstance(address, str) and "://" not in address:
        host, sep, tail = address.rpartition(":")
        bare_ipv6 = address.count(":") > 1 and not address.startswith("[")  # "::1": no port to split off
        if bare_ipv6 or not sep or not (tail.isascii() and tail.isdigit()):
            host, found = address, None
        else:
            found = int(tail)
    else:
        raise ProbeFailed(endpoint.id, f"address {address!r} is not (host, port) or 'host:port'")
    found = port if port is not None else found
    if not isinstance(host, str) or not host or isinstance(found, bool) or not isinstance(found, int):
        raise ProbeFailed(endpoint.id, f"address {address!r} gives no host and port to probe")
    return host.strip("[]"), found


def _check_port(port: int | None) -> None:
    optional(check_count, "port", port, maximum=65535)


def tcp_connect(*, port: int | None = None) -> Probe:
    """A probe that passes when a TCP connection to the endpoint opens (then closes it).

    Args:
        port: probe this port instead of the address's (a separate health port).
    """
    _check_port(port)

    async def probe(endpoint: Endpoint) -> None:
        host, target = _host_port(endpoint, port)
        stream = await anyio.connect_tcp(host, target)
        await stream.aclose()

    return probe


def _url(endpoint: Endpoint, scheme: str, path: str, port: int | None) -> str:
    address = endpoint.address
    if isinstance(address, str) and "://" in address:
        if port is None:
            return address.rstrip("/") + path
        import httpx  # noqa: PLC0415 - http_get checked it is installed

        try:
            base = httpx.URL(address).copy_with(port=port)
        except (httpx.InvalidURL, ValueError, TypeError) as exc:
            raise ProbeFailed(endpoint.id, f"address {address!r} is not a URL to probe ({exc})") from None
        return str(base).rstrip("/") + path  # the base URL's scheme and host, on the health port
    host, target = _host_port(endpoint, port)
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"{scheme}://{host}:{target}{path}"


def http_get(
    path: str = "/health",
    *,
    scheme: str = "http",
    port: int | None = None,
    expected_status: Container[int] | int = range(200, 300),
    headers: Mapping[str, str] | None = None,
    client: httpx.AsyncClient | None = None,
) -> Probe:
    """A probe that passes when ``GET {scheme}://{address}{path}`` answers an expected status.

    Any other status raises :class:`~poise_py.ProbeFailed`; a transport error (refused,
    reset, TLS) propagates as httpx raised it. Both count as an unhealthy result.

    Args:
        path: the path to GET, starting with ``/``.
        scheme: ``"http"`` or ``"https"``, for addresses that are not URLs.
        port: probe this port instead of the address's (a separate health port).
        expected_status: the statuses that mean healthy (default 2xx): a collection, or one
            status (``200``).
        headers: extra request headers.
        client: an ``httpx.AsyncClient`` to reuse (you own its lifecycle); by default
            each probe opens and closes its own, which also checks connection set-up
            but costs a new client per probe: pass one for large pools.

    Raises:
        ConfigError: httpx is not installed, or a knob is invalid.
    """
    try:
        import httpx  # noqa: PLC0415 - an optional extra, imported only when asked for
    except ImportError as exc:
        raise ConfigError("probes.http_get", f"needs httpx: {install_hint('httpx')}") from exc
    if not isinstance(path, str) or not path.startswith("/"):
        raise ConfigError("path", f"must be a string starting with '/', got {path!r}")
    if scheme not in ("http", "https"):
        raise ConfigError("scheme", f"must be 'http' or 'https', got {scheme!r}")
    _check_port(port)
    expected: object = expected_status
    if isinstance(expected, int) and not isinstance(expected, bool):
        expected = (expected,)  # one status: 200 means (200,)
    if not isinstance(expected, Container) or isinstance(expected, str | bytes | bool):
        raise ConfigError("expected_status", f"must be a status or a collection of them, got {expected_status!r:.80}")
    statuses: Container[int] = expected
    if client is not None and not isinstance(client, httpx.AsyncClient):
        raise ConfigError("client", f"must be an httpx.AsyncClient or None, got {client!r}")
    request_headers = dict(headers or {})

    async def probe(endpoint: Endpoint) -> None:
        url = _url(endpoint, scheme, path, port)
        if client is not None:
            response = await client.get(url, headers=request_headers)
        else:
            async with httpx.AsyncClient() as own:
                response = await own.get(url, headers=request_headers)
        if response.status_code not in statuses:
            raise ProbeFailed(endpoint.id, f"GET {url} answered HTTP {response.status_code}")

    return probe
