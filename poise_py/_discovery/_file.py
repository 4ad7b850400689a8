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

Whatever the file holds (a document nested thousands deep, a 5,000-digit number, a value
of the wrong type, any unicode), reading it gives either endpoints or one
:class:`EndpointsFileError`: never another exception, never the end of the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import reprlib
import stat
import threading
import tomllib
from collections.abc import AsyncIterator, Callable, Mapping
from functools import partial
from typing import Any, TypeAlias, TypeVar, cast

import anyio

from .._core._updates import Snapshot, Update
from .._endpoint import Endpoint
from .._errors import ConfigError, EndpointsFileError
from .._knobs import RESOLUTION, check_count, check_duration

logger = logging.getLogger("poise_py")

ErrorHook: TypeAlias = Callable[[EndpointsFileError], None]
T = TypeVar("T")

_FORMATS = {".json": "json", ".toml": "toml"}

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
"""The default ``FileDiscovery.max_bytes``: a larger file is rejected, not parsed."""

THREAD_PARSE_BYTES = 64 * 1024
"""Files at least this large are parsed in a worker thread, off the event loop."""
_KEYS = frozenset({"id", "address", "weight", "tier", "zone", "metadata"})

MAX_DEPTH = 32
"""How deep lists and tables may nest inside one endpoint entry (its address, its metadata)."""

MAX_DOCUMENT_DEPTH = 64
"""How deep lists and tables may nest anywhere in a document.

A parser stops at Python's recursion limit, and how much of it is left depends on how deep
the stack that calls it already is: a document nested 900 deep parses from a shallow stack
and not from a deep one. A document nested more than this is one error whichever way the
parse went, and anything this deep or less parses from any caller, so the verdict on a
document never depends on where it was read from.
"""

_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxstring = 60
_repr.maxother = 60


def _depth(value: object, cap: int) -> int:
    """How many levels of lists and tables ``value`` nests (0 for a scalar), up to ``cap``.

    Iterative, so no document is too deep to measure; it stops once ``cap`` is reached.
    """
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if deepest >= cap:
                return cap
        stack.extend((child, depth) for child in children)
    return deepest


def _too_deep_error(path: str) -> EndpointsFileError:
    return EndpointsFileError(path, f"nests lists or tables more than {MAX_DOCUMENT_DEPTH} deep")


def _entry(path: str, i: int, raw: object, depth: int) -> Endpoint:
    if isinstance(raw, str):
        raw = {"id": raw, "address": raw}
    if not isinstance(raw, Mapping):
        raise EndpointsFileError(path, f"endpoint #{i} must be a table or a string, got {_repr.repr(raw)}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise EndpointsFileError(
            path, f"endpoint #{i} has unknown keys {_repr.repr(unknown)} (allowed: {sorted(_KEYS)})"
        )
    if depth > MAX_DEPTH:
        raise EndpointsFileError(path, f"endpoint #{i} nests lists or tables more than {MAX_DEPTH} deep")
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
        raise EndpointsFileError(path, f"endpoint #{i}: {_clip(str(exc))}") from exc


def parse_endpoints(data: bytes, fmt: str, path: str = "<endpoints>") -> tuple[Endpoint, ...]:
    """Parse a JSON or TOML endpoints document (see the module docstring).

    Raises:
        EndpointsFileError: the document is malformed or cannot be used (too deeply
            nested, a number too long to convert, a value of the wrong type...); the
            message says where. No other exception escapes.
    """
    try:
        return _parse(data, fmt, path)
    except EndpointsFileError:
        raise
    except RecursionError as exc:
        raise _too_deep_error(path) from exc
    except Exception as exc:
        raise EndpointsFileError(path, f"cannot be used: {_clip(f'{type(exc).__name__}: {exc}')}") from exc


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _json_loads(text: str) -> object:
    """``json.loads``, but a large document's endpoint list is decoded one entry at a time.

    One ``json.loads`` call holds the GIL until the whole document is decoded (0.8 s for
    12 MB), so a worker thread running it would stall the event loop all the same.
    Decoding the top-level list (or the list under a top-level key) entry by entry lets
    the interpreter hand the GIL back to the loop's thread between entries. Same result,
    same errors (:class:`json.JSONDecodeError` with the same positions) as ``json.loads``.
    """
    if len(text) < THREAD_PARSE_BYTES:
        return json.loads(text)
    i = _skip(text, 0)
    c = text[i : i + 1]
    value: object
    if c == "[":
        value, i = _json_array(text, i + 1)
    elif c == "{":
        value, i = _json_object(text, i + 1)
    else:
        value, i = _DECODER.raw_decode(text, i)
    i = _skip(text, i)
    if i != len(text):
        raise json.JSONDecodeError("Extra data", text, i)
    return value


def _skip(text: str, i: int) -> int:
    match = _WS.match(text, i)
    return i if match is None else match.end()


def _json_array(text: str, i: int) -> tuple[list[object], int]:
    items: list[object] = []
    i = _skip(text, i)
    if text[i : i + 1] == "]":
        return items, i + 1
    while True:
        item, i = _DECODER.raw_decode(text, i)  # one entry: a short hold of the GIL
        items.append(item)
        i = _skip(text, i)
        c = text[i : i + 1]
        if c == "]":
            return items, i + 1
        if c != ",":
            raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
        i = _skip(text, i + 1)


def _json_object(text: str, i: int) -> tuple[dict[str, object], int]:
    members: dict[str, object] = {}
    i = _skip(text, i)
    if text[i : i + 1] == "}":
        return members, i + 1
    while True:
        if text[i : i + 1] != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
        key, i = _DECODER.raw_decode(text, i)
        i = _skip(text, i)
        if text[i : i + 1] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
        i = _skip(text, i + 1)
        value: object
        if text[i : i + 1] == "[":
            value, i = _json_array(text, i + 1)
        else:
            value, i = _DECODER.raw_decode(text, i)
        members[key] = value
        i = _skip(text, i)
        c = text[i : i + 1]
        if c == "}":
            return members, i + 1
        if c != ",":
            raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
        i = _skip(text, i + 1)


def _parse(data: bytes, fmt: str, path: str) -> tuple[Endpoint, ...]:
    try:
        text = data.decode("utf-8")
        document: object = _json_loads(text) if fmt == "json" else tomllib.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise EndpointsFileError(path, f"not valid {fmt.upper()}: {_clip(str(exc))}") from exc
    except RecursionError as exc:
        raise _too_deep_error(path) from exc
    # Depth is judged before anything else, so a document too deep for the parser (above)
    # and one it managed to read give the same error. Each entry is measured once.
    cap = MAX_DOCUMENT_DEPTH + 1
    entries: object = document
    above = 0  # levels of lists and tables around the entries
    if isinstance(document, Mapping):
        above = 1
        if any(1 + _depth(v, cap) > MAX_DOCUMENT_DEPTH for k, v in document.items() if k != "endpoints"):
            raise _too_deep_error(path)
        entries = document.get("endpoints")
    depths: list[int] = []
    if isinstance(entries, list):
        above += 1
        depths = [_depth(raw, cap) for raw in entries]
        if above + max(depths, default=0) > MAX_DOCUMENT_DEPTH:
            raise _too_deep_error(path)
    elif above + _depth(entries, cap) > MAX_DOCUMENT_DEPTH:
        raise _too_deep_error(path)
    if isinstance(document, Mapping):
        extra = sorted(set(document) - {"endpoints"})
        if extra:
            raise EndpointsFileError(path, f"unknown top-level keys {extra} (expected only 'endpoints')")
        if "endpoints" not in document:
            raise EndpointsFileError(path, "has no 'endpoints' list")
        document = document["endpoints"]
    if not isinstance(document, list):
        raise EndpointsFileError(path, f"'endpoints' must be a list, got {type(document).__name__}")
    endpoints = tuple(_entry(path, i, raw, depths[i]) for i, raw in enumerate(document))
    seen: set[str] = set()
    for e in endpoints:
        if e.id in seen:
            raise EndpointsFileError(path, f"names endpoint {_repr.repr(e.id)} twice")
        seen.add(e.id)
    return endpoints


def _key(endpoints: tuple[Endpoint, ...]) -> list[tuple[Endpoint, dict[str, Any]]]:
    # Endpoint equality ignores metadata; a metadata edit is still a change to publish.
    return [(e, dict(e.metadata)) for e in endpoints]


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
"""Opening never waits (a FIFO with no writer opens at once) nor adopts a terminal."""

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class _NotRegular(Exception):  # noqa: N818 - internal marker, turned into an EndpointsFileError
    """The path names something other than a regular file (its ``args[0]`` says what)."""


def _read(path: str, max_bytes: int) -> bytes:
    """Read at most ``max_bytes`` (plus one, to tell a file that is too large); runs in a thread.

    Only a regular file is read: a FIFO, a device or a directory could block the read
    forever or never end, so it is refused as soon as it is opened (without waiting).
    """
    fd = os.open(path, _OPEN_FLAGS)
    try:
        mode = os.fstat(fd).st_mode
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _NotRegular(next((kind for test, kind in _KINDS if test(mode)), "not a regular file"))
    with open(fd, "rb") as f:  # it owns the descriptor from here
        return f.read(max_bytes + 1)


async def _off_loop(work: Callable[[], T]) -> T:
    """``work()`` in a daemon thread of its own, which the caller never waits for once cancelled.

    A read from a hung network mount may never return. ``anyio.to_thread`` would keep the
    caller's cancellation (``async with lb`` exiting) waiting for it, and its asyncio worker
    threads keep the interpreter from exiting; this thread is abandoned on cancellation,
    and a daemon, so neither the event loop nor the process waits for it.
    """
    done = anyio.Event()
    outcome: list[tuple[bool, Any]] = []
    call_soon = _call_soon_threadsafe()

    def run() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting task
            outcome.append((False, exc))
        with contextlib.suppress(Exception):  # the loop is gone: nobody waits for this any more
            call_soon(done.set)

    threading.Thread(target=run, name="poise_py FileDiscovery read", daemon=True).start()
    await done.wait()
    ok, value = outcome[0]
    if ok:
        return cast("T", value)
    raise value


def _call_soon_threadsafe() -> Callable[[Callable[[], object]], object]:
    """How another thread schedules a callback on the running event loop (Trio or asyncio)."""
    if anyio.get_cancelled_exc_class().__module__.startswith("trio"):
        import trio  # noqa: PLC0415 - only when running on Trio

        return trio.lowlevel.current_trio_token().run_sync_soon
    return asyncio.get_running_loop().call_soon_threadsafe


class FileDiscovery:
    """Endpoints from a JSON or TOML file, re-read every ``interval`` seconds.

    A new revision is published when the endpoints the file describes change (a
    formatting-only edit publishes nothing). A file that cannot be read, is larger than
    ``max_bytes``, is malformed or cannot be used (whatever it holds: nesting thousands
    deep, a 5,000-digit number, values of the wrong type) publishes nothing either: the
    balancer keeps the last good pool, and once the problem is found by two reads in a
    row (so a file caught half-written is not an error) the :class:`EndpointsFileError`
    is kept in :attr:`error`, logged and passed to ``on_error``, once per distinct
    problem. The source keeps watching, so fixing the file is enough. Write the file
    atomically (write a temporary file, then rename it) to avoid even the transient
    read. Revisions keep growing across iterations.

    Only a regular file is read: a FIFO, a device, a socket or a directory is a problem
    like any other (an :class:`EndpointsFileError` saying what it is), found without
    waiting for a writer. The file is read in a daemon thread of its own that nothing
    waits for once the stream is cancelled, so a read that hangs (a hung network mount)
    never keeps ``async with lb`` from exiting, nor the process. It is parsed in a worker
    thread too when it is 64 KiB or more (a JSON endpoint list entry by entry, so the
    thread hands the GIL back to the event loop between entries): a large file no longer
    stalls the loop for the parse.

    Args:
        path: the file.
        interval: seconds between reads.
        format: ``"json"`` or ``"toml"``; by default from the suffix (``.json``, ``.toml``).
        on_error: called with each new :class:`EndpointsFileError` (alerts, events).
        max_bytes: a file larger than this many bytes is rejected unparsed (an
            :class:`EndpointsFileError`); default 16 MiB.

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
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        try:
            name: object = os.fspath(path)
        except TypeError:
            name = None
        if not isinstance(name, str) or not name:
            raise ConfigError("path", f"must be a file name (a non-empty str or pathlib.Path), got {path!r:.80}")
        self.path: str = name
        self.interval: float = check_duration("interval", interval, minimum=RESOLUTION)
        fmt = _FORMATS.get(os.path.splitext(self.path)[1].lower()) if format is None else format
        if fmt is None:
            raise ConfigError(
                "format",
                f"cannot tell from the path {self.path!r:.80} (no .json or .toml suffix): "
                "pass format='json' or format='toml'",
            )
        if fmt not in ("json", "toml"):
            raise ConfigError("format", f"must be 'json' or 'toml', got {fmt!r:.80}")
        if on_error is not None and not callable(on_error):
            raise ConfigError("on_error", f"must be callable, got {on_error!r}")
        check_count("max_bytes", max_bytes, why="bytes")
        self.format = fmt
        self.max_bytes = max_bytes
        self._on_error = on_error
        self._revision = 0
        self.error: EndpointsFileError | None = None
        self.rejected: int = 0

    async def load(self) -> tuple[Endpoint, ...]:
        """Read and parse the file once (to validate it, say); raises :class:`EndpointsFileError`."""
        return await self._parse(await self._read())

    async def _read(self) -> bytes:
        try:
            data = await _off_loop(partial(_read, self.path, self.max_bytes))
        except _NotRegular as exc:
            raise EndpointsFileError(self.path, f"is {exc.args[0]}, not a regular file: not read") from None
        except OSError as exc:
            raise EndpointsFileError(self.path, f"cannot be read: {exc.strerror or exc}") from exc
        if len(data) > self.max_bytes:
            raise EndpointsFileError(
                self.path, f"is larger than max_bytes={self.max_bytes}: not parsed (raise max_bytes if it is right)"
            )
        return data

    async def _parse(self, data: bytes) -> tuple[Endpoint, ...]:
        if len(data) < THREAD_PARSE_BYTES:
            return parse_endpoints(data, self.format, self.path)
        return await anyio.to_thread.run_sync(parse_endpoints, data, self.format, self.path, abandon_on_cancel=True)

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
                data = await self._read()
            except EndpointsFileError as exc:
                problem = exc
            if data is not None and data != last:
                last = data
                try:
                    endpoints = await self._parse(data)
                    key = _key(endpoints)
                    changed = key != published
                except EndpointsFileError as exc:
                    problem = exc
                except Exception as exc:  # noqa: BLE001 - nothing in the file may end the stream
                    problem = EndpointsFileError(self.path, f"cannot be used: {_clip(f'{type(exc).__name__}: {exc}')}")
                    problem.__cause__ = exc
                else:
                    self._recovered()
                    if changed:
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
