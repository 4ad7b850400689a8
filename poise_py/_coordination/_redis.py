"""Shared circuits in Redis, through coredis or redis-py's ``redis.asyncio``.

coredis is anyio-native (Trio and asyncio alike); redis-py runs on asyncio only.
Importing this module imports neither; constructing a :class:`RedisStorage` imports the
client's own library.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._core._circuit import CircuitState
from .._errors import ConfigError, CoordinationError, CoordinationUnavailable
from .._knobs import check_duration
from ._lua import PRELUDE, SCRIPTS
from ._protocol import (
    CHANGES_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    Changes,
    OpenWait,
    ProbeReport,
    Reply,
    SharedState,
    check_protocol_version,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

_STATES = {s.value: s for s in (CircuitState.CLOSED, CircuitState.OPEN, CircuitState.HALF_OPEN)}
_NAMESPACE = re.compile(r"[^{}\s]+")


MAX_RETENTION = 1e9
"""The longest ``retention`` (about 31 years): Redis refuses an expiry it cannot add to its clock."""


class RedisStorage:
    """Shared circuit records in Redis: one hash per endpoint, one Lua script per operation.

    The Redis server's ``TIME`` is the only clock that decides OPEN -> HALF_OPEN. Keys are
    ``{namespace}:circuit:<endpoint id>``: the namespace is the hash tag, so a fleet's
    keys share one Redis Cluster slot (every script touches one key; the batch read takes
    them all in one call). Scripts are sent by SHA and reloaded when the server lost them
    (a restart).

    The caller owns the client's lifecycle, as coredis 6 requires::

        client = coredis.Redis(host="127.0.0.1", port=6379)
        lb = poise.LoadBalancer(..., coordination=poise.Coordination(poise.RedisStorage(client)))
        async with client, lb:
            ...

    A redis-py client works the same way on asyncio (``redis.asyncio.Redis`` or
    ``redis.asyncio.RedisCluster``; close it with ``await client.aclose()``). redis-py does
    not run on Trio: constructing the storage inside a Trio run raises ``ConfigError``, and
    an operation attempted on Trio fails with a ``CoordinationError`` that says so (the
    balancer logs it and keeps its local circuits).

    Args:
        client: a ``coredis.Redis`` or ``coredis.RedisCluster``, or a
            ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster``.
        namespace: separates fleets sharing one Redis; no braces or spaces.
        retention: seconds a record outlives its last write (plus any open wait), so the
            records of endpoints that left do not pile up. An expired record reads as
            CLOSED, which is also how the fleet recovers from a Redis that lost its keys.
        protocol_version: the protocol to speak, 1, 2 or 3 (default: the newest, 3); pin 1 to
            run beside instances of a release that speaks only 1.
    """

    def __init__(
        self,
        client: Any,
        *,
        namespace: str = "poise",
        retention: float = 86_400.0,
        protocol_version: int = PROTOCOL_VERSION,
    ) -> None:
        if type(client).__module__.split(".", 1)[0] == "redis":
            self._unavailable, self._errors = _redis_py_errors(client)
            self._asyncio_only = True
        else:
            self._unavailable, self._errors = _coredis_errors(client)
            self._asyncio_only = False
        if self._asyncio_only and _running_library() not in (None, "asyncio"):
            raise ConfigError("RedisStorage.client", _ASYNCIO_ONLY)
        if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
            raise ConfigError(
                "RedisStorage.namespace",
                f"must be a non-empty string without braces or spaces, got {namespace!r}",
            )
        self._client = client
        self._namespace = namespace
        retained = check_duration("RedisStorage.retention", retention)
        if retained > MAX_RETENTION:  # Redis's EXPIRE takes whole seconds it can add to its clock
            raise ConfigError("RedisStorage.retention", f"must be at most {MAX_RETENTION:g} s, got {retention!r:.80}")
        self._retention = repr(retained)
        self._protocol = check_protocol_version("RedisStorage.protocol_version", protocol_version)
        self._scripts: dict[str, Callable[..., Awaitable[Any]]] = {
            name: client.register_script(PRELUDE + body) for name, body in SCRIPTS.items()
        }

    def __repr__(self) -> str:
        return f"RedisStorage(namespace={self._namespace!r}, protocol_version={self._protocol})"

    @property
    def protocol_version(self) -> int:
        """The protocol this storage speaks."""
        return self._protocol

    @property
    def namespace(self) -> str:
        """The fleet's namespace (the keys' hash tag)."""
        return self._namespace

    def key(self, endpoint_id: str) -> str:
        """The Redis key of one endpoint's record."""
        return f"{{{self._namespace}}}:circuit:{endpoint_id}"

    def _keys(self, endpoint_id: str) -> list[str]:
        """A write's keys: the record, then the namespace's sequence and change log (protocol 3)."""
        tag = f"{{{self._namespace}}}"
        return [self.key(endpoint_id), f"{tag}:sequence", f"{tag}:changes"]

    async def changes(self, since: int, *, limit: int = 1000) -> Changes:
        """The records written since sequence number ``since``, in one call (protocol 3).

        One ``GET`` when nothing changed (or ``since`` < 0, which asks only for the
        sequence); one sorted-set range and one read per changed record otherwise.
        ``states`` is None when the sequence went backwards (the keys were lost) or more
        than ``limit`` records changed: read everything instead.
        """
        if self._protocol < CHANGES_PROTOCOL_VERSION:
            raise CoordinationError(
                f"changes needs protocol {CHANGES_PROTOCOL_VERSION}; this storage speaks {self._protocol}"
            )
        tag = f"{{{self._namespace}}}"
        prefix = f"{tag}:circuit:"
        raw = await self._run("changes", [f"{tag}:sequence", f"{tag}:changes"], [str(since), str(limit), prefix])
        if not isinstance(raw, list) or not raw:
            raise CoordinationError(f"changes: unexpected reply {raw!r}")
        sequence = int(_number(raw[0]) or 0)
        if len(raw) == 1:
            return Changes(sequence, {})
        kind = _text(raw[1])
        if kind == "damaged" and len(raw) == 3:
            return Changes(sequence, None, problem=_text(raw[2]) or "the change log is damaged")
        if kind != "changes":
            return Changes(sequence, None)
        states: dict[str, SharedState] = {}
        for key, item in zip(raw[2::2], raw[3::2], strict=True):
            name = _text(key)
            if name.startswith(prefix):
                states[name[len(prefix) :]] = _parse(item).state
        return Changes(sequence, states)

    # -- the protocol ------------------------------------------------------------------

    async def read(self, keys: Sequence[str]) -> list[SharedState]:
        """The records of ``keys``, in order, in one call (CLOSED at version 0 where there is none)."""
        if not keys:
            return []
        raw = await self._run("read", [self.key(k) for k in keys], [])
        if not isinstance(raw, list) or len(raw) != len(keys):
            raise CoordinationError(f"read: unexpected reply {raw!r}")
        return [_parse(item).state for item in raw]

    async def trip_open(self, key: str, *, expected_version: int, wait: OpenWait) -> Reply:
        """CLOSED or HALF_OPEN -> OPEN; see :meth:`Storage.trip_open`."""
        if not isinstance(wait, OpenWait):
            raise CoordinationError(f"wait must be an OpenWait, got {wait!r}")
        return _parse(await self._run("trip_open", self._keys(key), [str(expected_version), *wait.lua_args()]))

    async def begin_half_open_if_elapsed(
        self, key: str, *, expected_version: int, permitted: int, lease: float
    ) -> Reply:
        """OPEN (or a lapsed HALF_OPEN round) -> a fresh HALF_OPEN round once the server clock says so."""
        args = [str(expected_version), str(permitted), repr(float(lease))]
        return _parse(await self._run("begin_half_open_if_elapsed", self._keys(key), args))

    async def lease_probe(self, key: str, *, expected_version: int) -> Reply:
        """Take one lease from the round's budget."""
        return _parse(await self._run("lease_probe", self._keys(key), [str(expected_version)]))

    async def report_probe(self, key: str, *, expected_version: int, report: ProbeReport) -> Reply:
        """Count a leased probe's success, or take an unused lease back."""
        if not isinstance(report, ProbeReport):
            raise CoordinationError(f"report must be a ProbeReport, got {report!r}")
        return _parse(await self._run("report_probe", self._keys(key), [str(expected_version), report.value]))

    async def close(self, key: str, *, expected_version: int) -> Reply:
        """HALF_OPEN -> CLOSED, resetting ``failed_rounds`` (protocol 2)."""
        return _parse(await self._run("close", self._keys(key), [str(expected_version)]))

    # -- internals ---------------------------------------------------------------------

    async def _run(self, name: str, keys: list[str], args: list[str]) -> object:
        if self._asyncio_only and _running_library() != "asyncio":
            raise CoordinationError(f"redis {name}: {_ASYNCIO_ONLY}")
        try:
            return await self._scripts[name](keys=keys, args=[str(self._protocol), self._retention, *args])
        except self._unavailable as exc:
            raise CoordinationUnavailable(f"redis {name}: {exc!r}") from exc
        except self._errors as exc:
            raise CoordinationError(f"redis {name}: {exc!r}") from exc


_ASYNCIO_ONLY = "a redis.asyncio (redis-py) client runs on asyncio only; on Trio, use a coredis client"


def _running_library() -> str | None:
    import sniffio  # noqa: PLC0415 - anyio's own dependency

    try:
        return sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return None


def _coredis_errors(client: object) -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    import coredis  # noqa: PLC0415 - coredis is an optional extra: imported on use only
    import coredis.exceptions  # noqa: PLC0415

    if not isinstance(client, coredis.Redis | coredis.RedisCluster):
        raise ConfigError(
            "RedisStorage.client",
            f"must be a coredis Redis or RedisCluster, or a redis.asyncio Redis or RedisCluster, got {client!r}",
        )
    unavailable = (
        coredis.exceptions.ConnectionError,  # BusyLoadingError and ProtocolError among them
        coredis.exceptions.BusyLoadingError,
        coredis.exceptions.ClusterDownError,
        coredis.exceptions.TryAgainError,
        OSError,
        TimeoutError,
    )
    return unavailable, (coredis.exceptions.RedisError,)


def _redis_py_errors(client: object) -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    import redis.asyncio  # noqa: PLC0415 - redis-py is an optional extra: imported on use only
    import redis.exceptions  # noqa: PLC0415

    if not isinstance(client, redis.asyncio.Redis | redis.asyncio.RedisCluster):
        raise ConfigError(
            "RedisStorage.client",
            f"must be a redis.asyncio Redis or RedisCluster (not the synchronous client), got {client!r}",
        )
    unavailable = (
        redis.exceptions.ConnectionError,  # BusyLoadingError among them
        redis.exceptions.TimeoutError,
        redis.exceptions.ClusterDownError,
        redis.exceptions.TryAgainError,
        OSError,
        TimeoutError,
    )
    return unavailable, (redis.exceptions.RedisError,)


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        return value
    raise CoordinationError(f"unexpected value in a reply: {value!r}")


def _number(value: object) -> float | None:
    text = _text(value)
    return None if text == "" else float(text)


def _count(value: object) -> int:
    number = _number(value)
    return 0 if number is None else int(number)


def _parse(raw: object) -> Reply:
    if not isinstance(raw, list) or len(raw) != 13:
        raise CoordinationError(f"unexpected reply {raw!r}")
    (
        applied,
        state,
        version,
        opened_at,
        reopen_at,
        failed,
        permitted,
        remaining,
        completed,
        proto,
        now,
        problem,
        note_,
    ) = raw
    note = _text(note_) or None  # a damaged change log the script replaced before writing
    if problem:  # the scripts vouch for every field they answer, or say what is wrong
        return Reply(
            applied=False,
            state=SharedState(version=-1, storage_time=_number(now) or 0.0, problem=_text(problem)),
            problem=note,
        )
    circuit = _STATES.get(_text(state))
    if circuit is None:
        raise CoordinationError(f"unknown shared state {state!r}")
    return Reply(
        applied=applied == 1,
        state=SharedState(
            state=circuit,
            version=_count(version),
            opened_at=_number(opened_at),
            reopen_at=_number(reopen_at),
            failed_rounds=_count(failed),
            probes_permitted=_count(permitted),
            probes_remaining=_count(remaining),
            probes_completed=_count(completed),
            protocol_version=_count(proto),
            storage_time=_number(now) or 0.0,
        ),
        problem=note,
    )
