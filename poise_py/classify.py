"""Classifier presets: exception -> :class:`~poise_py.Fault` for gRPC and HTTP.

Each preset is a factory returning a plain classifier function, so composing your own is
ordinary code::

    base = poise.classify.http()

    def mine(exc: BaseException) -> poise.Fault | poise.Classification:
        if isinstance(exc, MyQuotaError):
            return poise.Classification(poise.Fault.TRANSIENT, retry_after=60)
        return base(exc)

Neither preset imports grpc or httpx: they read what those libraries' exceptions carry
(``code()`` and ``trailing_metadata()``; ``response.status_code`` and
``response.headers``), so they cost nothing when the library is absent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from ._default_classifier import Classifier, default_classifier
from ._errors import ConfigError
from ._faults import Classification, Fault
from ._load_report import _pairs, _text
from ._quota import quota_from_headers, retry_after_ms, retry_after_seconds

_LOAD_FAULTS = (Fault.SUSPECT, Fault.TRANSIENT)
"""Only a strike or a skip can be load-shaped; an override to FATAL, PERMANENT or CALLER is meant."""

__all__ = [
    "GRPC_OVERLOAD",
    "HTTP_OVERLOAD",
    "Classifier",
    "default_classifier",
    "grpc",
    "http",
    "http_status",
    "llm",
    "parse_retry_after",
]

GRPC_DEFAULTS: Mapping[str, Fault] = {
    "UNAVAILABLE": Fault.TRANSIENT,
    "DEADLINE_EXCEEDED": Fault.TRANSIENT,
    "RESOURCE_EXHAUSTED": Fault.TRANSIENT,
    "INTERNAL": Fault.SUSPECT,
    "UNKNOWN": Fault.SUSPECT,
    "DATA_LOSS": Fault.SUSPECT,
    "UNIMPLEMENTED": Fault.FATAL,
    "UNAUTHENTICATED": Fault.PERMANENT,
    "PERMISSION_DENIED": Fault.PERMANENT,
    "INVALID_ARGUMENT": Fault.CALLER,
    "NOT_FOUND": Fault.CALLER,
    "ALREADY_EXISTS": Fault.CALLER,
    "FAILED_PRECONDITION": Fault.CALLER,
    "OUT_OF_RANGE": Fault.CALLER,
    "ABORTED": Fault.CALLER,
    "CANCELLED": Fault.CALLER,
}
"""The gRPC status -> fault table (seed 000): UNAVAILABLE, DEADLINE_EXCEEDED and
RESOURCE_EXHAUSTED skip without a strike; an unmarked INTERNAL is a strike; the
caller's own errors never touch the endpoint's health."""

GRPC_OVERLOAD: frozenset[str] = frozenset({"DEADLINE_EXCEEDED"})
"""The gRPC statuses that say the endpoint is loaded: their :class:`~poise_py.Classification`
carries ``overload=True``. UNAVAILABLE does not (it is also what a refused connection
gives, the sign of a dead endpoint), nor RESOURCE_EXHAUSTED (a quota: this endpoint's own)."""

HTTP_OVERLOAD: frozenset[int] = frozenset({503, 504, 529})
"""The HTTP statuses that say the endpoint is loaded (``overload=True``; 529 is the "overloaded"
answer of Anthropic's API and some proxies); a 429 is a quota, this endpoint's own answer, and
counts as ever."""


def _status_name(code: object) -> str | None:
    name = getattr(code, "name", None)
    return name if isinstance(name, str) else None


def _metadata_pairs(metadata: object) -> Iterable[tuple[str, object]]:
    if metadata is None:
        return ()
    items: object = metadata
    if isinstance(metadata, Mapping):
        items = metadata.items()
    pairs: list[tuple[str, object]] = []
    try:
        for item in items:  # type: ignore[attr-defined]
            key = getattr(item, "key", None)
            if key is None and isinstance(item, tuple) and len(item) == 2:
                key, value = item
            else:
                value = getattr(item, "value", None)
            if isinstance(key, str):
                pairs.append((key.lower(), value))
    except TypeError:
        return ()
    return pairs


def grpc(
    *,
    marker: tuple[str, str] | None = None,
    overrides: Mapping[str, Fault] | None = None,
    fallback: Classifier = default_classifier,
) -> Classifier:
    """A classifier for grpc (sync ``grpc.RpcError`` and ``grpc.aio.AioRpcError``).

    Args:
        marker: a ``(key, value)`` trailing-metadata pair the server sets on its own
            deliberate errors (e.g. ``("wool-fault", "worker-internal")``); an INTERNAL
            carrying it is FATAL (evict now), an INTERNAL without it is SUSPECT (a strike).

    A server's pushback (gRFC A6: a ``grpc-retry-pushback-ms`` trailer holding a
    non-negative integer) becomes the classification's ``retry_after`` in seconds: the
    circuit stays open at least that long, and ``lb.call(backoff=...)`` waits that long
    before its retry. A malformed or negative one is ignored.
        overrides: status name -> fault, applied over :data:`GRPC_DEFAULTS`.
        fallback: for exceptions that are not gRPC errors.
    """
    table = dict(GRPC_DEFAULTS)
    for name, fault in (overrides or {}).items():
        if not isinstance(fault, Fault):
            raise ConfigError("overrides", f"{name!r} must map to a Fault, got {fault!r}")
        table[name.upper()] = fault
    if marker is not None and (
        not isinstance(marker, tuple) or len(marker) != 2 or not all(isinstance(m, str) for m in marker)
    ):
        raise ConfigError("marker", f"must be a (key, value) pair of strings, got {marker!r}")
    marker_key = marker[0].lower() if marker else None
    marker_value = marker[1] if marker else None

    def classify(exc: BaseException) -> Fault | Classification:
        code_fn = getattr(exc, "code", None)
        name = _status_name(code_fn()) if callable(code_fn) else None
        if name is None:
            return fallback(exc)
        if name == "INTERNAL" and marker_key is not None:
            trailing = getattr(exc, "trailing_metadata", None)
            pairs = _metadata_pairs(trailing() if callable(trailing) else None)
            if any(k == marker_key and v == marker_value for k, v in pairs):
                return Fault.FATAL
        fault = table.get(name, Fault.SUSPECT)
        overload = name in GRPC_OVERLOAD and fault in _LOAD_FAULTS
        pushback = _pushback(exc) if fault is not Fault.CALLER else None
        if overload or pushback is not None:
            return Classification(fault, retry_after=pushback, overload=overload)
        return fault

    return classify


PUSHBACK = "grpc-retry-pushback-ms"
"""The trailer a gRPC server sets to push a client's retry back (gRFC A6)."""


def _pushback(exc: BaseException) -> float | None:
    """The seconds of a ``grpc-retry-pushback-ms`` trailer on ``exc``, or None (absent, malformed, negative)."""
    trailing = getattr(exc, "trailing_metadata", None)
    if not callable(trailing):
        return None
    try:
        pairs = _metadata_pairs(trailing())
    except Exception:  # noqa: BLE001 - a broken error object has no pushback
        return None
    for key, value in pairs:
        if key == PUSHBACK:
            text = value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
            return int(text) / 1000 if text.isascii() and text.isdigit() and len(text) <= 12 else None
    return None


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds from an HTTP ``Retry-After`` value (delta-seconds or an HTTP-date), or None."""
    return retry_after_seconds(value, now or datetime.now(UTC), lenient=True)


def http_status(
    status: int,
    headers: Mapping[str, str] | None = None,
    *,
    gateway: Fault = Fault.SUSPECT,
) -> Fault | Classification | None:
    """The fault for an HTTP response status, or None for a success (1xx-3xx).

    5xx -> SUSPECT (502/503/504/529 -> ``gateway``); 429 -> TRANSIENT; 401/403 -> PERMANENT;
    other 4xx -> CALLER. On a 429 or 5xx, ``retry-after-ms`` (LLM providers') or
    ``Retry-After`` (digits or an HTTP date, as the RFC writes it and the quota reads it:
    stricter than :func:`parse_retry_after`) becomes ``retry_after``; a 429 without either takes the reset of the
    spent quota its rate-limit headers state (:func:`poise_py.quota_from_headers`). 503, 504
    and 529 are load-shaped: their :class:`~poise_py.Classification` carries
    ``overload=True`` (:data:`HTTP_OVERLOAD`).
    """
    if status < 400:
        return None
    if status == 429:
        fault = Fault.TRANSIENT
    elif status in (401, 403):
        fault = Fault.PERMANENT
    elif status < 500:
        return Fault.CALLER
    elif status in (502, 503, 504, 529):
        fault = gateway
    else:
        fault = Fault.SUSPECT
    retry_after = None
    if headers is not None and (status == 429 or status >= 500):
        retry_after = retry_after_ms(_header(headers, "retry-after-ms"))
        if retry_after is None:
            retry_after = retry_after_seconds(
                _header(headers, "retry-after"), datetime.now(UTC)
            )  # as the quota reads it
        if retry_after is None and status == 429:
            quota = quota_from_headers(headers)
            if quota is not None and quota.exhausted:
                retry_after = quota.resets_in
    overload = status in HTTP_OVERLOAD and fault in _LOAD_FAULTS
    if retry_after or overload:
        return Classification(fault, retry_after=retry_after or None, overload=overload)
    return fault


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """The first value of header ``name`` (any case), as the quota reads it.

    httpx joins a repeated header's values with ``", "`` (``"7, 7"``), which no reader
    takes; its ``multi_items`` give them one by one, and the first is read.
    """
    for key, value in _pairs(headers):
        if isinstance(key, str | bytes) and _text(key).lower() == name and isinstance(value, str | bytes):
            return _text(value)
    return None


_HTTPX_TRANSIENT = {"ConnectTimeout", "PoolTimeout"}
_HTTPX_OVERLOAD = {"ReadTimeout", "WriteTimeout"}
"""The endpoint took the request and did not answer in time: load-shaped (``overload=True``)."""
_HTTPX_CALLER = {
    "UnsupportedProtocol",
    "InvalidURL",
    "LocalProtocolError",
    "DecodingError",
    "TooManyRedirects",
    "StreamConsumed",
}


def http(*, gateway: Fault = Fault.SUSPECT, fallback: Classifier = default_classifier) -> Classifier:
    """A classifier for HTTP errors raised by httpx (or anything carrying a ``response``).

    ``HTTPStatusError`` (from ``raise_for_status()``) maps by :func:`http_status`. httpx
    transport errors: connect and pool timeouts are TRANSIENT (nothing reached the
    server), request-building errors are CALLER, the rest (connect errors, read
    timeouts, resets, protocol errors) are SUSPECT; read and write timeouts, like a 503
    or 504, carry ``overload=True``.

    Args:
        gateway: the fault for 502/503/504 (SUSPECT, or TRANSIENT behind a proxy that
            reports its own overload this way).
        fallback: for exceptions that are neither.
    """
    if not isinstance(gateway, Fault):
        raise ConfigError("gateway", f"must be a Fault, got {gateway!r}")

    def classify(exc: BaseException) -> Fault | Classification:
        response = getattr(exc, "response", None)
        status = getattr(response, "status_code", None) if response is not None else None
        if isinstance(status, int):
            headers = getattr(response, "headers", None)
            verdict = http_status(status, headers if isinstance(headers, Mapping) else None, gateway=gateway)
            return Fault.CALLER if verdict is None else verdict
        for cls in type(exc).__mro__:
            if cls.__module__.startswith("httpx"):
                if cls.__name__ in _HTTPX_TRANSIENT:
                    return Fault.TRANSIENT
                if cls.__name__ in _HTTPX_CALLER:
                    return Fault.CALLER
                if cls.__name__ in _HTTPX_OVERLOAD:
                    return Classification(Fault.SUSPECT, overload=True)
        if type(exc).__module__.startswith("httpx"):
            return Fault.SUSPECT
        return fallback(exc)

    return classify


def llm(*, fallback: Classifier = default_classifier) -> Classifier:
    """The preset for a pool of LLM providers (the LLM gateway): :func:`http` with ``gateway=TRANSIENT``.

    A provider's 502, 503, 504 or 529 ("overloaded") is its whole service shedding load, not
    a broken endpoint: the call moves on to another provider without a strike. A 429 is
    TRANSIENT with its ``retry-after-ms``, ``Retry-After`` or quota reset, as for
    :func:`http`; the transport reads the rate-limit headers of every answer as well
    (docs/backend-signals.md). With :class:`~poise_py.contrib.httpx.PoiseTransport`, pass
    ``gateway=Fault.TRANSIENT`` for the same judgement of answered statuses.
    """
    return http(gateway=Fault.TRANSIENT, fallback=fallback)
