"""File discovery: watch a JSON or TOML file of endpoints and publish it when it changes.

The file holds a list of endpoints, either at the top level (JSON only) or under the key
``endpoints``. An entry is a table with ``id`` (required), ``address``, ``weight``,
``tier``, ``zone`` and ``metadata``; a bare string ``"host:port"`` is shorthand for an
entry whose id and address are that string. An address written as a list becomes a
tuple, so ``["10.0.0.1", 8080]`` reads as ``("10.0.0.1", 8080)``. JSON::

    {"endpoints": [{"id": "a", "address": ["10.0.0.1", 8080], "weight": 2}, "10.0.0.2:8080"]}

TOML::

    [[endpoints]]
    id = "a"
    address = ["10.0.0.1", 8080]
    weight = 2
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeAlias

import anyio

from ._discovery import Snapshot, Update
from ._endpoint import Endpoint, check_duration
from ._errors import ConfigError, EndpointsFileError

logger = logging.getLogger("poise_py")

ErrorHook: TypeAlias = Callable[[EndpointsFileError], None]

_FORMATS = {".json": "json", ".toml": "toml"}
_KEYS = frozenset({"id", "address", "weight", "tier", "zone", "metadata"})


def _entry(path: str, i: int, raw: object) -> Endpoint:
    if isinstance(raw, str):
        raw = {"id": raw, "address": raw}
    if not isinstance(raw, Mapping):
        raise EndpointsFileError(path, f"endpoint #{i} must be a table or a string, got {raw!r}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise EndpointsFileError(path, f"endpoint #{i} has unknown keys {unknown} (allowed: {sorted(_KEYS)})")
    if "id" not in raw:
        raise EndpointsFileError(path, f"endpoint #{i} has no id")
    fields: dict[str, Any] = dict(raw)
    if isinstance(fields.get("address"), list):
        fields["address"] = tuple(fields["address"])
    if not isinstance(fields.get("metadata", {}), Mapping):
        raise EndpointsFileError(path, f"endpoint #{i}: metadata must be a table")
    try:
        return Endpoint(**fields)
    except (ConfigError, TypeError) as exc:
        raise EndpointsFileError(path, f"endpoint #{i}: {exc}") from exc


def parse_endpoints(data: bytes, fmt: str, path: str = "<endpoints>") -> tuple[Endpoint, ...]:
    """Parse a JSON or TOML endpoints document (see the module docstring).

    Raises:
        EndpointsFileError: the document is malformed; the message says where.
    """
    try:
        text = data.decode("utf-8")
        document: object = json.loads(text) if fmt == "json" else tomllib.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise EndpointsFileError(path, f"not valid {fmt.upper()}: {exc}") from exc
    if isinstance(document, Mapping):
        extra = sorted(set(document) - {"endpoints"})
        if extra:
            raise EndpointsFileError(path, f"unknown top-level keys {extra} (expected only 'endpoints')")
        if "endpoints" not in document:
            raise EndpointsFileError(path, "has no 'endpoints' list")
        document = document["endpoints"]
    if not isinstance(document, list):
        raise EndpointsFileError(path, f"'endpoints' must be a list, got {type(document).__name__}")
    endpoints = tuple(_entry(path, i, raw) for i, raw in enumerate(document))
    seen: set[str] = set()
    for e in endpoints:
        if e.id in seen:
            raise EndpointsFileError(path, f"names endpoint {e.id!r} twice")
        seen.add(e.id)
    return endpoints


def _key(endpoints: tuple[Endpoint, ...]) -> list[tuple[Endpoint, dict[str, Any]]]:
    # Endpoint equality ignores metadata; a metadata edit is still a change to publish.
    return [(e, dict(e.metadata)) for e in endpoints]


class FileDiscovery:
    """Endpoints from a JSON or TOML file, re-read every ``interval`` seconds.

    A new revision is published when the endpoints the file describes change (a
    formatting-only edit publishes nothing). A file that cannot be read or is malformed
    publishes nothing either: the balancer keeps the last good pool, and once the problem
    is found by two reads in a row (so a file caught half-written is not an error) the
    :class:`EndpointsFileError` is kept in :attr:`error`, logged and passed to
    ``on_error``, once per distinct problem. The source keeps watching, so fixing the
    file is enough. Write the file atomically (write a temporary file, then rename it)
    to avoid even the transient read. Revisions keep growing across iterations.

    Args:
        path: the file.
        interval: seconds between reads.
        format: ``"json"`` or ``"toml"``; by default from the suffix (``.json``, ``.toml``).
        on_error: called with each new :class:`EndpointsFileError` (alerts, events).

    Attributes:
        error: the current problem with the file, or None while it is good.
        rejected: problems reported so far.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        interval: float = 1.0,
        *,
        format: str | None = None,  # noqa: A002 - the natural name for a file format
        on_error: ErrorHook | None = None,
    ) -> None:
        self.path: str = os.fspath(path)
        self.interval: float = check_duration("interval", interval)
        fmt = _FORMATS.get(os.path.splitext(self.path)[1].lower()) if format is None else format
        if fmt is None:
            raise ConfigError("format", f"cannot tell from {self.path!r}: pass 'json' or 'toml'")
        if fmt not in ("json", "toml"):
            raise ConfigError("format", f"must be 'json' or 'toml', got {fmt!r}")
        if on_error is not None and not callable(on_error):
            raise ConfigError("on_error", f"must be callable, got {on_error!r}")
        self.format = fmt
        self._on_error = on_error
        self._revision = 0
        self.error: EndpointsFileError | None = None
        self.rejected: int = 0

    async def load(self) -> tuple[Endpoint, ...]:
        """Read and parse the file once (to validate it, say); raises :class:`EndpointsFileError`."""
        try:
            data = await anyio.Path(self.path).read_bytes()
        except OSError as exc:
            raise EndpointsFileError(self.path, f"cannot be read: {exc.strerror or exc}") from exc
        return parse_endpoints(data, self.format, self.path)

    def __aiter__(self) -> AsyncIterator[Update]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[Update]:
        published: list[tuple[Endpoint, dict[str, Any]]] | None = None
        last: bytes | None = None
        # A problem is reported only if the next read finds it again: a file caught
        # half-written (truncated, then filled by a non-atomic write) is not an error.
        suspect: EndpointsFileError | None = None
        while True:
            data: bytes | None = None
            problem: EndpointsFileError | None = None
            try:
                data = await anyio.Path(self.path).read_bytes()
            except OSError as exc:
                problem = EndpointsFileError(self.path, f"cannot be read: {exc.strerror or exc}")
                problem.__cause__ = exc
            if data is not None and data != last:
                last = data
                try:
                    endpoints = parse_endpoints(data, self.format, self.path)
                except EndpointsFileError as exc:
                    problem = exc
                else:
                    self._recovered()
                    key = _key(endpoints)
                    if key != published:
                        published = key
                        self._revision += 1
                        yield Snapshot(self._revision, endpoints)
            elif data is not None and suspect is not None:
                problem = suspect  # the same bad bytes as last time
            if problem is not None and suspect is not None and str(problem) == str(suspect):
                self._report(problem)
            suspect = problem
            if data is None:
                last = None
            await anyio.sleep(self.interval)

    def _report(self, problem: EndpointsFileError) -> None:
        if self.error is not None and str(self.error) == str(problem):
            return  # the same problem as last time: already reported
        self.error = problem
        self.rejected += 1
        logger.warning("poise_py: endpoints file rejected, keeping the last good pool: %s", problem)
        if self._on_error is not None:
            try:
                self._on_error(problem)
            except Exception:
                logger.exception("poise_py: FileDiscovery on_error hook raised; ignored")

    def _recovered(self) -> None:
        if self.error is not None:
            logger.info("poise_py: endpoints file %s is good again", self.path)
            self.error = None
