"""What a client observes of a failed call, and the exception its library would raise.

A scenario's endpoints fail the way a client sees them fail: a gRPC status (with optional
trailing metadata), an HTTP status (with optional ``Retry-After``), a timeout, a refused
connection. The simulator turns each observation into the exception the client's library
raises for it (``grpc.aio.AioRpcError``, ``httpx.HTTPStatusError`` / ``ReadTimeout`` /
``ConnectError``, or the builtin ``TimeoutError`` / ``ConnectionRefusedError`` for a plain
client) and hands it to the configuration's classifier, exactly as ``LoadBalancer.call``
does. So a scenario's faults are judged by the same code that judges production's.

:class:`Stated` is the one observation that is not a wire event: the client's own code
raised :class:`~poise_py.FaultError` naming the tier itself (the TOML ``fault = "..."``
form). Every classifier honours it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TypeAlias

import attrs

from .. import Classifier, ConfigError, Fault, FaultError, default_classifier
from .. import classify as presets
from .._internal import install_hint

_ADDRESS = "http://endpoint.invalid/"


class Protocol(enum.Enum):
    """The client library a scenario simulates: it decides what a timeout or a refusal raises."""

    GRPC = "grpc"
    """``grpc.aio``: a timeout is DEADLINE_EXCEEDED, a refused connection UNAVAILABLE."""
    HTTP = "http"
    """httpx: a timeout is ``ReadTimeout``, a refused connection ``ConnectError``."""
    PLAIN = "plain"
    """A socket client: ``TimeoutError`` and ``ConnectionRefusedError``."""


@attrs.frozen(kw_only=True)
class GrpcStatus:
    """A gRPC call ended with ``code`` (a ``grpc.StatusCode`` name) and trailing metadata."""

    code: str
    trailing: tuple[tuple[str, str], ...] = ()


@attrs.frozen(kw_only=True)
class HttpStatus:
    """An HTTP response with status ``status`` (>= 400), optionally with ``Retry-After``.

    ``headers`` are further response headers (a provider's ``x-ratelimit-*`` family).
    """

    status: int
    retry_after: float | None = None
    headers: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class Timeout:
    """No answer before the client's deadline (a black hole, or a response slower than it)."""


@attrs.frozen
class Refused:
    """Nothing listens: the connection is refused at once."""


@attrs.frozen(kw_only=True)
class Throttled:
    """A rate limiter said no: 429 with Retry-After over HTTP, RESOURCE_EXHAUSTED over gRPC.

    ``headers`` are what the limiter says besides (a provider's ``x-ratelimit-*`` family):
    response headers over HTTP, trailing metadata over gRPC.
    """

    retry_after: float | None = None
    headers: tuple[tuple[str, str], ...] = ()


@attrs.frozen(kw_only=True)
class Overloaded:
    """The endpoint's queue is full: it sheds the call at once with its protocol's overload status.

    HTTP 503 (with ``Retry-After`` when given), gRPC UNAVAILABLE (as Envoy and grpc-go
    answer a call over their limits), and for a plain client a refused connection.
    """

    retry_after: float | None = None


@attrs.frozen(kw_only=True)
class Stated:
    """The client's own code raised ``FaultError(fault, retry_after=...)``."""

    fault: Fault
    retry_after: float | None = None


Observation: TypeAlias = GrpcStatus | HttpStatus | Timeout | Refused | Throttled | Overloaded | Stated


def grpc_code(name: object, where: str) -> str:
    """A validated gRPC status name (upper case), or ConfigError."""
    if not isinstance(name, str):
        raise ConfigError(where, f"must be a gRPC status name, got {name!r}")
    upper = name.upper()
    if upper == "OK" or upper not in _GRPC_NAMES:
        raise ConfigError(where, f"unknown gRPC status {name!r}; one of {sorted(_GRPC_NAMES - {'OK'})}")
    return upper


_GRPC_NAMES = frozenset(
    {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    }
)


def _grpc_error(code: str, trailing: tuple[tuple[str, str], ...], details: str) -> Exception:
    try:
        import grpc  # noqa: PLC0415 - only scenarios that speak gRPC need it
        from grpc.aio import AioRpcError, Metadata  # noqa: PLC0415
    except ImportError:
        raise ConfigError("client.protocol", f"a gRPC scenario needs grpcio: {install_hint('grpc')}") from None
    return AioRpcError(grpc.StatusCode[code], Metadata(), Metadata(*trailing), details)


def _httpx() -> object:
    try:
        import httpx  # noqa: PLC0415 - only scenarios that speak HTTP need it
    except ImportError:
        raise ConfigError("client.protocol", f"an HTTP scenario needs httpx: {install_hint('httpx')}") from None
    return httpx


def _http_status_error(status: int, retry_after: float | None, extra: tuple[tuple[str, str], ...] = ()) -> Exception:
    import httpx  # noqa: PLC0415

    request = httpx.Request("GET", _ADDRESS)
    headers = dict(extra)
    if retry_after is not None:
        headers["Retry-After"] = f"{retry_after:g}"
    response = httpx.Response(status, headers=headers, request=request)
    return httpx.HTTPStatusError(f"status {status}", request=request, response=response)


def exception_for(observation: Observation, protocol: Protocol) -> Exception:
    """The exception a client speaking ``protocol`` raises when it observes ``observation``."""
    match observation:
        case Stated(fault=fault, retry_after=retry_after):
            return FaultError(fault, retry_after=retry_after)
        case GrpcStatus(code=code, trailing=trailing):
            return _grpc_error(code, trailing, code.lower())
        case HttpStatus(status=status, retry_after=retry_after, headers=headers):
            _httpx()
            return _http_status_error(status, retry_after, headers)
    if isinstance(observation, Overloaded):
        return _overloaded(observation, protocol)
    if protocol is Protocol.GRPC:
        if isinstance(observation, Timeout):
            return _grpc_error("DEADLINE_EXCEEDED", (), "Deadline Exceeded")
        if isinstance(observation, Refused):
            return _grpc_error("UNAVAILABLE", (), "failed to connect to all addresses: Connection refused")
        trailing = observation.headers
        if observation.retry_after is not None:
            trailing = (("retry-after", f"{observation.retry_after:g}"), *trailing)
        return _grpc_error("RESOURCE_EXHAUSTED", trailing, "rate limited")
    if protocol is Protocol.HTTP:
        import httpx  # noqa: PLC0415 - checked when the scenario was loaded

        request = httpx.Request("GET", _ADDRESS)
        if isinstance(observation, Timeout):
            return httpx.ReadTimeout("timed out", request=request)
        if isinstance(observation, Refused):
            return httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return _http_status_error(429, observation.retry_after, observation.headers)
    if isinstance(observation, Timeout):
        return TimeoutError("timed out")
    if isinstance(observation, Refused):
        return ConnectionRefusedError(111, "Connection refused")
    return FaultError(Fault.TRANSIENT, "rate limited", retry_after=observation.retry_after)


def _overloaded(observation: Overloaded, protocol: Protocol) -> Exception:
    if protocol is Protocol.GRPC:
        retry_after = observation.retry_after
        trailing = () if retry_after is None else (("retry-after", f"{retry_after:g}"),)
        return _grpc_error("UNAVAILABLE", trailing, "overloaded: queue full")
    if protocol is Protocol.HTTP:
        _httpx()
        return _http_status_error(503, observation.retry_after)
    return ConnectionRefusedError(111, "Connection refused (listen backlog full)")


class ClassifierName(enum.Enum):
    """The classifier a configuration names."""

    DEFAULT = "default"
    GRPC = "grpc"
    HTTP = "http"


@attrs.frozen(kw_only=True)
class Client:
    """The simulated client: its library, and how its classifier is built.

    Attributes:
        protocol: what a timeout or a refused connection raises.
        classifier: the classifier the built-in configurations use (default: the
            protocol's preset, ``classify.grpc()`` / ``classify.http()`` /
            ``default_classifier``).
        marker: ``classify.grpc(marker=...)``: the trailing-metadata pair of a deliberate
            INTERNAL (FATAL).
        gateway: ``classify.http(gateway=...)``: the fault of a 502/503/504.
    """

    protocol: Protocol = Protocol.PLAIN
    classifier: ClassifierName | None = None
    marker: tuple[str, str] | None = None
    gateway: Fault = Fault.SUSPECT

    def check(self) -> None:
        """Fail now (ConfigError) if the client's library is not installed."""
        if self.protocol is Protocol.GRPC:
            _grpc_error("UNKNOWN", (), "check")
        elif self.protocol is Protocol.HTTP:
            _httpx()

    def build(self, name: ClassifierName | None = None) -> Classifier:
        """The classifier ``name`` (default: this client's) with this client's options."""
        chosen = (
            name
            or self.classifier
            or ClassifierName(self.protocol.value if self.protocol is not Protocol.PLAIN else "default")
        )
        factories: dict[ClassifierName, Callable[[], Classifier]] = {
            ClassifierName.DEFAULT: lambda: default_classifier,
            ClassifierName.GRPC: lambda: presets.grpc(marker=self.marker),
            ClassifierName.HTTP: lambda: presets.http(gateway=self.gateway),
        }
        return factories[chosen]()


class Observer:
    """One run's exceptions, built once per distinct observation (classifiers only read them)."""

    __slots__ = ("_cache", "_protocol")

    def __init__(self, protocol: Protocol) -> None:
        self._protocol = protocol
        self._cache: dict[Observation, Exception] = {}

    def exception(self, observation: Observation) -> Exception:
        """The exception for ``observation``."""
        exc = self._cache.get(observation)
        if exc is None:
            exc = self._cache[observation] = exception_for(observation, self._protocol)
        return exc
