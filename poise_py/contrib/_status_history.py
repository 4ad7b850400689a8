"""Per-endpoint call figures for the status page: the last minute, and five minutes of history.

Theory of operation. The status page registers a call observer on each balancer it shows;
each ended permit comes here as :meth:`CallRecorder.record` with the balancer clock's
reading ``now``. Nothing here reads a clock or does I/O: time comes in as ``now`` (seconds
on the balancer's clock), so the windows roll over exactly as a test's clock says.

Each endpoint keeps two rings of buckets, each bucket a slice of time that holds counts
(calls, successes, faults) and a latency histogram:

- the *minute* ring: 60 one-second buckets, the source of the success rate, call rate, p50
  and p99 over the last minute;
- the *history* ring: buckets of ``step`` seconds covering :data:`HISTORY_SECONDS`, one
  point each of the page's sparklines (call rate, p99, and the worst circuit state seen).

A bucket is reused when its slot comes round again, so memory is bounded by the ring sizes,
whatever the call rate. Latencies go into logarithmic bins, :data:`BINS_PER_DOUBLING` per
doubling, from :data:`MIN_LATENCY` to :data:`MAX_LATENCY` (faster or slower calls land in
the end bins); a percentile is the middle of its bin, within 4.4 % of the exact value. So
a bucket's histogram has at most :data:`LATENCY_BINS` entries, and an endpoint at most
``(60 + points) * LATENCY_BINS`` (in practice a few dozen per bucket). Endpoints that had
no call for :data:`HISTORY_SECONDS` and are no longer in the pool are forgotten.

A success rate counts outcomes: successes over successes and faults. Cancellations (and a
hedge's loser) count as calls but have neither an outcome nor a latency.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import attrs

from .. import CallEnded, CircuitState

MINUTE = 60
"""Seconds (one-second buckets) in the window of the per-endpoint figures."""
HISTORY_SECONDS = 300.0
"""How far back the history (the page's sparklines) reaches: five minutes."""
MIN_HISTORY_STEP = 2.0
"""The finest history step, in seconds: at most 150 points per endpoint and series."""

BINS_PER_DOUBLING = 8
"""Latency bins per doubling: a bin spans 9 %, so its middle is within 4.4 % of any value in it."""
MIN_LATENCY = 2.0**-20
"""The lowest latency told apart, about a microsecond (faster calls share its bin)."""
MAX_LATENCY = 2.0**12
"""The highest latency told apart, about 68 minutes (slower calls share its bin)."""
_LOW_BIN = -20 * BINS_PER_DOUBLING
_HIGH_BIN = 12 * BINS_PER_DOUBLING
LATENCY_BINS = _HIGH_BIN - _LOW_BIN + 1
"""The most entries one bucket's latency histogram can have."""

_RANK = {
    CircuitState.CLOSED: 0,
    CircuitState.HALF_OPEN: 1,
    CircuitState.OPEN: 2,
    CircuitState.BLOCKED: 3,
    CircuitState.RETIRED: 4,
}
"""How bad a circuit state is: a history point shows the worst its step saw."""
_STATES = {rank: state for state, rank in _RANK.items()}


def latency_bin(seconds: float) -> int:
    """The histogram bin of a latency of ``seconds`` (clamped to the bins' range)."""
    if not seconds > MIN_LATENCY:  # also NaN and negative readings of a stepped clock
        return _LOW_BIN
    return min(_HIGH_BIN, math.floor(math.log2(seconds) * BINS_PER_DOUBLING))


def bin_value(index: int) -> float:
    """The latency a bin stands for: its geometric middle."""
    return float(2.0 ** ((index + 0.5) / BINS_PER_DOUBLING))


def percentile(histogram: Mapping[int, int], q: float) -> float | None:
    """The ``q`` quantile (0 < q <= 1, nearest rank) of a latency histogram, or None if it is empty."""
    total = sum(histogram.values())
    if total == 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for index in sorted(histogram):
        seen += histogram[index]
        if seen >= rank:
            return bin_value(index)
    raise AssertionError("unreachable: the ranks add up to the total")  # pragma: no cover


def _merge(into: dict[int, int], histogram: Mapping[int, int]) -> None:
    for index, count in histogram.items():
        into[index] = into.get(index, 0) + count


@attrs.define(eq=False)
class _Bucket:
    """One slice of time: ``index`` is its start divided by the ring's width."""

    index: int
    calls: int = 0
    successes: int = 0
    faults: int = 0
    latencies: dict[int, int] = attrs.field(factory=dict)
    worst: int = -1
    """The rank of the worst circuit state seen in the slice (-1: none seen)."""
    last: int = -1
    """The rank of the last circuit state seen in the slice (-1: none seen)."""
    p99_of: int = -1
    """How many calls the slice had when ``p99`` was worked out (-1: never): a past step's p99
    is worked out once, not on every fetch."""
    p99: float | None = None

    def reset(self, index: int) -> None:
        self.index = index
        self.calls = self.successes = self.faults = 0
        self.latencies.clear()
        self.worst = self.last = self.p99_of = -1

    def tail(self) -> float | None:
        """The slice's 99th percentile latency (kept until the slice has another call)."""
        if self.p99_of != self.calls:
            self.p99 = percentile(self.latencies, 0.99)
            self.p99_of = self.calls
        return self.p99


class _Ring:
    """``size`` buckets of ``width`` seconds: the last ``size * width`` seconds, reused in turn."""

    __slots__ = ("_buckets", "_current", "_since", "_until", "size", "width")

    def __init__(self, width: float, size: int) -> None:
        self.width = width
        self.size = size
        self._buckets = [_Bucket(index=-size - 1) for _ in range(size)]  # no slot holds a live index
        self._current = self._buckets[0]
        self._since = self._until = math.inf  # [since, until): the readings that fall in _current

    def index(self, now: float) -> int:
        return math.floor(now / self.width)

    def at(self, now: float) -> _Bucket | None:
        """The bucket ``now`` falls in (emptied if its slot held an older slice); None if too old to keep."""
        if self._since <= now < self._until:  # most calls: the slice of the call before
            return self._current
        index = self.index(now)
        bucket = self._buckets[index % self.size]
        if bucket.index != index:
            if bucket.index > index:
                return None  # a reading from before the ring's reach (a clock stepped back)
            bucket.reset(index)
        self._current, self._since, self._until = bucket, index * self.width, (index + 1) * self.width
        return bucket

    def live(self, now: float) -> list[_Bucket]:
        """The buckets of the last ``size`` slices up to ``now``, oldest first."""
        newest = self.index(now)
        return sorted((b for b in self._buckets if newest - self.size < b.index <= newest), key=lambda b: b.index)


@attrs.frozen(kw_only=True)
class Window:
    """An endpoint's (or a balancer's) calls over the last minute.

    Attributes:
        calls: permits that ended, cancellations included.
        successes: calls that succeeded.
        faults: calls that failed (any fault tier).
        rate: calls per second, over the minute or the part of it observed.
        success_rate: successes over successes and faults, or None with neither.
        p50: the median latency of calls with an outcome, in seconds, or None.
        p99: their 99th percentile latency, in seconds, or None.
    """

    calls: int
    successes: int
    faults: int
    rate: float
    success_rate: float | None
    p50: float | None
    p99: float | None


@attrs.frozen(kw_only=True)
class Point:
    """One history step of an endpoint.

    Attributes:
        start: the step's start, on the balancer clock.
        rate: calls per second in the step.
        p99: the step's 99th percentile latency, in seconds, or None without an outcome.
        state: the worst circuit state seen in the step, or None if none was seen yet.
    """

    start: float
    rate: float
    p99: float | None
    state: CircuitState | None


def _window(buckets: Iterable[_Bucket], seconds: float) -> Window:
    calls = successes = faults = 0
    latencies: dict[int, int] = {}
    for b in buckets:
        calls += b.calls
        successes += b.successes
        faults += b.faults
        _merge(latencies, b.latencies)
    outcomes = successes + faults
    return Window(
        calls=calls,
        successes=successes,
        faults=faults,
        rate=calls / seconds,
        success_rate=successes / outcomes if outcomes else None,
        p50=percentile(latencies, 0.5),
        p99=percentile(latencies, 0.99),
    )


def _count(bucket: _Bucket, bin_: int | None, *, success: bool) -> None:
    """One call into ``bucket``: with its latency's bin, or None for a cancellation (no outcome)."""
    bucket.calls += 1
    if bin_ is not None:
        if success:
            bucket.successes += 1
        else:
            bucket.faults += 1
        latencies = bucket.latencies
        latencies[bin_] = latencies.get(bin_, 0) + 1


class EndpointHistory:
    """One endpoint's minute and history rings (see the module's docstring)."""

    __slots__ = ("_history", "_minute", "last_seen", "state")

    def __init__(self, step: float) -> None:
        self._minute = _Ring(1.0, MINUTE)
        self._history = _Ring(step, math.ceil(HISTORY_SECONDS / step))
        self.last_seen = -math.inf
        """When this endpoint last had a call or a state noted (balancer clock)."""
        self.state: CircuitState | None = None
        """The last circuit state noted."""

    def record(self, now: float, duration: float, *, outcome: bool | None, probe: bool = False) -> None:
        """A call of ``duration`` seconds ended at ``now``.

        ``outcome`` is True for a success, False for a fault, None for a cancellation.

        Until an event or a snapshot says which state the circuit is in, a call says it:
        permits go only to a closed circuit, or as probes to a half-open one.
        """
        self.last_seen = max(self.last_seen, now)
        if self.state is None:
            self.state = CircuitState.HALF_OPEN if probe else CircuitState.CLOSED
        bin_ = None if outcome is None else latency_bin(duration)
        b = self._minute.at(now)
        if b is not None:
            _count(b, bin_, success=outcome is True)
        h = self._history.at(now)
        if h is not None:
            _count(h, bin_, success=outcome is True)
            if h.last < 0:  # a step's first touch starts it in the state the endpoint is in
                h.worst = h.last = _RANK[self.state]

    def note_state(self, now: float, state: CircuitState) -> None:
        """The circuit was in ``state`` at ``now`` (an event, or a snapshot)."""
        self.last_seen = max(self.last_seen, now)
        self.state = state
        h = self._history.at(now)
        if h is not None:
            rank = _RANK[state]
            h.worst = max(h.worst, rank)
            h.last = rank

    def minute_buckets(self, now: float) -> list[_Bucket]:
        """The minute ring's live buckets (to merge a balancer's figures)."""
        return self._minute.live(now)

    def points(self, now: float) -> list[Point]:
        """The history up to the step ``now`` is in, excluded (its rate would read low), oldest first.

        A step without a bucket had no call and no state change: it had no calls and the
        state the step before it ended in.
        """
        ring = self._history
        current = ring.index(now)
        buckets = {b.index: b for b in ring.live(now)}
        out: list[Point] = []
        carry: int = -1
        for index in range(current - ring.size + 1, current):
            b = buckets.get(index)
            if b is None:
                out.append(Point(start=index * ring.width, rate=0.0, p99=None, state=_STATES.get(carry)))
                continue
            if b.last >= 0:
                carry = b.last
            out.append(
                Point(
                    start=index * ring.width,
                    rate=b.calls / ring.width,
                    p99=b.tail(),
                    state=_STATES.get(b.worst),
                )
            )
        return out


def _span(observed: float, window: float) -> float:
    """The seconds a rate is over: the window, or the part of it observed (at least one second)."""
    return min(window, max(1.0, observed))


class CallRecorder:
    """The call figures of one balancer's endpoints, fed by a call observer and the circuit events.

    Args:
        step: seconds per history point (at least :data:`MIN_HISTORY_STEP`).
    """

    __slots__ = ("_endpoints", "started", "step")

    def __init__(self, step: float) -> None:
        self.step = max(MIN_HISTORY_STEP, step)
        self._endpoints: dict[str, EndpointHistory] = {}
        self.started: float | None = None
        """The first reading seen (balancer clock): rates before a full minute divide by the time since."""

    def _endpoint(self, endpoint_id: str, now: float) -> EndpointHistory:
        history = self._endpoints.get(endpoint_id)
        if history is None:
            if self.started is None:
                self.started = now
            self.forget(now, keep=())
            history = self._endpoints[endpoint_id] = EndpointHistory(self.step)
        return history

    def record(self, now: float, ended: CallEnded) -> None:
        """A permit ended at ``now`` (what the call observer passes on)."""
        outcome = None if ended.cancelled else ended.fault is None
        self._endpoint(ended.endpoint.id, now).record(now, ended.duration, outcome=outcome, probe=ended.probe)

    def note_state(self, now: float, endpoint_id: str, state: CircuitState) -> None:
        """``endpoint_id``'s circuit was in ``state`` at ``now``."""
        self._endpoint(endpoint_id, now).note_state(now, state)

    def observe(self, now: float) -> None:
        """Start the clock of the rates at ``now`` if nothing was seen before."""
        if self.started is None:
            self.started = now

    def forget(self, now: float, keep: Iterable[str]) -> None:
        """Drop the endpoints idle for :data:`HISTORY_SECONDS`, except those in ``keep`` (the pool)."""
        kept = set(keep)
        horizon = now - HISTORY_SECONDS
        for endpoint_id in [k for k, v in self._endpoints.items() if v.last_seen < horizon and k not in kept]:
            del self._endpoints[endpoint_id]

    def get(self, endpoint_id: str) -> EndpointHistory | None:
        """The history of ``endpoint_id``, or None if it has none."""
        return self._endpoints.get(endpoint_id)

    def __len__(self) -> int:
        return len(self._endpoints)

    def observed(self, now: float) -> float:
        """Seconds since the first reading (0 before any)."""
        return 0.0 if self.started is None else max(0.0, now - self.started)

    def window(self, now: float, endpoint_id: str) -> Window:
        """``endpoint_id``'s last minute (all zero if it had no call)."""
        history = self._endpoints.get(endpoint_id)
        buckets = [] if history is None else history.minute_buckets(now)
        return _window(buckets, _span(self.observed(now), MINUTE))

    def points(self, now: float, endpoint_id: str) -> list[Point]:
        """``endpoint_id``'s history up to ``now`` (points with no calls and no state if it has none)."""
        history = self._endpoints.get(endpoint_id)
        if history is None:
            history = EndpointHistory(self.step)  # empty: the same steps, nothing in them
        return history.points(now)

    def total(self, now: float) -> Window:
        """The whole balancer's last minute: every endpoint's calls together."""
        buckets = [b for h in self._endpoints.values() for b in h.minute_buckets(now)]
        return _window(buckets, _span(self.observed(now), MINUTE))
