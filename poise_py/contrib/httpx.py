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
``lb._internals``), with the pool's size: no retry once every endpoint was tried.
Hedging (``hedge=poise.Hedge(...)``, for the methods in ``hedge_methods``: the idempotent
ones by default) and waiting for an eligible endpoint (``wait=``) run on the same retry
driver as ``lb.call`` (``lb._internals.attempts`` and ``hedged``). The transport uses the
balancer's public API plus that one internal interface.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Collection
from typing import Any

import anyio

from .._internal import missing_extra

try:
    import httpx
except ImportError:
    raise ModuleNotFoundError(missing_extra("poise_py.contrib.httpx", "httpx"), name="httpx") from None

from .. import (
    Classifier,
    ConfigError,
    Endpoint,
    Fault,
    Hedge,
    LoadBalancer,
    Permit,
    load_report_from_headers,
    quota_from_headers,
)
from .. import classify as _classify
from .._internal import check_attempts, check_duration, classifier_problem, hedged
from ._outcome import report_verdict

__all__ = ["ALLOW_HTTP_DOWNGRADE", "IDEMPOTENT_METHODS", "PoiseTransport", "balanced_client", "endpoint_url"]

ALLOW_HTTP_DOWNGRADE = "allow_http_downgrade"
"""The endpoint metadata key that lets an ``https`` request go to its ``http://`` address."""

_SCHEMES = frozenset({"http", "https"})

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
"""Methods that may be sent again to another endpoint when ``attempts > 1`` (and are hedged by default)."""


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
        if base.port is not None and not 0 < base.port < 65536:
            raise _unusable(endpoint, "the port must be in [1, 65535]")
        return url.copy_with(scheme=base.scheme, host=base.host, port=base.port)
    if isinstance(address, tuple) and len(address) == 2:
        host, port = address
        if isinstance(host, str) and host and isinstance(port, int) and not isinstance(port, bool):
            if not 0 < port < 65536:
                raise _unusable(endpoint, "the port must be in [1, 65535]")
            return url.copy_with(host=host, port=port)
    if isinstance(address, str) and address and not any(c.isspace() for c in address):
        host, sep, port_text = address.rpartition(":")
        if sep and port_text.isascii() and port_text.isdigit() and (not host.count(":") or host.startswith("[")):
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
    hedge: Hedge | None = None,
    hedge_methods: Collection[str] = IDEMPOTENT_METHODS,
    wait: float | None = None,
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
        hedge: hedged requests (as for :class:`PoiseTransport`).
        hedge_methods: the methods hedged (as for :class:`PoiseTransport`).
        wait: seconds a request waits for an eligible endpoint (as for :class:`PoiseTransport`).
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
    try:
        _check_host(url.host)
    except ConfigError as exc:  # a host httpx parsed but the transport cannot serve: say which argument
        raise ConfigError("base_url", f"has a host the transport cannot serve: {exc}") from None
    balanced = PoiseTransport(
        lb,
        host=url.host,
        transport=transport,
        classifier=classifier,
        gateway=gateway,
        attempts=attempts,
        key=key,
        hedge=hedge,
        hedge_methods=hedge_methods,
        wait=wait,
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
        hedge: hedged requests (:class:`poise_py.Hedge`), or None (default). A request
            whose method is in ``hedge_methods`` and whose body is replayable is sent again
            to an endpoint not yet tried when no answer came within the hedge's delay; the
            first success is the answer and the others are cancelled through their
            permits (no strike, no success), their responses closed. Such a request makes
            at most ``max(attempts, hedge.max_attempts)`` attempts, retries included, as
            ``lb.call`` does. Latency is measured per method (the call site
            ``("httpx", method)``).
        hedge_methods: the methods hedged (default :data:`IDEMPOTENT_METHODS`); name POST
            here only if sending a POST twice is safe.
        wait: seconds a request's first attempt waits, first come first served, for an
            eligible endpoint when none is (``lb.acquire(wait=...)``); None (default)
            raises the selection error at once. Retries and hedges never wait.
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
        hedge: Hedge | None = None,
        hedge_methods: Collection[str] = IDEMPOTENT_METHODS,
        wait: float | None = None,
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
        if hedge is not None and not isinstance(hedge, Hedge):
            raise ConfigError("hedge", f"must be a poise.Hedge(...) or None, got {hedge!r:.80}")
        self._hedge_methods = _check_methods(hedge_methods)
        if wait is not None:
            wait = check_duration("wait", wait, allow_zero=True)
        self._hedge = hedge
        self._wait = wait
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
        replayable = isinstance(request.stream, httpx.ByteStream)
        if attempts > 1 and not (request.method in IDEMPOTENT_METHODS and replayable):
            attempts = 1
        key = self._key(request) if self._key is not None else None
        hedge = self._hedge
        if hedge is not None and replayable and request.method in self._hedge_methods:
            return await self._hedged(request, hedge, attempts, key)
        tries = self._lb._internals.attempts(
            attempts, key=key, classify=self._classifier, discard=_close, wait=self._wait
        )
        async for attempt in tries:
            async with attempt:
                try:
                    response = await self._send(attempt.permit, request)
                except _Unusable as exc:
                    # The endpoint cannot be called this way (no usable address, or only in
                    # cleartext): FATAL ejects it, rather than failing every request sent there.
                    if attempt.failed(Fault.FATAL, error=exc.error):
                        continue
                    tries.annotate(exc.error)  # every attempt on it, as any error the request raises
                    raise exc.error from None
                verdict = _classify.http_status(response.status_code, response.headers, gateway=self._gateway)
                if verdict is None:
                    return self._holding(response, attempt.detach())
                if not attempt.failed(verdict, result=response):
                    return response
        last: httpx.Response = tries.outcome()  # no endpoint left to retry on: the last response or error
        return last

    async def _hedged(self, request: httpx.Request, hedge: Hedge, attempts: int, key: Any) -> httpx.Response:
        """Send ``request`` with hedging (``lb.call``'s :func:`hedged`); every response but the answer is closed."""
        internals = self._lb._internals
        # No discard hook: the responses are closed here once the answer is known, so the
        # last failed one is still open if it turns out to be the answer.
        tries = internals.attempts(
            max(attempts, hedge.max_attempts), key=key, classify=self._classifier, wait=self._wait
        )
        received: list[httpx.Response] = []  # every response an attempt got back (several run at once)
        failed: list[httpx.Response] = []

        async def once(attempt: Any) -> httpx.Response | None:  # attempt: the driver's AttemptScope
            try:
                response = await self._send(attempt.permit, request, copy=True)
            except _Unusable as exc:
                attempt.failed(Fault.FATAL, error=exc.error)  # as in handle_async_request
                return None
            verdict = _classify.http_status(response.status_code, response.headers, gateway=self._gateway)
            if verdict is None:
                response = self._holding(response, attempt.detach())
                received.append(response)
                return response
            received.append(response)
            failed.append(response)
            attempt.failed(verdict, result=response)
            return response

        answer: httpx.Response | None = None
        try:
            answer = await hedged(tries, internals.hedging(hedge, ("httpx", request.method)), once, now=internals.now)
            if answer is None and failed:
                answer = failed[-1]  # no attempt succeeded and no error: the last failed response
        finally:
            # A loser's response that arrived anyway (in the same instant as the winner's,
            # or a failed one a later attempt replaced) is closed: its connection is
            # released, and a successful one's permit reports its success.
            with anyio.CancelScope(shield=True):
                for response in received:
                    if response is not answer:
                        await response.aclose()
        if answer is None:  # pragma: no cover - the driver answers with a response or raises
            raise RuntimeError("poise_py: a hedged request ended with neither a response nor an error")
        return answer

    async def _send(self, permit: Permit, request: httpx.Request, *, copy: bool = False) -> httpx.Response:
        """Send ``request`` to the permit's endpoint (``copy``: a new request, as hedges run at once)."""
        original = request.url
        try:
            target = endpoint_url(original, permit.endpoint)
        except ConfigError as exc:
            raise _Unusable(exc) from exc
        extensions = request.extensions
        if original.scheme == "https" and "sni_hostname" not in extensions:
            # TLS still checks the certificate against the name the caller asked for.
            extensions = {**extensions, "sni_hostname": original.host}
        if copy:
            # The body is a ByteStream (replayable), so each copy sends it whole.
            sent = httpx.Request(
                request.method, target, headers=request.headers, stream=request.stream, extensions=extensions
            )
            response = await self._transport.handle_async_request(sent)
        else:
            request.url = target
            request.extensions = extensions
            try:
                response = await self._transport.handle_async_request(request)
            finally:
                request.url = original
        headers = response.headers
        report = load_report_from_headers(headers)  # ORCA: the backend's own load
        if report is not None:
            permit.report_load(report)
        quota = quota_from_headers(headers)  # a provider's rate limit: what is left of it
        if quota is not None:
            permit.report_quota(quota)
        return response

    def _holding(self, response: httpx.Response, permit: Permit) -> httpx.Response:
        """``response`` with a body that holds ``permit`` until it is read or closed (a success's)."""
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_PermitStream(response.stream, permit, self),
            extensions=response.extensions,
        )

    def _fail(self, permit: Permit, exc: Exception) -> Fault:
        """Report an error while the body streams; returns the fault recorded."""
        try:
            verdict = self._classifier(exc)
        except Exception:  # noqa: BLE001 - a broken classifier must not lose the outcome
            verdict = Fault.SUSPECT
        return report_verdict(permit, verdict)

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self._transport.aclose()


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""An HTTP method name (RFC 9110, section 5.6.2: a token)."""


def _check_methods(methods: object) -> frozenset[str]:
    """``hedge_methods`` as upper-case method names (httpx upper-cases a request's), or ConfigError."""
    what = "a collection of HTTP method names such as {'GET', 'HEAD'}"
    if isinstance(methods, str | bytes) or not isinstance(methods, Collection):
        raise ConfigError("hedge_methods", f"must be {what}, got {methods!r:.80}")
    names = tuple(methods)
    if not all(isinstance(m, str) and _TOKEN.fullmatch(m) for m in names):
        raise ConfigError("hedge_methods", f"must be {what}, got {methods!r:.80}")
    return frozenset(m.upper() for m in names)


class _Unusable(Exception):  # noqa: N818 - internal marker, never seen by callers
    """The chosen endpoint's address cannot carry this request (its ``error`` says why)."""

    def __init__(self, error: ConfigError) -> None:
        super().__init__(str(error))
        self.error = error


async def _close(response: httpx.Response) -> None:
    """A failed response another attempt replaces: release its connection."""
    await response.aclose()


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
