"""The embedded storage: shared circuits for the balancers of one process, and for tests.

It is the reference implementation of the protocol: the Redis scripts transcribe these
methods line by line, and the behavioural tests run against both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import anyio
import anyio.lowlevel
import attrs

from .._core._circuit import CircuitState
from .._errors import ConfigError, CoordinationError
from .._knobs import check_duration
from ._protocol import (
    CHANGES_PROTOCOL_VERSION,
    FAILED_ROUNDS_CAP,
    PROTOCOL_VERSION,
    Changes,
    OpenWait,
    ProbeReport,
    Reply,
    SharedState,
    check_protocol_version,
)

_C, _O, _H = CircuitState.CLOSED, CircuitState.OPEN, CircuitState.HALF_OPEN


class InMemoryStorage:
    """Shared circuit records in this process's memory.

    Share one instance (or one :class:`~poise_py.Coordination`) between balancers to
    share their circuits. Every operation yields once to the event loop first, like a
    network storage would, so concurrent callers interleave; the operation itself runs
    without a yield, which is what makes it atomic.

    Args:
        clock: the storage clock, in seconds (default :func:`anyio.current_time`, the
            running event loop's clock, so a Trio ``MockClock`` or a virtual-time loop
            drives it like every other timer of the balancer); inject a fake one in tests.
            It alone decides OPEN -> HALF_OPEN.
        protocol_version: the protocol to speak, 1, 2 or 3 (default: the newest, 3); an older
            one stands in for an older release in a mixed fleet.
    """

    def __init__(
        self, *, clock: Callable[[], float] = anyio.current_time, protocol_version: int = PROTOCOL_VERSION
    ) -> None:
        if not callable(clock):
            raise ConfigError("InMemoryStorage.clock", f"must be callable, got {clock!r}")
        self._clock = clock
        self._protocol = check_protocol_version("InMemoryStorage.protocol_version", protocol_version)
        self._records: dict[str, SharedState] = {}
        self._log: dict[str, int] = {}  # key -> the sequence number of its last logged write
        self._sequence = [0]  # shared with sharing() views
        self.operations: Counter[str] = Counter()
        """Operations served, by name (reads count once per key)."""

    @classmethod
    def sharing(cls, other: InMemoryStorage, *, protocol_version: int) -> InMemoryStorage:
        """A view of ``other``'s records that speaks another protocol (a mixed fleet in one process)."""
        view = cls(clock=other._clock, protocol_version=protocol_version)
        view._records = other._records
        view._log = other._log
        view._sequence = other._sequence
        view.operations = other.operations
        return view

    @property
    def protocol_version(self) -> int:
        """The protocol this storage speaks."""
        return self._protocol

    def __repr__(self) -> str:
        return f"InMemoryStorage(protocol_version={self._protocol})"

    def clear(self) -> None:
        """Forget every record, as a storage restart without persistence would."""
        self._records.clear()
        self._log.clear()
        self._sequence[0] = 0

    # -- the protocol ------------------------------------------------------------------

    async def read(self, keys: Sequence[str]) -> list[SharedState]:
        """The records of ``keys``, in order (CLOSED at version 0 where there is none)."""
        await anyio.lowlevel.checkpoint()
        self.operations["read"] += len(keys)
        now = self._clock()
        return [self._answer(self._load(k, now), now) for k in keys]

    async def changes(self, since: int, *, limit: int = 1000) -> Changes:
        """The records written since sequence ``since`` (protocol 3); see :meth:`RedisStorage.changes`."""
        await anyio.lowlevel.checkpoint()
        if self._protocol < CHANGES_PROTOCOL_VERSION:
            raise CoordinationError(
                f"changes needs protocol {CHANGES_PROTOCOL_VERSION}; this storage speaks {self._protocol}"
            )
        self.operations["changes"] += 1
        sequence = self._sequence[0]
        if since < 0 or sequence == since:
            return Changes(sequence, {})
        if sequence < since:
            return Changes(sequence, None)
        keys = [k for k, s in self._log.items() if s > since]
        if len(keys) > limit:
            return Changes(sequence, None)
        self.operations["read"] += len(keys)
        now = self._clock()
        return Changes(sequence, {k: self._answer(self._load(k, now), now) for k in keys})

    async def trip_open(self, key: str, *, expected_version: int, wait: OpenWait) -> Reply:
        """CLOSED or HALF_OPEN -> OPEN; see :meth:`Storage.trip_open`."""
        await anyio.lowlevel.checkpoint()
        self.operations["trip_open"] += 1
        now = self._clock()
        r = self._load(key, now)
        horizon = wait.horizon
        if r.problem is not None or (
            horizon is not None and attrs.evolve(r, storage_time=now).damage(horizon=horizon) is not None
        ):  # an unusable record, or one past the caller's horizon: the next write replaces it
            r = SharedState()
        if r.version != expected_version or r.state is _O:
            return self._refuse(r, now)
        failed = _rounds(r)
        if self._protocol >= 2 and r.state is _H:
            failed = min(failed + 1, FAILED_ROUNDS_CAP)
        duration = wait.duration(failed, self._protocol)
        return self._save(
            key,
            r,
            now,
            state=_O,
            failed_rounds=failed,
            opened_at=now,
            reopen_at=now + duration,
            probes_permitted=0,
            probes_remaining=0,
            probes_completed=0,
        )

    async def begin_half_open_if_elapsed(
        self, key: str, *, expected_version: int, permitted: int, lease: float
    ) -> Reply:
        """OPEN (or a lapsed HALF_OPEN round) -> a fresh HALF_OPEN round once due."""
        await anyio.lowlevel.checkpoint()
        self.operations["begin_half_open_if_elapsed"] += 1
        _check_budget(permitted, lease)
        now = self._clock()
        r = self._load(key, now)
        if r.problem is not None or r.version != expected_version or r.state is _C or now < (r.reopen_at or 0.0):
            return self._refuse(r, now)
        return self._save(
            key,
            r,
            now,
            state=_H,
            reopen_at=now + lease,
            probes_permitted=permitted,
            probes_remaining=permitted,
            probes_completed=0,
        )

    async def lease_probe(self, key: str, *, expected_version: int) -> Reply:
        """Take one lease from the round's budget."""
        await anyio.lowlevel.checkpoint()
        self.operations["lease_probe"] += 1
        now = self._clock()
        r = self._load(key, now)
        if (
            r.problem is not None
            or r.version != expected_version
            or r.state is not _H
            or r.probes_remaining <= 0
            or now >= (r.reopen_at or 0.0)
        ):
            return self._refuse(r, now)
        return self._save(key, r, now, probes_remaining=r.probes_remaining - 1)

    async def report_probe(self, key: str, *, expected_version: int, report: ProbeReport) -> Reply:
        """Count a leased probe's success, or take an unused lease back."""
        await anyio.lowlevel.checkpoint()
        self.operations["report_probe"] += 1
        if not isinstance(report, ProbeReport):
            raise CoordinationError(f"report must be a ProbeReport, got {report!r}")
        now = self._clock()
        r = self._load(key, now)
        if r.problem is not None or r.version != expected_version or r.state is not _H:
            return self._refuse(r, now)
        if report is ProbeReport.SUCCEEDED:
            return self._save(key, r, now, probes_completed=r.probes_completed + 1)
        return self._save(key, r, now, probes_remaining=min(r.probes_remaining + 1, r.probes_permitted))

    async def close(self, key: str, *, expected_version: int) -> Reply:
        """HALF_OPEN -> CLOSED, resetting ``failed_rounds`` (protocol 2)."""
        await anyio.lowlevel.checkpoint()
        self.operations["close"] += 1
        now = self._clock()
        r = self._load(key, now)
        if r.problem is not None or r.version != expected_version or r.state is not _H:
            return self._refuse(r, now)
        return self._save(
            key,
            r,
            now,
            state=_C,
            failed_rounds=0,
            opened_at=None,
            reopen_at=None,
            probes_permitted=0,
            probes_remaining=0,
            probes_completed=0,
        )

    # -- internals ---------------------------------------------------------------------

    def _load(self, key: str, now: float) -> SharedState:
        """The record of ``key``; one with a field out of range reads as unusable (see :meth:`SharedState.damage`)."""
        r = self._records.get(key)
        if r is None:
            return SharedState()
        if r.problem is None:
            problem = attrs.evolve(r, storage_time=now).damage()
            if problem is not None:
                return SharedState(version=-1, problem=f"key {key}: {problem}")
        return r

    def _answer(self, r: SharedState, now: float) -> SharedState:
        if r.problem is not None:
            return SharedState(version=-1, storage_time=now, problem=r.problem)
        failed = _rounds(r) if self._protocol >= 2 else 0  # protocol 1 does not know the field
        return attrs.evolve(r, failed_rounds=failed, storage_time=now)

    def _refuse(self, r: SharedState, now: float) -> Reply:
        return Reply(applied=False, state=self._answer(r, now))

    def _save(self, key: str, r: SharedState, now: float, **changes: object) -> Reply:
        if self._protocol >= 2:
            # Stamping protocol 2 vouches for the count: write the count protocol 2 reads.
            changes.setdefault("failed_rounds", _rounds(r))
        else:
            changes.pop("failed_rounds", None)  # protocol 1 neither counts nor resets
        new = attrs.evolve(
            r,
            version=r.version + 1 if "state" in changes else r.version,
            protocol_version=self._protocol,
            **changes,  # type: ignore[arg-type]
        )
        self._records[key] = new
        if self._protocol >= CHANGES_PROTOCOL_VERSION:
            self._sequence[0] += 1
            self._log[key] = self._sequence[0]
        return Reply(applied=True, state=self._answer(new, now))


def _rounds(r: SharedState) -> int:
    """The failed-round count protocol 2 trusts: only a protocol-2 writer's (see the docs)."""
    return r.failed_rounds if r.protocol_version >= 2 else 0


def _check_budget(permitted: int, lease: float) -> None:
    if isinstance(permitted, bool) or not isinstance(permitted, int) or permitted < 1:
        raise CoordinationError(f"permitted must be an int >= 1, got {permitted!r}")
    try:
        check_duration("lease", lease)
    except ConfigError as exc:
        raise CoordinationError(str(exc)) from None
