"""An httpx transport that balances requests over a pool (extra ``poise_py[httpx]``).

::

    from poise_py.contrib.httpx import balanced_client

    async with lb, balanced_client(lb, base_url="http://api") as client:
        response = await client.get("/v1/things")

(``balanced_client`` is an ``httpx.AsyncClient`` whose transport is
``PoiseTransport(lb, host="api")``.)

Each request takes a permit, goes to the chosen endpoint (the URL's scheme, host and port
are rewritten to the endpoint's ``address``; the path, query and ``Host`` header are
kept), and reports its outcome:

- the response status through :func:`poise_py.classify.http_status` (5xx a strike, 429
  TRANSIENT with its ``Retry-After``, 401/403 PERMANENT, other 4xx CALLER);
- an exception through the classifier (default :func:`poise_py.classify.http`: connect
  and pool timeouts TRANSIENT, resets and read timeouts SUSPECT);
- cancellation as cancellation, never a fault.

A successful response keeps its permit until its body has been read or closed, so a
connection reset mid-body counts against the endpoint and the in-flight count stays
true while a body streams. It runs wherever httpx runs: Trio and asyncio.

Safety: a transport serves the one host it was built for (``host=``, or the ``base_url``
host with :func:`balanced_client`), decided at construction and never by a request; a
request for another host raises :class:`~poise_py.ConfigError` instead of going to the
pool (mount one transport per host with ``httpx.AsyncClient(mounts=...)``). An
``https`` request is never sent to an ``http://`` address unless the endpoint's metadata
says ``{"allow_http_downgrade": True}``. An endpoint whose address the transport cannot
use (or that would downgrade) is the endpoint's FATAL fault: it is ejected, not called
again and again.

Retries (``attempts > 1``, idempotent methods with a replayable body) follow the retry
decision ``lb.call`` uses (:class:`~poise_py._core._retry.RetryLoop`, from
``lb._internals``), with the pool's size: no retry once every endpoint was tried. The
transport uses the balancer's public API plus that one internal interface.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio

from .._internal import missing_extra

try:
    import httpx
except ImportError:
    raise ModuleNotFoundError(missing_extra("poise_py.contrib.httpx", "httpx"), name="httpx") from None

from .. import Classification, Classifier, ConfigError, Endpoint, Fault, LoadBalancer, Permit
from .. import classify as _classify
from .._internal import check_attempts, classifier_problem

__all__ = ["ALLOW_HTTP_DOWNGRADE", "IDEMPOTENT_METHODS", "PoiseTransport", "balanced_client", "endpoint_url"]

ALLOW_HTTP_DOWNGRADE = "allow_http_downgrade"
"""The endpoint metadata key that lets an ``https`` request go to its ``http://`` address."""

_SCHEMES = frozenset({"http", "https"})

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
"""Methods that may be sent again to another endpoint when ``attempts > 1``."""


def endpoint_url(url: httpx.URL, endpoint: Endpoint) -> httpx.URL:
    """``url`` pointed at ``endpoint.address``.

    The address may be a ``(host, port)`` pair, a ``"host:port"`` or ``"host"`` string, or
    an ``http``/``https`` URL (``"https://10.0.0.7:8443"``, whose scheme is used too).

    Raises:
        ConfigError: the endpoint has no usable address (``Endpoint.address``), or an
            ``https`` ``url`` would go to an ``http://`` address that the endpoint's
            metadata does not allow (:data:`ALLOW_HTTP_DOWNGRADE`).
    """
    try:
        target = _point(url, endpoint)
    except ConfigError:
        raise
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise _unusable(endpoint, f"{exc}") from exc
    if url.scheme == "https" and target.scheme == "http" and endpoint.metadata.get(ALLOW_HTTP_DOWNGRADE) is not True:
        raise ConfigError(
            "Endpoint.address",
            f"endpoint {endpoint.id!r} has the http address {endpoint.address!r} but the request is https: "
            f"refusing to send it in cleartext (set metadata {{{ALLOW_HTTP_DOWNGRADE!r}: True}} to allow it)",
        )
    return target


def _unusable(endpoint: Endpoint, why: str) -> ConfigError:
    return ConfigError(
        "Endpoint.address",
        f"endpoint {endpoint.id!r} needs a (host, port), 'host:port' or http(s) URL address, "
        f"got {endpoint.address!r:.80}{f' ({why})' if why else ''}",
    )


def _point(url: httpx.URL, endpoint: Endpoint) -> httpx.URL:
    address = endpoint.address
    if isinstance(address, httpx.URL) or (isinstance(address, str) and "://" in address):
        base = httpx.URL(address)
        if base.scheme not in _SCHEMES or not base.host:
            raise _unusable(endpoint, "only http and https URLs with a host")
        return url.copy_with(scheme=base.scheme, host=base.host, port=base.port)
    if isinstance(address, tuple) and len(address) == 2:
        host, port = address
        if isinstance(host, str) and host and isinstance(port, int) and not isinstance(port, bool):
            if not 0 < port < 65536:
                raise _unusable(endpoint, "the port must be in [1, 65535]")
            return url.copy_with(host=host, port=port)
    if isinstance(address, str) and address and not any(c.isspace() for c in address):
        host, sep, port_text = address.rpartition(":")
        if sep and port_text.isdigit() and (not host.count(":") or host.startswith("[")):
            port = int(port_text)
            if not host.strip("[]") or not 0 < port < 65536:
                raise _unusable(endpoint, "the host must be non-empty and the port in [1, 65535]")
            return url.copy_with(host=host.strip("[]"), port=port)
        return url.copy_with(host=address.strip("[]"))
    raise _unusable(endpoint, "")


def _check_host(host: object) -> bytes:
    """``host`` as the transport compares it with a request's host (IDNA-encoded, lowercase)."""
    if not isinstance(host, str) or not host:
        raise ConfigError(
            "host",
            f"must be the host name this transport serves, such as 'api.internal', got {host!r:.80} "
            "(or build the client with poise_py.contrib.httpx.balanced_client(lb, base_url=...))",
        )
    if "://" in host:
        raise ConfigError(
            "host",
            f"must be a host name such as 'api.internal', not a URL, got {host!r:.80} "
            "(for a base URL use poise_py.contrib.httpx.balanced_client(lb, base_url=...))",
        )
    literal = f"[{host}]" if host.count(":") > 1 and not host.startswith("[") else host  # an IPv6 address
    try:
        url = httpx.URL(f"http://{literal}/")
    except httpx.InvalidURL as exc:
        raise ConfigError("host", f"must be a host name such as 'api.internal', got {host!r:.80} ({exc})") from None
    raw = url.raw_host.lower()
    if url.port is not None or url.userinfo or url.path != "/" or not raw or b"%" in raw:
        raise ConfigError(
            "host",
            f"must be a bare host name such as 'api.internal' (no port, path or user), got {host!r:.80}: "
            "the transport sends each request to its endpoint's address, whatever the URL's port",
        )
    return raw


def balanced_client(
    lb: LoadBalancer,
    base_url: str | httpx.URL,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    classifier: Classifier | None = None,
    gateway: Fault = Fault.SUSPECT,
    attempts: int = 1,
    key: Any = None,
    **client_kwargs: Any,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for ``base_url`` whose requests for its host go through ``lb``.

    ``balanced_client(lb, "http://inventory", timeout=5)`` is
    ``httpx.AsyncClient(base_url="http://inventory", transport=PoiseTransport(lb,
    host="inventory"), timeout=5)``: the transport is bound to ``base_url``'s host when
    the client is built, so a request for any other host (an absolute URL) raises
    :class:`~poise_py.ConfigError` instead of reaching the pool.

    Args:
        lb: the balancer.
        base_url: an ``http`` or ``https`` URL with a host; relative requests go to it.
        transport: the inner transport that sends each request (as for
            :class:`PoiseTransport`).
        classifier: exception -> fault for transport errors (as for :class:`PoiseTransport`).
        gateway: the fault for 502/503/504 responses (as for :class:`PoiseTransport`).
        attempts: tries per idempotent request (as for :class:`PoiseTransport`).
        key: request -> hashing key (as for :class:`PoiseTransport`).
        **client_kwargs: anything else ``httpx.AsyncClient`` takes (``timeout``,
            ``headers``, ``mounts``...).
    """
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError):
        url = None
    if url is None or url.scheme not in _SCHEMES or not url.host:
        raise ConfigError(
            "base_url", f"must be an http(s) URL with a host, such as 'http://api.internal', got {base_url!r:.80}"
        )
    balanced = PoiseTransport(
        lb, host=url.host, transport=transport, classifier=classifier, gateway=gateway, attempts=attempts, key=key
    )
    return httpx.AsyncClient(base_url=url, transport=balanced, **client_kwargs)


class PoiseTransport(httpx.AsyncBaseTransport):
    """Balance an ``httpx.AsyncClient``'s requests for one host over ``lb``'s endpoints.

    Args:
        lb: a running balancer (``acquire`` raises outside ``async with lb``).
        host: the one host this transport serves (``"api.internal"``: the ``base_url``
            host, without scheme or port). A request for any other host raises
            :class:`~poise_py.ConfigError` (``host``) rather than go to this pool: give
            each host its own transport with ``httpx.AsyncClient(mounts=...)``, or let
            :func:`balanced_client` take it from ``base_url``.
        transport: what sends each request once it is pointed at an endpoint (default a
            new ``httpx.AsyncHTTPTransport()``); closed with this transport.
        classifier: exception -> fault for transport errors (default
            :func:`poise_py.classify.http`).
        gateway: the fault for 502/503/504 responses (SUSPECT, or TRANSIENT behind a proxy
            that reports its own overload this way).
        attempts: tries per request; past the first, an idempotent request with a
            replayable body goes to an endpoint not yet tried after a TRANSIENT, SUSPECT,
            FATAL or PERMANENT outcome, within the balancer's retry budget. The last
            response (or error) is what the caller gets.
        key: request -> hashing key for hashing policies (None: no key).
    """

    def __init__(
        self,
        lb: LoadBalancer,
        *,
        host: str,
        transport: httpx.AsyncBaseTransport | None = None,
        classifier: Classifier | None = None,
        gateway: Fault = Fault.SUSPECT,
        attempts: int = 1,
        key: Any = None,
    ) -> None:
        if not isinstance(lb, LoadBalancer):
            raise ConfigError("lb", f"must be a LoadBalancer, got {lb!r:.80}")
        self._host: bytes = _check_host(host)
        if not isinstance(gateway, Fault):
            raise ConfigError("gateway", f"must be a Fault, got {gateway!r:.80}")
        check_attempts(attempts)
        if key is not None and not callable(key):
            raise ConfigError("key", f"must be a callable request -> key, got {key!r:.80}")
        if transport is not None and not callable(getattr(transport, "handle_async_request", None)):
            raise ConfigError(
                "transport",
                f"must be an httpx async transport such as httpx.AsyncHTTPTransport(), got {transport!r:.80}",
            )
        if classifier is not None and not callable(classifier):
            raise ConfigError("classifier", classifier_problem(classifier))
        self._lb = lb
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()
        self._classifier = classifier if classifier is not None else _classify.http(gateway=gateway)
        self._gateway = gateway
        self._attempts = attempts
        self._key = key

    def _check_host(self, url: httpx.URL) -> None:
        host = url.raw_host.lower()
        if host != self._host:
            served = self._host.decode("ascii")
            raise ConfigError(
                "host",
                f"this PoiseTransport serves {served!r}; a request for {host.decode('ascii', 'replace')!r:.80} "
                "would go to its pool. Give each host its own transport: httpx.AsyncClient(mounts={'http://"
                + served
                + "': PoiseTransport(lb, host='"
                + served
                + "'), ...})",
            )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` to an endpoint chosen by the balancer and report the outcome."""
        self._check_host(request.url)
        attempts = self._attempts
        if attempts > 1 and not (request.method in IDEMPOTENT_METHODS and isinstance(request.stream, httpx.ByteStream)):
            attempts = 1
        key = self._key(request) if self._key is not None else None
        tries = self._lb._internals.attempts(attempts, key=key, classify=self._classifier, discard=_close)
        async for attempt in tries:
            async with attempt:
                try:
                    response = await self._send(attempt.permit, request)
                except _Unusable as exc:
                    # The endpoint cannot be called this way (no usable address, or only in
                    # cleartext): FATAL ejects it, rather than failing every request sent there.
                    if attempt.failed(Fault.FATAL, error=exc.error):
                        continue
                    raise exc.error from None
                verdict = _classify.http_status(response.status_code, response.headers, gateway=self._gateway)
                if verdict is None:
                    return httpx.Response(
                        status_code=response.status_code,
                        headers=response.headers,
                        stream=_PermitStream(response.stream, attempt.detach(), self),
                        extensions=response.extensions,
                    )
                if not attempt.failed(verdict, result=response):
                    return response
        last: httpx.Response = tries.outcome()  # no endpoint left to retry on: the last response or error
        return last

    async def _send(self, permit: Permit, request: httpx.Request) -> httpx.Response:
        original = request.url
        try:
            target = endpoint_url(original, permit.endpoint)
        except ConfigError as exc:
            raise _Unusable(exc) from exc
        request.url = target
        if original.scheme == "https" and "sni_hostname" not in request.extensions:
            # TLS still checks the certificate against the name the caller asked for.
            request.extensions = {**request.extensions, "sni_hostname": original.host}
        try:
            return await self._transport.handle_async_request(request)
        finally:
            request.url = original

    def _fail(self, permit: Permit, exc: Exception) -> Fault:
        """Report an error while the body streams; returns the fault recorded."""
        try:
            verdict = self._classifier(exc)
        except Exception:  # noqa: BLE001 - a broken classifier must not lose the outcome
            verdict = Fault.SUSPECT
        return _report(permit, verdict)

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self._transport.aclose()


class _Unusable(Exception):  # noqa: N818 - internal marker, never seen by callers
    """The chosen endpoint's address cannot carry this request (its ``error`` says why)."""

    def __init__(self, error: ConfigError) -> None:
        super().__init__(str(error))
        self.error = error


async def _close(response: httpx.Response) -> None:
    """A failed response another attempt replaces: release its connection."""
    await response.aclose()


def _report(permit: Permit, verdict: Fault | Classification) -> Fault:
    """Report ``verdict`` on ``permit``; the fault recorded."""
    if isinstance(verdict, Classification):
        permit.fail(verdict.fault, retry_after=verdict.retry_after, overload=verdict.overload)
        return verdict.fault
    permit.fail(verdict)
    return verdict


class _PermitStream(httpx.AsyncByteStream):
    """A response body that holds its permit until the body is read or closed."""

    def __init__(
        self, stream: httpx.SyncByteStream | httpx.AsyncByteStream, permit: Permit, owner: PoiseTransport
    ) -> None:
        if not isinstance(stream, httpx.AsyncByteStream):
            raise TypeError(f"an async transport returned a sync body: {stream!r}")
        self._stream = stream
        self._permit = permit
        self._owner = owner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        cancelled = anyio.get_cancelled_exc_class()
        try:
            async for chunk in self._stream:
                yield chunk
        except cancelled:
            if not self._permit.done:
                self._permit.cancel()
            raise
        except Exception as exc:
            if not self._permit.done:
                self._owner._fail(self._permit, exc)
            raise

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if not self._permit.done:
                self._permit.succeed()
