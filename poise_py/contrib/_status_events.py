"""The status page's event log: recent balancer events, repeats coalesced into one line.

A flapping endpoint sends the same few events over and over (``EndpointDegraded`` then
``EndpointDegradationEnded``, a circuit opening, half-opening and closing); kept one per
line they would push every other event out of the log. So events are kept as *entries*:
an entry is one kind of thing happening to one subject (an endpoint, a tier, the pool),
with how many times it happened, when first and when last, and the last event itself.
An event joins the entry of its kind and subject if the log still holds it, which then
moves to the front (newest); otherwise it starts a new entry, and the oldest entry past
``size`` is dropped. The kinds are the event types, except that the two ends of a state
(:data:`FAMILIES`) are one kind, so a flap is one line.

Pure: nothing here reads a clock; an event carries its own time (``event.at``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator

import attrs

from .. import BalancerEvent

FAMILIES = {
    "EndpointDegraded": "degradation",
    "EndpointDegradationEnded": "degradation",
    "CircuitOpened": "circuit",
    "CircuitHalfOpened": "circuit",
    "CircuitClosed": "circuit",
    "EndpointEjected": "ejection",
    "EndpointReadmitted": "ejection",
    "SlowStartBegan": "slow start",
    "SlowStartEnded": "slow start",
    "PanicStarted": "panic",
    "PanicEnded": "panic",
}
"""Event types that coalesce with each other for one subject: the two (or three) ends of a state."""


def _subject(event: BalancerEvent) -> Hashable:
    """What an event is about: its endpoint, its tier, or nothing (the pool)."""
    endpoint = getattr(event, "endpoint_id", None)
    if endpoint is not None:
        return ("endpoint", endpoint)
    tier = getattr(event, "tier", None)
    return ("tier", tier) if tier is not None else ("pool",)


@attrs.define(eq=False)
class Entry:
    """One line of the log: ``count`` events of one kind about one subject.

    Attributes:
        first_at: the first event's time (balancer clock).
        last: the newest event.
        count: how many events the entry stands for.
        types: how many of each event type it holds (``{"EndpointDegraded": 7, ...}``).
    """

    first_at: float
    last: BalancerEvent
    count: int = 1
    types: dict[str, int] = attrs.field(factory=dict)


class EventLog:
    """The last ``size`` entries; :meth:`add` is the balancer observer (see the module's docstring)."""

    __slots__ = ("_entries", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[Hashable, Entry] = OrderedDict()

    def add(self, event: BalancerEvent) -> None:
        """Keep ``event``: in its kind and subject's entry if the log has it, else in a new one."""
        name = type(event).__name__
        key = (FAMILIES.get(name, name), _subject(event))
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = Entry(first_at=event.at, last=event)
            if len(self._entries) > self.size:
                self._entries.popitem(last=False)
        else:
            entry.count += 1
            entry.last = event
            entry.first_at = min(entry.first_at, event.at)
            self._entries.move_to_end(key)
        entry.types[name] = entry.types.get(name, 0) + 1

    def newest_first(self) -> Iterator[Entry]:
        """The entries, the one with the newest event first."""
        return reversed(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)
