"""A balanced ``grpc.aio`` channel (extra ``poise_py[grpc]``; asyncio only).

::

    from poise_py.contrib.grpc import BalancedChannel, ChannelFactory

    channels = ChannelFactory()
    lb = poise.LoadBalancer(
        discovery,
        endpoint_factory=channels,        # one grpc.aio channel per endpoint
        endpoint_close=channels.close,    # closed on removal and when the balancer stops
        classifier=poise.classify.grpc(),
    )
    async with lb:
        stub = WorkerStub(BalancedChannel(lb, idempotent={"/wool.Worker/Status"}))
        reply = await stub.Dispatch(request, timeout=5.0)

The factory opens one channel per endpoint as it joins; its ``ready()`` follows the
channel's connectivity state, so an endpoint joins the pool once its channel is READY and
is quarantined if the channel falls into TRANSIENT_FAILURE first (see docs/discovery.md,
"Readiness"). :class:`BalancedChannel` offers the four multi-callable factories of
``grpc.aio.Channel``, so generated stubs take it unchanged. Each call takes a permit,
goes to that endpoint's channel and reports its outcome through the classifier (default
:func:`poise_py.classify.grpc`); ``timeout=`` bounds the whole call, retries included. A
unary-unary method named in ``idempotent`` is retried on an endpoint not yet tried after
a TRANSIENT, SUSPECT, FATAL or PERMANENT outcome, within ``attempts``, the deadline and
the balancer's retry budget (the retry decision ``lb.call`` uses,
:class:`~poise_py._core._retry.RetryLoop` from ``lb._internals``, told the time left and
the pool's size). A unary-unary method the channel's ``hedge=`` covers is hedged, and
``wait=`` lets a unary-unary call's first attempt wait for an eligible endpoint, both on
the retry driver ``lb.call`` uses (``lb._internals.attempts`` and ``hedged``). A
streaming call holds its permit until its response stream ends. grpc.aio runs on asyncio
only: on Trio every call raises :class:`AsyncioOnlyError`. The channel uses the
balancer's public API plus that one internal interface.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Callable, Collection, Hashable, Iterable, Mapping
from typing import Any

from .._internal import missing_extra

try:
    import grpc
    from grpc import aio
except ModuleNotFoundError as _missing:  # pragma: no cover - exercised in a subprocess by the packaging test
    raise ModuleNotFoundError(missing_extra("poise_py.contrib.grpc", "grpc"), name=_missing.name) from None

from .. import (
    Classification,
    Classifier,
    ConfigError,
    Endpoint,
    Fault,
    Hedge,
    LoadBalancer,
    Permit,
    load_report_from_metadata,
)
from .. import classify as _classify
from .._internal import check_attempts, check_duration, classifier_problem, hedged
from ._outcome import report_verdict

__all__ = ["AsyncioOnlyError", "BalancedChannel", "ChannelFactory", "GrpcEndpoint", "endpoint_target"]

Serializer = Callable[[Any], bytes] | None
Deserializer = Callable[[bytes], Any] | None
KeyFn = Callable[[str, Any], Hashable]


class AsyncioOnlyError(RuntimeError):
    """grpc.aio was used off asyncio (on Trio, say): it runs on asyncio's event loop only."""


def _report_load(permit: Permit, metadata: Any) -> None:
    """Hand an ORCA report in a call's trailing metadata (``endpoint-load-metrics-bin``) to its permit."""
    if metadata:
        report = load_report_from_metadata(metadata)
        if report is not None:
            permit.report_load(report)


async def _answer(call: Any, permit: Permit) -> Any:
    """Await a unary-response call; the load report in its trailers (an error's too) goes to ``permit``."""
    try:
        response = await call
    except aio.AioRpcError as exc:
        _report_load(permit, exc.trailing_metadata())
        raise
    _report_load(permit, await call.trailing_metadata())
    return response


def _require_asyncio() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise AsyncioOnlyError(
            "poise_py.contrib.grpc: grpc.aio runs on asyncio only, and no asyncio loop is running here "
            "(Trio?). Run this balancer under asyncio (anyio.run(..., backend='asyncio')), or take the permit "
            "yourself (async with lb.acquire()) and make the sync grpc call in a worker thread (anyio.to_thread)."
        ) from None


def _items(knob: str, value: object, what: str) -> tuple[Any, ...]:
    """``value`` as a tuple, if it is a collection (one bare string is not)."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigError(knob, f"must be {what}, got {value!r:.80}")
    return tuple(value)


def endpoint_target(endpoint: Endpoint) -> str:
    """The gRPC target for ``endpoint.address``: a ``"host:port"`` string or a ``(host, port)`` pair.

    Raises:
        ConfigError: the endpoint has no usable address.
    """
    address = endpoint.address
    if isinstance(address, tuple) and len(address) == 2:
        host, port = address
        if isinstance(host, str) and host and isinstance(port, int) and not isinstance(port, bool):
            return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if isinstance(address, str) and address:
        return address
    raise ConfigError(
        "Endpoint.address",
        f"endpoint {endpoint.id!r} needs a 'host:port' string or a (host, port) pair, got {address!r}",
    )


class GrpcEndpoint:
    """What :class:`ChannelFactory` builds for one endpoint: its ``grpc.aio`` channel.

    Reach it as ``permit.resource``. ``ready()`` is the balancer's readiness check.
    """

    def __init__(self, endpoint: Endpoint, channel: aio.Channel) -> None:
        self.endpoint = endpoint
        self.channel = channel
        self._callables: dict[tuple[str, str, Serializer, Deserializer, bool], Any] = {}

    async def ready(self) -> bool:
        """Connect, and wait for READY; False as soon as the channel reports TRANSIENT_FAILURE."""
        channel = self.channel
        state = channel.get_state(try_to_connect=True)
        while state is not grpc.ChannelConnectivity.READY:
            if state in (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN):
                return False
            await channel.wait_for_state_change(state)
            state = channel.get_state(try_to_connect=True)
        return True

    def multicallable(
        self, kind: str, method: str, serializer: Serializer, deserializer: Deserializer, *, registered: bool
    ) -> Any:
        """The channel's multi-callable of ``kind`` for ``method`` (built once, then reused)."""
        key = (kind, method, serializer, deserializer, registered)
        found = self._callables.get(key)
        if found is None:
            factory = getattr(self.channel, kind)
            found = self._callables[key] = factory(
                method,
                request_serializer=serializer,
                response_deserializer=deserializer,
                _registered_method=registered,
            )
        return found

    async def aclose(self) -> None:
        """Close the channel (calls still running on it are cancelled)."""
        await self.channel.close()

    def __repr__(self) -> str:
        return f"<GrpcEndpoint {self.endpoint.id!r}>"


class ChannelFactory:
    """An endpoint factory opening one ``grpc.aio`` channel per endpoint.

    Pass it as ``endpoint_factory=`` and its :meth:`close` as ``endpoint_close=``.

    Args:
        target: endpoint -> gRPC target (default :func:`endpoint_target`).
        credentials: channel credentials for a secure channel; None for plaintext.
        options: channel arguments, as for ``grpc.aio.insecure_channel``.
        compression: the channel's default compression.
        interceptors: client interceptors for every channel.
    """

    def __init__(
        self,
        *,
        target: Callable[[Endpoint], str] = endpoint_target,
        credentials: grpc.ChannelCredentials | None = None,
        options: Collection[tuple[str, Any]] = (),
        compression: grpc.Compression | None = None,
        interceptors: Collection[Any] | None = None,
    ) -> None:
        if not callable(target):
            raise ConfigError("target", f"must be a callable endpoint -> target, got {target!r}")
        if credentials is not None and not isinstance(credentials, grpc.ChannelCredentials):
            raise ConfigError("credentials", f"must be grpc.ChannelCredentials or None, got {credentials!r:.80}")
        pairs = _items("options", options, "a collection of (name, value) channel arguments")
        if not all(isinstance(o, tuple) and len(o) == 2 and isinstance(o[0], str) for o in pairs):
            raise ConfigError(
                "options", f"must hold (name, value) pairs such as ('grpc.lb_policy_name', ...), got {options!r:.80}"
            )
        if interceptors is not None:
            interceptors = _items("interceptors", interceptors, "a collection of client interceptors or None")
        self._target = target
        self._credentials = credentials
        self._options = pairs
        self._compression = compression
        self._interceptors = list(interceptors) if interceptors is not None else None

    def __call__(self, endpoint: Endpoint) -> GrpcEndpoint:
        """Open the channel of ``endpoint`` (on asyncio; :class:`AsyncioOnlyError` elsewhere)."""
        _require_asyncio()
        target = self._target(endpoint)
        if self._credentials is None:
            channel = aio.insecure_channel(
                target, options=self._options, compression=self._compression, interceptors=self._interceptors
            )
        else:
            channel = aio.secure_channel(
                target,
                self._credentials,
                options=self._options,
                compression=self._compression,
                interceptors=self._interceptors,
            )
        return GrpcEndpoint(endpoint, channel)

    async def close(self, resource: GrpcEndpoint) -> None:
        """Close what :meth:`__call__` opened."""
        await resource.aclose()


def _checked(permit: Permit) -> Permit:
    """``permit``, if its resource is a :class:`GrpcEndpoint`; else it is cancelled and ConfigError raised."""
    if not isinstance(permit.resource, GrpcEndpoint):
        permit.cancel()
        raise ConfigError(
            "endpoint_factory",
            f"BalancedChannel needs GrpcEndpoint resources (endpoint_factory=ChannelFactory()); "
            f"endpoint {permit.endpoint.id!r} has {permit.resource!r}",
        )
    return permit


def _check_hedge(hedge: object) -> tuple[Hedge | None, dict[str, Hedge]]:
    """``hedge=`` as (the Hedge for every method, the Hedge of each method named), or ConfigError."""
    if hedge is None or isinstance(hedge, Hedge):
        return hedge, {}
    what = "a poise.Hedge(...), a mapping of '/package.Service/Method' names to one each, or None"
    if not isinstance(hedge, Mapping):
        raise ConfigError("hedge", f"must be {what}, got {hedge!r:.80}")
    for method, each in hedge.items():
        if not (isinstance(method, str) and method.startswith("/")) or not isinstance(each, Hedge):
            raise ConfigError("hedge", f"must be {what}, got {method!r:.80}: {each!r:.80}")
    return None, dict(hedge)


class BalancedChannel:
    """A ``grpc.aio.Channel`` look-alike whose every call goes through ``lb``.

    The balancer's endpoint factory must be a :class:`ChannelFactory` (or build
    :class:`GrpcEndpoint` resources).

    Args:
        lb: the balancer (calls raise ``NotRunning`` outside ``async with lb``).
        classifier: exception -> fault (default :func:`poise_py.classify.grpc`).
        idempotent: full method names (``"/package.Service/Method"``) of unary-unary
            methods that may be sent again to another endpoint.
        attempts: tries per call of an idempotent method (default 3).
        key: ``(method, request) -> key`` for hashing policies (None: no key).
        hedge: hedged calls of unary-unary methods: a :class:`poise_py.Hedge` for every
            one (only if every method is safe to send twice), or a mapping of full method
            names to a Hedge each (methods absent are not hedged); None (default): no
            hedging. A hedged call is sent again to an endpoint not yet tried when no
            answer came within the hedge's delay; the first success is the answer and the
            others are cancelled through their permits (no strike, no success). It makes at
            most ``max(attempts, hedge.max_attempts)`` attempts (``hedge.max_attempts`` for
            a method not in ``idempotent``), retries included, as ``lb.call`` does. Latency
            is measured per method. Streaming calls are never hedged.
        wait: seconds a unary-unary call's first attempt waits, first come first served,
            for an eligible endpoint when none is (``lb.acquire(wait=...)``), within the
            call's ``timeout``; None (default) raises the selection error at once.
            Retries, hedges and streaming calls never wait.
    """

    def __init__(
        self,
        lb: LoadBalancer,
        *,
        classifier: Classifier | None = None,
        idempotent: Collection[str] = (),
        attempts: int = 3,
        key: KeyFn | None = None,
        hedge: Hedge | Mapping[str, Hedge] | None = None,
        wait: float | None = None,
    ) -> None:
        if not isinstance(lb, LoadBalancer):
            raise ConfigError("lb", f"must be a LoadBalancer, got {lb!r}")
        if classifier is not None and not callable(classifier):
            raise ConfigError("classifier", classifier_problem(classifier))
        what = "a collection of '/package.Service/Method' names"
        methods = _items("idempotent", idempotent, what)
        if not all(isinstance(m, str) and m.startswith("/") for m in methods):
            raise ConfigError("idempotent", f"must be {what}, got {idempotent!r:.80}")
        check_attempts(attempts)
        if key is not None and not callable(key):
            raise ConfigError("key", f"must be a callable (method, request) -> key, got {key!r}")
        self._hedge_all, self._hedges = _check_hedge(hedge)
        if wait is not None:
            wait = check_duration("wait", wait, allow_zero=True)
        self._wait = wait
        self._lb = lb
        self._classifier = classifier if classifier is not None else _classify.grpc()
        self._idempotent = frozenset(methods)
        self._attempts = attempts
        self._key = key

    # -- the grpc.aio.Channel surface ----------------------------------------------------

    def unary_unary(
        self,
        method: str,
        request_serializer: Serializer = None,
        response_deserializer: Deserializer = None,
        _registered_method: bool = False,  # noqa: FBT001, FBT002 - generated stubs pass it
        *,
        idempotent: bool | None = None,
    ) -> UnaryUnary:
        """A callable for a unary-unary method; ``idempotent=True`` opts it into retries (``hedge=``: hedging)."""
        if idempotent is not None and not isinstance(idempotent, bool):  # "no" would be true
            raise ConfigError("idempotent", f"must be True, False or None, got {idempotent!r:.80}")
        retry = method in self._idempotent if idempotent is None else idempotent
        return UnaryUnary(
            self,
            method,
            request_serializer,
            response_deserializer,
            registered=_registered_method,
            retry=retry,
            hedge=self._hedges.get(method, self._hedge_all),
        )

    def unary_stream(
        self,
        method: str,
        request_serializer: Serializer = None,
        response_deserializer: Deserializer = None,
        _registered_method: bool = False,  # noqa: FBT001, FBT002 - generated stubs pass it
    ) -> StreamingCallable:
        """A callable for a unary-stream method; its calls hold a permit until the stream ends."""
        return StreamingCallable(
            self, "unary_stream", method, request_serializer, response_deserializer, registered=_registered_method
        )

    def stream_unary(
        self,
        method: str,
        request_serializer: Serializer = None,
        response_deserializer: Deserializer = None,
        _registered_method: bool = False,  # noqa: FBT001, FBT002 - generated stubs pass it
    ) -> StreamUnary:
        """A callable for a stream-unary method (never retried: the request stream is spent)."""
        return StreamUnary(self, method, request_serializer, response_deserializer, registered=_registered_method)

    def stream_stream(
        self,
        method: str,
        request_serializer: Serializer = None,
        response_deserializer: Deserializer = None,
        _registered_method: bool = False,  # noqa: FBT001, FBT002 - generated stubs pass it
    ) -> StreamingCallable:
        """A callable for a stream-stream method; its calls hold a permit until the stream ends."""
        return StreamingCallable(
            self, "stream_stream", method, request_serializer, response_deserializer, registered=_registered_method
        )

    async def channel_ready(self) -> None:
        """Wait until some endpoint's channel is READY (``lb.wait_ready()``, no timeout)."""
        await self._lb.wait_ready()

    async def close(self, grace: float | None = None) -> None:
        """Nothing to close here: the balancer's ``endpoint_close`` closes the channels."""

    async def __aenter__(self) -> BalancedChannel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- shared by the callables ---------------------------------------------------------

    def _acquire(self, method: str, request: Any) -> Permit:
        _require_asyncio()
        key = self._key(method, request) if self._key is not None else None
        return _checked(self._lb.acquire(key=key))

    def _fail(self, permit: Permit, exc: Exception) -> Fault:
        """Report a failed call on ``permit``; returns the fault recorded."""
        try:
            verdict: object = self._classifier(exc)
        except Exception:  # noqa: BLE001 - a broken classifier must not lose the outcome
            verdict = Fault.SUSPECT
        if not isinstance(verdict, Fault | Classification):
            verdict = Fault.SUSPECT
        return report_verdict(permit, verdict)


class _BalancedCallable:
    """What every balanced multicallable holds: its channel, method and (de)serializers."""

    def __init__(
        self,
        channel: BalancedChannel,
        kind: str,
        method: str,
        serializer: Serializer,
        deserializer: Deserializer,
        *,
        registered: bool,
    ) -> None:
        self._channel = channel
        self._kind = kind
        self._method = method
        self._serializer = serializer
        self._deserializer = deserializer
        self._registered = registered

    def _stub(self, permit: Permit) -> Any:
        """The permit's endpoint channel's own multicallable for this method."""
        return permit.resource.multicallable(
            self._kind, self._method, self._serializer, self._deserializer, registered=self._registered
        )


class UnaryUnary(_BalancedCallable):
    """The balanced counterpart of ``grpc.aio.UnaryUnaryMultiCallable``: ``await it(request)``."""

    def __init__(
        self,
        channel: BalancedChannel,
        method: str,
        serializer: Serializer,
        deserializer: Deserializer,
        *,
        registered: bool,
        retry: bool,
        hedge: Hedge | None = None,
    ) -> None:
        super().__init__(channel, "unary_unary", method, serializer, deserializer, registered=registered)
        self._retry = retry
        self._hedge = hedge

    async def __call__(self, request: Any, *, timeout: float | None = None, **kwargs: Any) -> Any:  # noqa: ASYNC109 - grpc's own signature
        """Send ``request`` to a chosen endpoint; ``timeout`` bounds every attempt together, the wait included.

        Other keyword arguments (``metadata``, ``credentials``, ``wait_for_ready``,
        ``compression``) go to each attempt unchanged.
        """
        _require_asyncio()
        timeout = _check_timeout(timeout)
        channel = self._channel
        internals = channel._lb._internals
        key = channel._key(self._method, request) if channel._key is not None else None
        attempts = channel._attempts if self._retry else 1
        hedge = self._hedge
        if hedge is not None:
            attempts = max(attempts, hedge.max_attempts)
        wait = channel._wait
        if wait is not None and isinstance(timeout, int | float):
            wait = max(0.0, min(wait, timeout))  # the call's deadline includes its wait
        tries = internals.attempts(attempts, key=key, classify=channel._classifier, timeout=timeout, wait=wait)

        async def once(attempt: Any) -> Any:  # attempt: the driver's AttemptScope
            permit = _checked(attempt.permit)
            return await _answer(self._stub(permit)(request, timeout=tries.time_left(), **kwargs), permit)

        if hedge is not None:
            return await hedged(tries, internals.hedging(hedge, self._method), once, now=internals.now)
        async for attempt in tries:
            async with attempt:
                return await once(attempt)
        return tries.outcome()  # nowhere else to go: raises the last real error


def _check_timeout(timeout: object) -> float | None:
    """A call's ``timeout``: None or a finite number of seconds >= 0, else a ConfigError naming it.

    Checked before anything is sent: grpc.aio would fail a NaN or infinite deadline locally as
    DEADLINE_EXCEEDED, which would be charged to every endpoint tried.
    """
    return None if timeout is None else check_duration("timeout", timeout, allow_zero=True)  # type: ignore[arg-type]


class StreamUnary(_BalancedCallable):
    """The balanced counterpart of ``grpc.aio.StreamUnaryMultiCallable``: ``await it(requests)``."""

    def __init__(
        self,
        channel: BalancedChannel,
        method: str,
        serializer: Serializer,
        deserializer: Deserializer,
        *,
        registered: bool,
    ) -> None:
        super().__init__(channel, "stream_unary", method, serializer, deserializer, registered=registered)

    async def __call__(
        self,
        request_iterator: AsyncIterable[Any] | Any = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - grpc's own signature
        **kwargs: Any,
    ) -> Any:
        """Stream ``request_iterator`` to a chosen endpoint and return its one response."""
        timeout = _check_timeout(timeout)
        channel = self._channel
        permit = channel._acquire(self._method, None)
        stub = self._stub(permit)
        try:
            response = await _answer(stub(request_iterator, timeout=timeout, **kwargs), permit)
        except Exception as exc:
            channel._fail(permit, exc)
            raise
        except BaseException:
            permit.cancel()
            raise
        permit.succeed()
        return response


class StreamingCallable(_BalancedCallable):
    """The balanced counterpart of ``UnaryStreamMultiCallable`` / ``StreamStreamMultiCallable``."""

    def __call__(self, request: Any = None, *, timeout: float | None = None, **kwargs: Any) -> StreamCall:
        """Start the call now on a chosen endpoint: a request (unary-stream) or request iterator."""
        timeout = _check_timeout(timeout)
        channel = self._channel
        permit = channel._acquire(self._method, request if self._kind == "unary_stream" else None)
        stub = self._stub(permit)
        try:
            call = stub(request, timeout=timeout, **kwargs)
        except Exception as exc:
            channel._fail(permit, exc)
            raise
        return StreamCall(channel, permit, call)


class StreamCall:
    """A streaming call holding its permit until the response stream ends.

    Iterate it (``async for response in call``) or ``await call.read()``. The end of the
    stream reports the outcome: OK -> success, an error status -> the classifier's fault,
    :meth:`cancel` or the task's cancellation -> cancellation (not a fault). Leaving the
    loop early without :meth:`cancel` keeps the permit until the call is collected.
    """

    def __init__(self, channel: BalancedChannel, permit: Permit, call: Any) -> None:
        self._channel = channel
        self._permit = permit
        self._call = call

    @property
    def permit(self) -> Permit:
        """The permit this call holds (``permit.endpoint`` is where it went)."""
        return self._permit

    def __aiter__(self) -> StreamCall:
        return self

    async def __anext__(self) -> Any:
        response = await self.read()
        if response is aio.EOF:
            raise StopAsyncIteration
        return response

    async def read(self) -> Any:
        """The next response, or ``grpc.aio.EOF`` once the stream has ended."""
        permit = self._permit
        if permit.done:
            return aio.EOF
        try:
            response = await self._call.read()
            if response is aio.EOF:
                _report_load(permit, await self._call.trailing_metadata())
        except Exception as exc:
            if not permit.done:
                if isinstance(exc, aio.AioRpcError):
                    _report_load(permit, exc.trailing_metadata())
                self._channel._fail(permit, exc)
            raise
        except BaseException:
            if not permit.done:
                permit.cancel()
            raise
        if response is aio.EOF and not permit.done:
            permit.succeed()
        return response

    async def write(self, request: Any) -> None:
        """Send one more request (stream-stream calls without a request iterator)."""
        await self._call.write(request)

    async def done_writing(self) -> None:
        """Close the request stream."""
        await self._call.done_writing()

    def cancel(self) -> bool:
        """Cancel the call; its permit ends as a cancellation (not a fault)."""
        if not self._permit.done:
            self._permit.cancel()
        return bool(self._call.cancel())

    async def code(self) -> grpc.StatusCode:
        """The call's status code (waits for the end)."""
        code: grpc.StatusCode = await self._call.code()
        return code

    async def trailing_metadata(self) -> Any:
        """The call's trailing metadata (waits for the end)."""
        return await self._call.trailing_metadata()
