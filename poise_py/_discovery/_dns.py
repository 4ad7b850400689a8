"""DNS discovery: resolve a name every ``interval`` and publish the answer when it changes."""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TypeAlias

import anyio

from .._core._updates import Snapshot, Update
from .._endpoint import Endpoint
from .._errors import ConfigError
from .._knobs import RESOLUTION, check_count, check_duration

logger = logging.getLogger("poise_py")

Resolver: TypeAlias = Callable[[str, int], Awaitable[Iterable[str]]]
"""``await resolver(host, port)`` -> the IP addresses the name has now."""


def getaddrinfo_resolver(family: int = socket.AF_UNSPEC) -> Resolver:
    """The default resolver: ``anyio.getaddrinfo`` (the system resolver, off the event loop)."""

    async def resolve(host: str, port: int) -> list[str]:
        answer = await anyio.getaddrinfo(host, port, family=family, type=socket.SOCK_STREAM)
        return [str(sockaddr[0]) for *_, sockaddr in answer]

    return resolve


def check_host(host: object) -> str:
    """Validate a DNS name (or an IP literal) as the resolver will see it, or raise :class:`ConfigError`."""
    if not isinstance(host, str) or not host:
        raise ConfigError("host", f"must be a non-empty string, got {host!r}")
    try:
        ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        pass
    else:
        return host  # an IP literal: nothing to encode
    if any(c.isspace() or not c.isprintable() for c in host):
        raise ConfigError("host", f"must be a DNS name without spaces or control characters, got {host!r}")
    try:
        encoded = host.encode("idna")
    except UnicodeError as exc:
        raise ConfigError(
            "host", f"is not a valid DNS name ({exc.__cause__ or exc}; labels hold 1 to 63 bytes): {host!r}"
        ) from exc
    if len(encoded.rstrip(b".")) > 253:
        raise ConfigError("host", f"is longer than the 253 bytes a DNS name may have: {host[:40]!r}...")
    return host


def _endpoint_id(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class DnsDiscovery:
    """Endpoints from a DNS name: one per address, re-resolved every ``interval`` seconds.

    A new revision is published only when the set of addresses changes (order does not
    count: round-robin DNS shuffling is not a change). Each endpoint's id is
    ``"ip:port"`` (``"[ip]:port"`` for IPv6) and its address ``(ip, port)``. A failed
    lookup, or an empty answer, publishes nothing: the balancer keeps the last good pool,
    the failure is logged once per failing streak and kept in :attr:`error`, and
    resolution goes on. Revisions keep growing across iterations, so one source can be
    re-iterated by a restarted balancer.

    Args:
        host: the name to resolve.
        port: the port every endpoint gets.
        interval: seconds between lookups.
        family: ``socket.AF_INET`` or ``AF_INET6`` to keep one family (default both).
        resolver: ``await resolver(host, port)`` -> addresses, replacing
            ``anyio.getaddrinfo`` (tests, a custom DNS client).

    Attributes:
        error: the last lookup failure, or None once a lookup succeeds.
        failures: lookups that failed.
    """

    def __init__(
        self,
        host: str,
        port: int,
        interval: float = 30.0,
        *,
        family: int = socket.AF_UNSPEC,
        resolver: Resolver | None = None,
    ) -> None:
        check_host(host)
        check_count("port", port, minimum=0, maximum=65535)
        if family not in (socket.AF_UNSPEC, socket.AF_INET, socket.AF_INET6):
            raise ConfigError("family", f"must be AF_UNSPEC, AF_INET or AF_INET6, got {family!r}")
        if resolver is not None and not callable(resolver):
            raise ConfigError("resolver", f"must be callable, got {resolver!r}")
        self.host = host
        self.port = port
        self.interval: float = check_duration("interval", interval, minimum=RESOLUTION)
        self._resolve = resolver or getaddrinfo_resolver(family)
        self._revision = 0
        self.error: Exception | None = None
        self.failures: int = 0

    def __aiter__(self) -> AsyncIterator[Update]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[Update]:
        published: tuple[str, ...] | None = None
        while True:
            answer = await self._lookup()
            if answer is not None and answer != published:
                published = answer
                self._revision += 1
                yield Snapshot(
                    self._revision,
                    [Endpoint(_endpoint_id(ip, self.port), address=(ip, self.port)) for ip in answer],
                )
            await anyio.sleep(self.interval)

    async def _lookup(self) -> tuple[str, ...] | None:
        try:
            found = await self._resolve(self.host, self.port)
            if not isinstance(found, list | tuple | set | frozenset):  # a bare string: one address per character
                raise TypeError(f"the resolver answered {found!r:.80}, not a list of addresses")  # noqa: TRY301
            for ip in found:
                if not isinstance(ip, str):
                    raise TypeError(f"the resolver answered {ip!r:.80}, not an address string")  # noqa: TRY301
                ipaddress.ip_address(ip)  # ValueError: not an IP address (what getaddrinfo gives)
            answer = tuple(sorted(set(found)))
            if not answer:
                raise OSError(f"{self.host!r} resolved to no address")  # noqa: TRY301 - handled as a failed lookup
        except Exception as exc:  # noqa: BLE001 - any resolver failure is a failed round
            self.failures += 1
            if self.error is None:
                logger.warning("poise_py: DNS lookup of %r failed (%s); pool unchanged", self.host, exc)
            self.error = exc
            return None
        if self.error is not None:
            logger.info("poise_py: DNS lookup of %r works again", self.host)
        self.error = None
        return answer
