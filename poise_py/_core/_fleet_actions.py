"""The fleet core's vocabulary: the storage operations it asks for, the events it reports, its counters.

Plain frozen values. :class:`~poise_py._core._fleet.FleetCore` yields one
:data:`Operation` at a time for the shell (``_coordination/_coordinator.py``) to perform
on the storage, and hands out :data:`FleetEvent` values for it to log and emit.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from ._shared import OpenWait, ProbeReport

# -- operations: what the shell performs on the storage ---------------------------------


@attrs.frozen
class Read:
    """``storage.read(keys)``: a list of :class:`SharedState`, one per key."""

    keys: tuple[str, ...]
    name: ClassVar[str] = "read"


@attrs.frozen
class ReadChanges:
    """``storage.changes(since)``: a :class:`Changes` (protocol 3)."""

    since: int
    name: ClassVar[str] = "changes"


@attrs.frozen
class TripOpen:
    """``storage.trip_open(key, expected_version=..., wait=...)``: a :class:`Reply`."""

    key: str
    expected_version: int
    wait: OpenWait
    name: ClassVar[str] = "trip_open"


@attrs.frozen
class BeginHalfOpen:
    """``storage.begin_half_open_if_elapsed(key, ...)``: a :class:`Reply`."""

    key: str
    expected_version: int
    permitted: int
    lease: float
    name: ClassVar[str] = "begin_half_open_if_elapsed"


@attrs.frozen
class LeaseProbe:
    """``storage.lease_probe(key, expected_version=...)``: a :class:`Reply`."""

    key: str
    expected_version: int
    name: ClassVar[str] = "lease_probe"


@attrs.frozen
class ReportProbe:
    """``storage.report_probe(key, expected_version=..., report=...)``: a :class:`Reply`."""

    key: str
    expected_version: int
    report: ProbeReport
    name: ClassVar[str] = "report_probe"


@attrs.frozen
class Close:
    """``storage.close(key, expected_version=...)``: a :class:`Reply`."""

    key: str
    expected_version: int
    name: ClassVar[str] = "close"


Operation = Read | ReadChanges | TripOpen | BeginHalfOpen | LeaseProbe | ReportProbe | Close
"""One storage operation a job waits for."""


# -- events: what the shell reports ----------------------------------------------------------


@attrs.frozen
class StorageLost:
    """The storage failed (``reason``, ``error``): every circuit decides locally. Once per outage."""

    at: float
    reason: str
    error: BaseException


@attrs.frozen
class StorageRegained:
    """The storage answered again after an outage: the circuits follow it again."""

    at: float


@attrs.frozen
class RecordUnusable:
    """One endpoint's shared record is unusable (``problem``): it decides locally. Once per episode."""

    at: float
    endpoint_id: str
    problem: str


@attrs.frozen
class LedgerDamaged:
    """The namespace's change log is damaged (``problem`` names the key). Once per episode.

    Polls read every record meanwhile, until a write replaces the key.
    """

    at: float
    problem: str


@attrs.frozen
class JobCrashed:
    """A job raised unexpectedly (a bug in a storage or here): logged, then a fallback follows."""

    error: Exception


FleetEvent = StorageLost | StorageRegained | RecordUnusable | LedgerDamaged | JobCrashed


@attrs.define(eq=False)
class FleetCounters:
    """The core's saturating counters (see :class:`CoordinationStatistics`)."""

    operations: int = 0
    failures: int = 0
    fallbacks: int = 0
    resyncs: int = 0
    published: int = 0
    adopted: int = 0
    leases: int = 0
    declined: int = 0
    released: int = 0
    poisoned: int = 0
