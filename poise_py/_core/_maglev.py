"""Maglev consistent hashing: an O(1) lookup table over a scope's members.

Theory of operation
-------------------
Maglev (Eisenbud et al., NSDI 2016) gives every member a pseudo-random permutation of
the table's ``M`` slots (``offset + j * skip mod M``, ``M`` prime, both derived from
the member's id) and lets the members take turns claiming their next preferred free
slot until the table is full; a weighted member takes turns in proportion to its
weight (Envoy's variant). A key is looked up as ``table[hash(key) % M]``: O(1), with
members holding ``M / n`` slots to within one, and a member joining or leaving moves
little more than its own share of keys.

Why Maglev and not rendezvous hashing: rendezvous (highest random weight) is simpler
and moves exactly the minimum of keys, but every lookup scores every member, O(n);
selection here must be O(1) or O(log n) per pick. Maglev's price is the table build,
O(M log M), paid only when the membership of the scope changes (discovery), never when
an endpoint's health changes: the table is built over *members*, and a lookup that
lands on an endpoint which cannot take the call walks on, along the key's own probe
sequence, to the next one that can. So an ejection moves only the ejected endpoint's
keys, and they come back when it recovers.

The table is filled from members sorted by id and hashed with stable functions
(BLAKE2b for ids, CRC-32 for string keys), so every process of a fleet that sees the
same membership builds the same table and sends a key to the same endpoint.
"""

from __future__ import annotations

import hashlib
import heapq
import zlib
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING

from .._errors import ConfigError

if TYPE_CHECKING:
    from ._record import Member

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
"""2**64 / phi, odd: multiplying by it spreads a 32-bit hash over 64 bits (Fibonacci hashing)."""

SLOTS_PER_MEMBER = 8
"""The table grows (to the next prime of its doubling ladder) to keep at least this many slots per member."""

_WITNESSES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)


def is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin, exact for every ``n < 3.3 * 10**24``."""
    if n < 2:
        return False
    for p in _WITNESSES:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in _WITNESSES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def next_prime(n: int) -> int:
    """The smallest prime ``>= n``."""
    while not is_prime(n):
        n += 1
    return n


def table_size(base: int, members: int) -> int:
    """``base`` while it holds :data:`SLOTS_PER_MEMBER` slots per member, else the next rung.

    The rungs are ``next_prime(base * 2**k)``: a function of ``base`` and the member
    count only, so every process agrees, and the size (hence every key) changes only
    when the membership crosses a doubling.
    """
    need = SLOTS_PER_MEMBER * members
    if need <= base:
        return base
    size = base
    while size < need:
        size *= 2
    return next_prime(size)


def key_hash(key: Hashable) -> int:
    """A 64-bit hash of a request key, stable across processes for str, bytes and int.

    Other hashable keys fall back to ``hash()``, which Python salts per process for
    strings inside them: stable within one balancer, not across a fleet.
    """
    kind = type(key)
    if kind is str:
        return zlib.crc32(key.encode()) * _GOLDEN & _MASK64  # type: ignore[attr-defined]
    if kind is int:
        return key * _GOLDEN & _MASK64  # type: ignore[operator]
    if kind is bytes:
        return zlib.crc32(key) * _GOLDEN & _MASK64  # type: ignore[arg-type]
    try:
        return hash(key) * _GOLDEN & _MASK64
    except TypeError:
        error = ConfigError("key", f"must be hashable (a str, bytes, int or tuple...), got {kind.__name__}")
        error.__cause__ = None  # `raise ... from None`, spelled so the compiled build keeps it
        raise error from None


def _permutation(endpoint_id: str, size: int) -> tuple[int, int]:
    digest = hashlib.blake2b(endpoint_id.encode(), digest_size=16).digest()
    offset = int.from_bytes(digest[:8], "little") % size
    skip = int.from_bytes(digest[8:], "little") % (size - 1) + 1
    return offset, skip


def build(members: Iterable[Member], size: int) -> list[Member]:
    """Fill a Maglev table of ``size`` slots (prime) from ``members`` (non-empty)."""
    ordered = sorted(members, key=lambda s: s.endpoint.id)
    n = len(ordered)
    table: list[Member | None] = [None] * size
    nexts: list[int] = []
    skips: list[int] = []
    for member in ordered:
        offset, skip = _permutation(member.endpoint.id, size)
        nexts.append(offset)
        skips.append(skip)
    weights = [s.endpoint.weight for s in ordered]
    heaviest = max(weights)

    def claim(i: int) -> None:
        """Member ``i`` takes the next free slot of its permutation."""
        c = nexts[i]
        skip = skips[i]
        while table[c] is not None:
            c += skip
            if c >= size:
                c -= size
        table[c] = ordered[i]
        c += skip
        nexts[i] = c - size if c >= size else c

    filled = 0
    if min(weights) == heaviest:
        order = range(n)  # equal weights: plain turns, member by member
        while filled < size:
            for i in order:
                claim(i)
                filled += 1
                if filled == size:
                    break
    else:
        # Member i's k-th turn (k = 0, 1, ...) comes in round k * heaviest // w_i, members
        # in order within a round: Envoy's weighted fill, without visiting members whose
        # turn has not come (a heap of next turns keeps it O(M log n) for any weight spread).
        turns = [(0, i) for i in range(n)]
        taken = [0] * n
        while filled < size:
            i = turns[0][1]
            claim(i)
            filled += 1
            k = taken[i] = taken[i] + 1
            heapq.heapreplace(turns, (k * heaviest // weights[i], i))
    return table  # type: ignore[return-value]  # full: every slot was claimed


class MaglevTable:
    """The members of one scope and their lazily built table.

    Attributes:
        base: the configured table size (prime).
    """

    __slots__ = ("_members", "_slots", "base")

    def __init__(self, base: int) -> None:
        self.base = base
        self._members: dict[Member, None] = {}
        self._slots: list[Member] | None = []

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, member: Member) -> bool:
        return member in self._members

    def add(self, member: Member) -> None:
        """A member joined: the table is rebuilt at the next lookup."""
        self._members[member] = None
        self._slots = None

    def discard(self, member: Member) -> None:
        """A member left: the table is rebuilt at the next lookup."""
        del self._members[member]
        self._slots = None

    def slots(self) -> list[Member]:
        """The table, built now if membership changed since the last build."""
        slots = self._slots
        if slots is None:
            members = self._members
            slots = build(members, table_size(self.base, len(members))) if members else []
            self._slots = slots
        return slots
