"""ORCA load reports from a grpc.aio server: a server interceptor (extra ``poise_py[grpc]``).

::

    from grpc import aio
    from poise_py.contrib.orca import ServerMetrics, call_metrics
    from poise_py.contrib.orca_grpc import OrcaInterceptor

    metrics = ServerMetrics()
    server = aio.server(interceptors=[OrcaInterceptor(metrics)])

Every call served by an async handler (unary or streaming, either side) ends with its load
report in the trailing metadata twice: ``endpoint-load-metrics-bin`` (the protobuf, as gRPC's
own ORCA interceptors send it and its weighted round robin and Envoy read it), and
``endpoint-load-metrics`` in the HTTP header's form (TEXT by default). The second copy is for
Python: grpcio's core takes ``endpoint-load-metrics-bin`` out of the trailing metadata it hands
to the application (for its own load balancing), so a grpc.aio client, poise_py's included,
can read only the second. The report holds the server's values
(:class:`~poise_py.contrib.orca.ServerMetrics`) under the call's own
(:func:`~poise_py.contrib.orca.call_metrics`, available inside the handler). Trailing
metadata the handler set is kept; a report the handler attached itself wins. Each call is
counted for the default qps and eps (an error: the handler raised, aborted or set a status
other than OK). A call the handler aborts keeps the trailing metadata it aborted with.
Synchronous handlers are passed through untouched.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs

from .. import LoadReportError
from .._internal import missing_extra
from .orca import FORMS, CallMetrics, ServerMetrics, _server_metrics, recording

try:
    import grpc
    from grpc import aio
except ModuleNotFoundError as _missing:  # pragma: no cover - without the extra only
    raise ModuleNotFoundError(missing_extra("poise_py.contrib.orca_grpc", "grpc"), name=_missing.name) from None

TRAILER = "endpoint-load-metrics-bin"
"""The trailing metadata key of the report gRPC's ORCA clients read (the protobuf)."""
READABLE = "endpoint-load-metrics"
"""The trailing metadata key of the same report in the header's form, which Python clients can read."""


def _form(value: str | None) -> str | None:
    if value is not None and value not in FORMS:
        from .. import ConfigError  # noqa: PLC0415 - only on misuse

        raise ConfigError("form", f"must be one of {', '.join(FORMS)} or None, got {value!r:.80}")
    return value


@attrs.define(eq=False)
class OrcaInterceptor(aio.ServerInterceptor):
    """A grpc.aio server interceptor that ends every call with its ORCA load report.

    Attributes:
        metrics: the recorder to report from (default a new
            :class:`~poise_py.contrib.orca.ServerMetrics`).
        form: the form of the second copy, under ``endpoint-load-metrics``: ``"TEXT"``
            (default), ``"JSON"``, ``"BIN"``, or None for none (only ``-bin``, for gRPC's
            own clients).
    """

    metrics: ServerMetrics = attrs.field(default=None, converter=_server_metrics)
    form: str | None = attrs.field(default="TEXT", kw_only=True, converter=_form)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        """Wrap the handler ``continuation`` finds so its calls end with a report."""
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        for kind, make in _KINDS.items():
            behavior = getattr(handler, kind, None)
            if behavior is None:
                continue
            wrapped = self._wrap(behavior)
            if wrapped is None:
                return handler
            return make(
                wrapped,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    def _wrap(self, behavior: Callable[..., Any]) -> Callable[..., Any] | None:
        if inspect.isasyncgenfunction(behavior):
            return self._streaming(behavior)
        if inspect.iscoroutinefunction(behavior):
            return self._awaited(behavior)
        return None

    def _awaited(self, behavior: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def with_report(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
            with recording() as call:
                failed = True
                try:
                    result = await behavior(request, context)
                    failed = _failed(context)
                    return result
                finally:
                    self._finish(context, call, failed=failed)

        return with_report

    def _streaming(self, behavior: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
        async def with_report(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            with recording() as call:
                failed = True
                try:
                    async for response in behavior(request, context):
                        yield response
                    failed = _failed(context)
                finally:
                    self._finish(context, call, failed=failed)

        return with_report

    def _finish(self, context: aio.ServicerContext[Any, Any], call: CallMetrics, *, failed: bool) -> None:
        self.metrics.count(error=failed)
        kept = tuple(context.trailing_metadata() or ())
        if any(key in (TRAILER, READABLE) for key, _ in kept):
            return
        report = self.metrics.report(call)
        added: tuple[tuple[str, str | bytes], ...] = ((TRAILER, report.to_binary()),)
        if self.form is not None:
            try:
                value = report.to_header(self.form)
            except LoadReportError:
                value = report.to_json()
            added += ((READABLE, value),)
        context.set_trailing_metadata((*kept, *added))


def _failed(context: aio.ServicerContext[Any, Any]) -> bool:
    code = context.code()
    return code is not None and code not in (grpc.StatusCode.OK, 0)


_KINDS: dict[str, Callable[..., grpc.RpcMethodHandler[Any, Any]]] = {
    "unary_unary": grpc.unary_unary_rpc_method_handler,
    "unary_stream": grpc.unary_stream_rpc_method_handler,
    "stream_unary": grpc.stream_unary_rpc_method_handler,
    "stream_stream": grpc.stream_stream_rpc_method_handler,
}
