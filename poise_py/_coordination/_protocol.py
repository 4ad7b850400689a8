"""The storage protocol for shared circuits: what crosses the wire, and nothing more.

Theory of operation
-------------------
A fleet shares one record per endpoint. The record carries *mechanism*: the state
(CLOSED, OPEN, HALF_OPEN), a ``version`` that every state change increments, the
storage-clock times ``opened_at`` and ``reopen_at``, the count of consecutive failed
half-open rounds, the round's probe budget, and the protocol version of its last writer.
*Policy* (when to trip, how many probes, how long to wait) stays in the Python core and
travels as arguments.

Every operation is atomic and fenced by ``expected_version``: it applies only if the
record is still at the version the caller last saw, and it always answers with the
record as it now is (:class:`Reply`), so a refused caller learns the news in the same
round trip. The storage's own clock is the only one that decides OPEN -> HALF_OPEN:
:meth:`Storage.trip_open` fixes the deadline once, in storage time, from the failed-round
count it holds (design C of seed 002, with design A's arithmetic and its clamp), and
:meth:`Storage.begin_half_open_if_elapsed` only compares. No instance passes a wait that
the storage would trust later, which is why stale reads cannot shorten a round.

Protocol versions:

- 1: stored deadline, constant open wait (``Escalation.base``, jittered), no
  failed-round count.
- 2: adds ``failed_rounds`` (incremented by a trip from HALF_OPEN, left alone by a trip
  from CLOSED, reset by close) and the escalated, clamped wait computed by the storage.
- 3: adds the namespace's change log: every write also bumps a sequence number and notes
  the written key under it, so a poll when nothing changed reads one counter and a poll
  after k changes reads k records (:meth:`RedisStorage.changes`). Older writers do not
  log their writes: a protocol-3 reader sees them at its next full read
  (``Coordination.full_poll_interval``).

Versions are additive. Every version stores ``reopen_at`` and every version's half-open
check reads only that, so in a mixed fleet a round lasts what the instance that tripped
it decided, and every instance honours it. ``docs/coordination.md`` gives the rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .._core._shared import (
    BACKOFF_PROTOCOL_VERSION,
    CHANGES_PROTOCOL_VERSION,
    CLOCK_SLACK,
    FAILED_ROUNDS_CAP,
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    SHARED_STATES,
    Changes,
    OpenWait,
    ProbeReport,
    Reply,
    SharedState,
)
from .._errors import ConfigError

__all__ = [
    "BACKOFF_PROTOCOL_VERSION",
    "CHANGES_PROTOCOL_VERSION",
    "CLOCK_SLACK",
    "FAILED_ROUNDS_CAP",
    "MIN_PROTOCOL_VERSION",
    "PROTOCOL_VERSION",
    "SHARED_STATES",
    "Changes",
    "OpenWait",
    "ProbeReport",
    "Reply",
    "SharedState",
    "Storage",
]


@runtime_checkable
class Storage(Protocol):
    """Shared circuit records for a fleet: mechanism only, atomic, fenced by version.

    ``key`` is the endpoint id; a storage maps it into its own namespace. Every method
    may raise :class:`~poise_py.CoordinationError` (its subclass
    :class:`~poise_py.CoordinationUnavailable` when the backend cannot be reached); the
    balancer never lets either reach a caller.
    """

    @property
    def protocol_version(self) -> int:
        """The protocol this storage speaks (see the module docstring)."""
        ...

    async def read(self, keys: Sequence[str]) -> list[SharedState]:
        """The records of ``keys``, in order (CLOSED at version 0 where there is none)."""
        ...

    async def trip_open(self, key: str, *, expected_version: int, wait: OpenWait) -> Reply:
        """CLOSED or HALF_OPEN -> OPEN until ``now + wait.duration(failed_rounds)``.

        From HALF_OPEN ``failed_rounds`` grows by one first; from CLOSED it is left as it
        is. Refused if the record is already OPEN or not at ``expected_version``.
        """
        ...

    async def begin_half_open_if_elapsed(
        self, key: str, *, expected_version: int, permitted: int, lease: float
    ) -> Reply:
        """OPEN -> HALF_OPEN once the storage clock reaches ``reopen_at``.

        Also starts a fresh round when a HALF_OPEN round's leases lapsed. The round gets
        ``permitted`` probe leases and lapses ``lease`` seconds later.
        """
        ...

    async def lease_probe(self, key: str, *, expected_version: int) -> Reply:
        """Take one probe lease from the round's budget; ``applied`` says whether one was given."""
        ...

    async def report_probe(self, key: str, *, expected_version: int, report: ProbeReport) -> Reply:
        """Report a leased probe's success, or give an unused lease back."""
        ...

    async def close(self, key: str, *, expected_version: int) -> Reply:
        """HALF_OPEN -> CLOSED; ``failed_rounds`` resets to 0 (protocol 2)."""
        ...


def check_protocol_version(knob: str, value: int) -> int:
    """Validate a protocol version a storage is asked to speak."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(knob, f"must be an int, got {value!r}")
    if not MIN_PROTOCOL_VERSION <= value <= PROTOCOL_VERSION:
        raise ConfigError(
            knob, f"this library speaks protocols {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}, got {value}"
        )
    return value
