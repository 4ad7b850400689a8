"""The discrete-event engine: one configuration, one seeded traffic, virtual time.

The engine drives a real :class:`~poise_py.LoadBalancer` (its clock injected, so its
timers follow virtual time) from a synchronous event loop: ``acquire`` and the permit's
reports are synchronous, so a simulated hour takes seconds. Arrivals and every random
draw of a request come from one stream seeded per scenario, consumed the same way
whatever the configuration does, so configurations are compared on identical traffic.

Endpoints with a capacity serve at most that many calls at once and queue the rest
(:class:`~poise_py.sim._station.Station`): a call's latency is its wait plus its service
time, and the client gives up at its deadline whether the call is waiting or being
served (the server serves it anyway). Endpoints without one answer after their drawn
latency, as before.

A configuration with a ``hedge`` runs each request as ``lb.call(fn, hedge=...)`` does
(``poise_py/_call.py``'s ``hedged``), driven by events instead of tasks: the first attempt
at once, a hedge event each hedge delay while no answer came, the first success wins and
every other attempt's permit is cancelled as superseded. The server keeps working on a
loser (its call stays queued or in service until it ends); its answer changes nothing.

The engine is a user of the balancer like any other: it takes permits and reports
outcomes, retries through the decision ``lb.call`` uses (a :class:`RetryLoop` from
``lb._internals``, the one internal interface), sees circuit moves as the public typed
events of ``lb.add_observer``, and reads endpoint states from ``lb.snapshot()``. Beyond
the public API it uses ``lb._internals`` for the retry loop, the hedging state of a call
site, the balancer's classifier, and to fire due timers at the instants it samples
(nothing else moves virtual time). A hedged request's draws past ``traffic.attempts``
come from a stream of their own, so the traffic stream stays the same.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import heapq
import logging
import math
import random
from collections.abc import AsyncIterable, Callable, Collection, Sequence

import anyio
import attrs

from .. import (
    BalancerEvent,
    CircuitClosed,
    CircuitOpened,
    CircuitPolicy,
    CircuitState,
    Classifier,
    ConfigError,
    Coordination,
    Delta,
    DiscoveryPublisher,
    Endpoint,
    EndpointEjected,
    EndpointSnapshot,
    Fault,
    Hedge,
    InMemoryStorage,
    LoadBalancer,
    NoEligibleEndpoints,
    Permit,
    Policy,
    RetryBudget,
    SelectionError,
    Snapshot,
    StaticDiscovery,
    Update,
)
from .. import (
    Quota as ProviderQuota,
)
from .._internal import AfterFault, HedgeState, RetryLoop, check_count, check_number
from ._meter import LoadMeter
from ._models import EndpointModel
from ._observe import Client, Observation, Observer, Refused, Throttled, Timeout
from ._station import Admission, Station
from ._virtual_loop import VirtualTimeLoop

_EJECTED = frozenset({CircuitState.OPEN, CircuitState.BLOCKED, CircuitState.RETIRED})
_PARKED = frozenset({CircuitState.BLOCKED, CircuitState.RETIRED})


class Reporting(enum.Enum):
    """How a configuration reports outcomes to its balancer."""

    HEALTH = "health"
    """As poise_py intends: success, or the fault tier."""
    NONE = "none"
    """Naive: nothing reaches the circuit (every permit is cancelled after the call)."""
    EVICT = "evict"
    """First-strike permanent eviction: any fault the classifier does not call TRANSIENT
    (or CALLER) blocks the endpoint."""


@attrs.frozen(kw_only=True)
class Configuration:
    """One way of balancing, to compare against others on the same traffic."""

    name: str
    policy: Policy
    circuit: CircuitPolicy
    reporting: Reporting = Reporting.HEALTH
    retry_budget: RetryBudget = attrs.field(factory=RetryBudget)
    balancer_options: dict[str, object] = attrs.field(factory=dict)
    coordination: bool = False
    """Share circuits across the fleet's instances (an in-memory storage on virtual time)."""
    classifier: Classifier | None = None
    """How failures are classified (None: the scenario client's classifier)."""
    oracle: bool = False
    """Join the shortest queue, seeing every endpoint's true queue and health (no balancer
    judgement: the lower bound a client-side policy can approach)."""
    hedge: Hedge | None = None
    """Hedge every request as ``lb.call(fn, hedge=...)`` does (None: no hedging)."""

    def __attrs_post_init__(self) -> None:
        if self.hedge is not None and not isinstance(self.hedge, Hedge):
            raise ConfigError("hedge", f"must be a poise.Hedge(...) or None, got {self.hedge!r:.80}")


@attrs.frozen(kw_only=True)
class Traffic:
    """Open-loop Poisson arrivals.

    Attributes:
        rps: mean arrivals per second.
        duration: virtual seconds of traffic.
        timeout: the client's per-attempt timeout (a black hole costs this much).
        attempts: tries per request, each on another endpoint, within the retry budget.
        sample_interval: seconds between timeline samples.
    """

    rps: float = 100.0
    duration: float = 600.0
    timeout: float = 1.0
    attempts: int = 3
    sample_interval: float = 1.0

    def __attrs_post_init__(self) -> None:
        for name in ("rps", "duration", "timeout", "sample_interval"):
            value = getattr(self, name)
            check_number(f"traffic.{name}", value, low=0.0, low_open=True)
        if self.rps * self.duration > MAX_REQUESTS:
            raise ConfigError(
                "traffic.rps",
                f"rps * duration = {self.rps * self.duration:g} requests; at most {MAX_REQUESTS:,} per run",
            )
        if self.duration / self.sample_interval > MAX_SAMPLES:
            raise ConfigError(
                "traffic.sample_interval", f"at most {MAX_SAMPLES:,} samples per run; use a longer interval"
            )
        attempts = self.attempts
        check_count("traffic.attempts", attempts, maximum=100)


MAX_REQUESTS = 10_000_000
"""The most requests one run may simulate (rps * duration)."""
MAX_SAMPLES = 1_000_000


@attrs.frozen(kw_only=True)
class DiscoverySpec:
    """Discovery through a publisher that lags reality and may die.

    Attributes:
        delay: seconds between an endpoint joining or leaving and the announcement.
        publisher_dies_at: when the publisher is closed (its subscribers see the end).
    """

    delay: float = 1.0
    publisher_dies_at: float | None = None


@attrs.frozen(kw_only=True)
class Fleet:
    """Several client instances, each with its own balancer, splitting the traffic.

    Attributes:
        instances: how many balancers; each request goes to one, drawn from the seeded
            traffic stream.
    """

    instances: int = 1
    sync_interval: float = 1.0
    """Seconds between each coordinated instance's polls of the shared state."""

    def __attrs_post_init__(self) -> None:
        if not 1 <= self.instances <= 10_000:
            raise ConfigError("fleet.instances", f"must be in [1, 10000], got {self.instances}")
        if not 0 < self.sync_interval < math.inf:
            raise ConfigError("fleet.sync_interval", f"must be a positive number, got {self.sync_interval}")


@attrs.frozen(kw_only=True)
class Sample:
    """The state of a run at one instant of the timeline.

    ``success_rate`` and ``latency_p99`` are over the requests that ended since the
    previous sample (a timeout counts at its deadline); ``queued`` is how many calls wait
    in endpoints' queues at this instant; ``calls`` is each endpoint's calls so far, in the
    order of :attr:`RunResult.endpoint_ids` (the difference of two samples is a window's);
    ``limits`` each endpoint's adaptive concurrency limit at this instant, in the same
    order (None without one, or while it is absent).
    """

    at: float
    success_rate: float | None
    capacity: float | None
    states: tuple[str, ...]
    latency_p99: float | None = None
    queued: int = 0
    calls: tuple[int, ...] = ()
    limits: tuple[int | None, ...] = ()


class Outcomes:
    """The figures every run's outcome derives from its counts (a simulator's or the load lab's).

    Read by :class:`RunResult` and by ``bench/loadlab.py``'s ``LabResult``, so the two
    define them once and alike.
    """

    __slots__ = ()

    duration: float
    requests: int
    successes: int
    attempted: int
    backend_calls: int
    endpoint_calls: tuple[int, ...]
    peak_queues: tuple[int, ...]

    @property
    def goodput(self) -> float:
        """Successful requests per second of traffic."""
        return self.successes / self.duration if self.duration else 0.0

    @property
    def extra_load(self) -> float:
        """Retries and hedges per request: what they added to the backends' load (attempts per request minus one).

        Every attempt after a request's first is extra, a retry or a hedge alike (a hedge's
        loser, cancelled, was still sent). A request that found no endpoint at all made no
        attempt and adds nothing.
        """
        return (self.backend_calls - self.attempted) / self.requests if self.requests else 0.0

    @property
    def shares(self) -> tuple[float, ...]:
        """Each endpoint's share of the calls sent (in ``endpoint_ids`` order)."""
        total = sum(self.endpoint_calls)
        return tuple(c / total if total else 0.0 for c in self.endpoint_calls)

    @property
    def peak_queue(self) -> int:
        """The longest any endpoint's queue grew."""
        return max(self.peak_queues, default=0)

    @property
    def success_rate(self) -> float:
        """Successful requests / requests."""
        return self.successes / self.requests if self.requests else 1.0


SETTLE_TIME = 30.0
"""Seconds an adaptive limit is given to learn an endpoint's capacity before
:meth:`RunResult.mean_limits` averages it (the overload goal: within 30 s)."""


@attrs.frozen(kw_only=True)
class RunResult(Outcomes):
    """What one configuration did with the scenario's traffic.

    ``latencies_*`` are the end-to-end latencies of successful requests; ``all_latencies_*``
    those of every request, a failure at the moment it failed (a timeout at its
    deadline). ``endpoint_calls`` and ``peak_queues`` follow ``endpoint_ids``;
    ``return_peak_queues`` is, for each endpoint with a capacity that recovered, the
    longest its queue grew in its first :data:`RETURN_WINDOW` seconds back in rotation
    (from the recovery when it never left; the longest over its returns).
    """

    configuration: str
    requests: int
    successes: int
    latencies_p50: float | None
    latencies_p99: float | None
    capacity_retained: float
    spurious_ejections: int
    deserved_ejections: int
    probes_to_dead: int
    readmit_times: tuple[float, ...]
    no_eligible_while_alive: int
    backend_calls: int
    timeline: tuple[Sample, ...]
    endpoint_ids: tuple[str, ...]
    ejected: tuple[str, ...] = ()
    """The endpoints this configuration ever took out of rotation (open, blocked, retired)."""
    duration: float = 0.0
    attempted: int = 0
    """Requests that reached at least one endpoint."""
    latencies_p999: float | None = None
    all_latencies_p50: float | None = None
    all_latencies_p99: float | None = None
    all_latencies_p999: float | None = None
    endpoint_calls: tuple[int, ...] = ()
    peak_queues: tuple[int, ...] = ()
    return_peak_queues: dict[str, int] = attrs.field(factory=dict)
    hedges_sent: int = 0
    """Hedges sent (a hedged configuration's; each is also an extra attempt in ``extra_load``)."""
    hedges_won: int = 0
    """Hedges whose answer was the request's answer."""
    throttled: tuple[float, ...] = ()
    """When each call was refused by a rate limit or a spent quota (a 429), in order."""

    @property
    def mean_readmit(self) -> float | None:
        """Mean seconds from an endpoint's recovery to its return to rotation."""
        return sum(self.readmit_times) / len(self.readmit_times) if self.readmit_times else None

    def settled_from(self) -> float:
        """When the limits are taken as learned: :data:`SETTLE_TIME`, or half the run if that is shorter."""
        return min(SETTLE_TIME, self.duration / 2)

    def mean_limits(self, since: float | None = None) -> tuple[float | None, ...]:
        """Each endpoint's adaptive concurrency limit averaged over the timeline from ``since`` on.

        ``since`` defaults to :meth:`settled_from`, so a short (quick) run has figures too. In
        ``endpoint_ids`` order; None for an endpoint without an adaptive limit then. Set
        against its capacity, this is what the limit learned (by Little's law an endpoint
        keeps ``capacity`` calls in service and queues the rest).
        """
        if since is None:
            since = self.settled_from()
        sums = [0.0] * len(self.endpoint_ids)
        counts = [0] * len(self.endpoint_ids)
        for sample in self.timeline:
            if sample.at < since:
                continue
            for i, limit in enumerate(sample.limits):
                if limit is not None:
                    sums[i] += limit
                    counts[i] += 1
        return tuple(total / n if n else None for total, n in zip(sums, counts, strict=True))


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (nearest rank) of already sorted values; None when there are none."""
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[i]


RETURN_WINDOW = 10.0
"""Seconds after a return to rotation over which ``return_peak_queues`` is measured."""


@attrs.define(eq=False)
class _Flight:
    """One attempt of a hedged request, in flight."""

    permit: Permit
    started: float
    hedge: bool
    call: _Call | None
    """Its place in the endpoint's station (None: an endpoint without a capacity)."""


@attrs.define(eq=False)
class _Hedging:
    """A hedged request's race: the attempts in flight and ``hedged()``'s own variables."""

    state: HedgeState
    live: list[_Flight] = attrs.field(factory=list)
    retries: int = 0
    """Attempts the retry loop granted and not yet replaced (``hedged()``'s ``retries``)."""
    done: bool = False
    """No attempt may start any more (the driver's ``Attempts._done``): a non-retried
    failure, or a retry that found no endpoint."""
    hedging: bool = True
    next_at: float | None = None
    """When the next hedge is due (None: the delay is not measured yet)."""
    armed: float | None = None
    """The instant of the latest hedge event pushed (so a pump does not push it twice)."""
    over: bool = False


@attrs.define(eq=False)
class _Request:
    arrival: float
    draws: list[float]
    retries: RetryLoop
    instance: int = 0
    hedging: _Hedging | None = None


@attrs.define(eq=False)
class _Call:
    """One attempt at an endpoint with a capacity: queued, then served."""

    request: _Request
    permit: Permit
    error: Observation | None
    service: float
    endpoint: str
    done: bool = False
    """The client has its answer (or gave up): a later event for it changes nothing."""


_ARRIVAL, _COMPLETE, _SAMPLE, _DISCOVERY, _SERVED, _DEADLINE, _KICK, _MARK, _HEDGE = range(9)
_AFTER_END = frozenset({_COMPLETE, _SERVED, _DEADLINE, _HEDGE})
"""Kinds still handled after the traffic ends, so every request started gets its answer."""


class Engine:
    """Runs one configuration against endpoint models and traffic."""

    def __init__(
        self,
        models: Sequence[EndpointModel],
        traffic: Traffic,
        configuration: Configuration,
        *,
        seed: int,
        progress: Callable[[float], None] | None = None,
        discovery: DiscoverySpec | None = None,
        fleet: Fleet | None = None,
        client: Client | None = None,
    ) -> None:
        client = client or Client()
        self._classifier: Classifier = configuration.classifier or client.build()
        self._observer = Observer(client.protocol)
        self._ejected: set[str] = set()
        self.models: dict[str, EndpointModel] = {m.id: m for m in models}
        self.fleet: Fleet = fleet or Fleet()
        self._virtual = configuration.coordination
        """Coordinated runs go on a virtual-time asyncio loop so the coordinators' background polls follow
        virtual time; everything else is a synchronous loop with an injected clock (timers are
        evaluated lazily, so nothing needs to run between events)."""
        self._lbs: list[LoadBalancer] = []
        self.discovery = discovery
        self._publisher: DiscoveryPublisher | None = None
        self._revision = 1
        self.traffic = traffic
        self.config = configuration
        self.seed = seed
        self.now: float = 0.0
        self._progress = progress
        self._events: list[tuple[float, int, int, object]] = []
        self._seq = 0
        self._traffic_rng = random.Random(seed)  # noqa: S311 - simulation, not security
        self._latencies: list[float] = []
        self._requests = self._successes = 0
        self._spurious = self._deserved = self._probes_to_dead = 0
        self._no_eligible = 0
        self._calls = self._attempted = 0
        self._readmits: list[float] = []
        self._recovered_at: dict[tuple[int, str], float] = {}
        self._window_ok = self._window_total = 0
        self._timeline: list[Sample] = []
        self._capacity: list[float] = []
        self._all_latencies: list[float] = []
        self._window_latencies: list[float] = []
        self._calls_by: dict[str, int] = dict.fromkeys(self.models, 0)
        self._stations: dict[str, Station[_Call]] = {m.id: Station() for m in models if m.loaded}
        self._meters: dict[str, LoadMeter] = {m.id: LoadMeter() for m in models if m.reports_load}
        self._throttled: list[float] = []
        """When each call was refused by a rate limit or a spent quota (a 429), in order."""
        """The endpoints that attach a load report to their answers, and what they measure."""
        self._return_peaks: dict[str, int] = {}
        self._oracle_rng = random.Random(seed)  # noqa: S311 - simulation, not security
        self._extra_rng = random.Random(f"attempts past traffic.attempts {seed}")  # noqa: S311
        hedge = configuration.hedge
        self._attempts = traffic.attempts if hedge is None else max(traffic.attempts, hedge.max_attempts)
        """Attempts per request: a hedged request may make ``max_attempts`` (``lb.call``'s rule)."""
        self._hedges: list[HedgeState] = []
        """Each instance's hedging state for the configuration's hedge (empty: no hedging)."""
        self._others = {i: frozenset(self.models) - {i} for i in self.models} if configuration.oracle else {}

    def _push(self, at: float, kind: int, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, kind, payload))

    def clock(self) -> float:
        """The virtual clock the balancer reads."""
        return self.now

    def run(self) -> RunResult:
        """Run the whole scenario in its own event loop (the balancers' logs are muted)."""
        log = logging.getLogger("poise_py")
        level = log.level
        log.setLevel(logging.CRITICAL)  # simulated incidents are not the operator's
        try:
            return self._run_loop()
        finally:
            log.setLevel(level)

    def _run_loop(self) -> RunResult:
        if self._virtual:
            return anyio.run(self._run, backend="asyncio", backend_options={"loop_factory": VirtualTimeLoop})
        return anyio.run(self._run)

    def _endpoint(self, model: EndpointModel) -> Endpoint:
        return Endpoint(model.id, address=model.id, tier=model.tier, zone=model.zone, weight=model.weight)

    def _balancer(self, index: int, storage: InMemoryStorage | None) -> LoadBalancer:
        source: AsyncIterable[Update]
        if self._publisher is None:
            source = StaticDiscovery([self._endpoint(m) for m in self.models.values()])
        else:
            source = self._publisher.subscribe()
        return LoadBalancer(
            source,
            policy=self.config.policy,
            circuit=self.config.circuit,
            clock=None if self._virtual else self.clock,
            seed=self.seed + index,
            classifier=self._classifier,
            retry_budget=self.config.retry_budget,
            coordination=None if storage is None else Coordination(storage, sync_interval=self.fleet.sync_interval),
            no_eligible_alert_after=None,  # the report counts these; no log line per instance
            **self.config.balancer_options,  # type: ignore[arg-type]
        )

    async def _run(self) -> RunResult:
        if self.discovery is not None:
            self._publisher = DiscoveryPublisher()
        storage = None
        if self.config.coordination:
            storage = InMemoryStorage(clock=anyio.current_time)
        async with contextlib.AsyncExitStack() as stack:
            for index in range(self.fleet.instances):
                lb = await stack.enter_async_context(self._balancer(index, storage))
                lb.add_observer(functools.partial(self._observe, index))
                self._lbs.append(lb)
                if self.config.hedge is not None:
                    self._hedges.append(lb._internals.hedging(self.config.hedge))
            if self._publisher is not None:
                initial = [self._endpoint(m) for m in self.models.values() if m.exists_at(0.0)]
                self._publisher.publish(Snapshot(self._revision, initial))
                await anyio.wait_all_tasks_blocked()
            await self._loop()
            if self._publisher is not None:
                self._publisher.close()
        return self._result()

    async def _loop(self) -> None:
        traffic = self.traffic
        self._push(self._next_arrival(0.0), _ARRIVAL, None)
        self._push(0.0, _SAMPLE, None)
        for model in self.models.values():
            for point in model.change_points():
                if point > 0:
                    self._push(point, _SAMPLE, model.id)
            if model.id in self._stations:
                for point in {*model.change_points(), *model.warmup_steps()}:
                    self._push(point, _KICK, model.id)
        self._schedule_discovery()
        end = traffic.duration
        events = self._events
        next_progress = 0.0
        while events:
            at, _, kind, payload = heapq.heappop(events)
            if at > end and kind not in _AFTER_END:
                continue
            if self._virtual and at > self.now:
                await anyio.sleep(at - anyio.current_time())  # background tasks run up to `at`
            self.now = at
            if kind == _ARRIVAL:
                self._push(self._next_arrival(at), _ARRIVAL, None)
                request = self._new_request(at)
                if request.hedging is None:
                    self._start(request)
                else:
                    self._start_hedged(request)
            elif kind == _COMPLETE:
                self._complete(*payload)  # type: ignore[misc]
            elif kind == _HEDGE:
                self._hedge_due(payload)  # type: ignore[arg-type]
            elif kind == _SERVED:
                self._served(payload)  # type: ignore[arg-type]
            elif kind == _DEADLINE:
                self._deadline(payload)  # type: ignore[arg-type]
            elif kind == _KICK:
                self._kick(str(payload))
            elif kind == _MARK:
                self._mark(*payload)  # type: ignore[misc]
            elif kind == _DISCOVERY:
                await self._announce(payload)  # type: ignore[arg-type]
            elif payload is None:
                self._sample()
                self._push(at + traffic.sample_interval, _SAMPLE, None)
            else:
                self._health_changed(str(payload))
            if self._progress is not None and at >= next_progress:
                self._progress(min(at, end))
                next_progress = at + end / 200
        if self._progress is not None:
            self._progress(end)

    def _schedule_discovery(self) -> None:
        spec = self.discovery
        if spec is None:
            return
        dies = spec.publisher_dies_at
        for model in self.models.values():
            for at, change in ((model.joins_at, "added"), (model.leaves_at, "removed")):
                if at is None or at <= 0:
                    continue
                announce = at + spec.delay
                if dies is None or announce < dies:
                    self._push(announce, _DISCOVERY, (change, model.id))
        if dies is not None:
            self._push(dies, _DISCOVERY, ("dies", ""))

    async def _announce(self, payload: tuple[str, str]) -> None:
        publisher = self._publisher
        assert publisher is not None  # noqa: S101 - scheduled only with a publisher
        change, endpoint_id = payload
        if change == "dies":
            publisher.close()
        else:
            self._revision += 1
            if change == "added":
                publisher.publish(Delta(self._revision, added=[self._endpoint(self.models[endpoint_id])]))
            else:
                publisher.publish(Delta(self._revision, removed=[endpoint_id]))
        await anyio.wait_all_tasks_blocked()

    def _next_arrival(self, after: float) -> float:
        return after + self._traffic_rng.expovariate(self.traffic.rps)

    def _new_request(self, at: float) -> _Request:
        rnd = self._traffic_rng.random
        draws = [rnd() for _ in range(2 * self.traffic.attempts)]
        instance = int(rnd() * self.fleet.instances) if self.fleet.instances > 1 else 0
        # The library's own retry decision (LoadBalancer.call's), on this instance's budget.
        retries = self._lbs[instance]._internals.retry_loop(self._attempts)
        hedging = None if not self._hedges else _Hedging(self._hedges[instance])
        return _Request(arrival=at, draws=draws, retries=retries, instance=instance, hedging=hedging)

    def _start(self, request: _Request) -> None:
        """An unhedged request's first attempt, or its retry."""
        retries = request.retries
        if retries.attempts_made == 0:
            self._requests += 1
            retries.start(self.now)
        permit = self._select(request)
        if permit is None:
            retries.unsent()  # a retry that found no endpoint gives its withdrawal back, as lb.call's does
            self._finish(request, ok=False)
            return
        self._send(request, permit)

    def _select(self, request: _Request) -> Permit | None:
        """A permit on an endpoint the request has not tried; None when the balancer has none."""
        exclude: Collection[str] = request.retries.exclude
        if self.config.oracle:
            chosen = self._shortest_queue(exclude)
            if chosen is not None:
                exclude = self._others[chosen]
        try:
            return self._lbs[request.instance].acquire(exclude=exclude)
        except SelectionError as exc:
            if isinstance(exc, NoEligibleEndpoints) and any(m.healthy_at(self.now) for m in self.models.values()):
                self._no_eligible += 1
            return None

    def _send(self, request: _Request, permit: Permit) -> _Call | None:
        """Make the attempt ``permit`` allows: its call is answered, queued or times out in virtual time.

        Returns the call's place in the endpoint's station, if it went into one.
        """
        retries = request.retries
        model = self.models[permit.endpoint.id]
        i = 2 * retries.attempts_made
        if retries.attempts_made == 0:
            self._attempted += 1
        retries.attempt(model.id)
        if permit.probe and not model.healthy_at(self.now):
            self._probes_to_dead += 1
        self._calls += 1
        self._calls_by[model.id] += 1
        draws = request.draws
        if i + 1 >= len(draws):
            # A hedge past the traffic's attempts: its draws come from a stream of their
            # own, so the traffic stream stays the same whatever the configuration does.
            draws += (self._extra_rng.random(), self._extra_rng.random())
        response = model.respond(self.now, draws[i], draws[i + 1])
        if isinstance(response.error, Throttled):
            self._throttled.append(self.now)
        timeout = self.traffic.timeout
        station = self._stations.get(model.id)
        if station is not None and not isinstance(response.error, Timeout | Refused | Throttled):
            # Answered by the server, so served in turn (a black hole, a refusal and a
            # limiter's answer come before any queue).
            call = _Call(request, permit, response.error, response.latency, model.id)
            self._arrive(station, model, call)
            return call
        if response.latency >= timeout:  # the client gives up at its deadline
            self._push(self.now + timeout, _COMPLETE, (request, permit, Timeout()))
        else:
            self._push(self.now + response.latency, _COMPLETE, (request, permit, response.error))
        return None

    # -- hedged requests: lb.call(fn, hedge=...)'s race (poise_py/_call.py's hedged()) ---

    def _start_hedged(self, request: _Request) -> None:
        """A hedged request begins: its first attempt at once, the first hedge due a delay later."""
        race = request.hedging
        assert race is not None  # noqa: S101 - a hedged request
        race.state.started()
        self._requests += 1
        request.retries.start(self.now)
        permit = self._select(request)
        if permit is None:  # the first attempt's selection error is the request's answer
            race.done = race.over = True
            self._finish(request, ok=False)
            return
        self._fly(request, race, permit, hedge=False)
        delay = race.state.delay()
        race.next_at = None if delay is None else self.now + delay
        self._pump(request, race)

    def _fly(self, request: _Request, race: _Hedging, permit: Permit, *, hedge: bool) -> None:
        race.live.append(_Flight(permit, self.now, hedge, self._send(request, permit)))

    def _hedge_due(self, request: _Request) -> None:
        race = request.hedging
        assert race is not None  # noqa: S101 - only hedged requests schedule hedges
        if not race.over:
            self._pump(request, race)

    def _pump(self, request: _Request, race: _Hedging) -> None:
        """One turn of ``hedged()``'s loop: replace retried attempts, end when nothing is in flight, hedge when due."""
        while True:
            while race.retries:
                race.retries -= 1
                if race.done:
                    continue
                permit = self._select(request)
                if permit is None:  # a retry that finds no endpoint ends the request (once the rest end)
                    race.done = True
                    continue
                self._fly(request, race, permit, hedge=False)
            if not race.live:
                race.over = True
                self._finish(request, ok=False)
                return
            next_at = race.next_at
            if not race.hedging or next_at is None or len(race.live) >= race.state.hedge.max_attempts:
                return
            if next_at > self.now:
                if race.armed != next_at:
                    race.armed = next_at
                    self._push(next_at, _HEDGE, request)
                return
            # The hedge delay passed with no answer.
            permit = self._hedge_permit(request, race) if race.state.may_hedge() else None
            if permit is None:
                race.hedging = False  # the allowance, the budget or the pool is spent for this request
                continue
            race.state.spend()
            self._fly(request, race, permit, hedge=True)
            delay = race.state.delay()
            race.next_at = None if delay is None else self.now + delay

    def _hedge_permit(self, request: _Request, race: _Hedging) -> Permit | None:
        """A hedge's permit, as ``Attempts.hedge()`` takes it; None when none may go."""
        if race.done:
            return None
        lb = self._lbs[request.instance]
        if not request.retries.may_hedge(self.now, pool_size=lb._internals.pool_size):
            return None
        permit = self._select(request)
        if permit is None:
            request.retries.unsent()
        return permit

    def _complete_hedged(self, request: _Request, race: _Hedging, permit: Permit, error: Observation | None) -> None:
        flight = next(f for f in race.live if f.permit is permit)
        race.live.remove(flight)
        if error is None:
            self._report_success(permit)
            race.state.observe(self.now - flight.started)
            if flight.hedge:
                race.state.win()
            self._supersede(race)
            self._finish(request, ok=True)
            return
        step = request.retries.after_fault(self._report_fault(request, permit, error), self.now)
        if step is AfterFault.RETRY:
            race.retries += 1
        else:
            race.done = True
            if step is AfterFault.NOT_RETRYABLE:  # the request is bad: it ends at once
                self._supersede(race)
                self._finish(request, ok=False)
                return
        self._pump(request, race)

    def _supersede(self, race: _Hedging) -> None:
        """The race is over: every attempt still in flight lost, cancelled as if never sent.

        The server keeps working on it (a station's call holds its slot until it is
        served), but its answer changes nothing.
        """
        race.over = True
        for flight in race.live:
            flight.permit.cancel(superseded=True)
            if flight.call is not None:
                flight.call.done = True
        race.live.clear()

    def _shortest_queue(self, exclude: Collection[str]) -> str | None:
        """The oracle's pick: the healthy endpoint not yet tried where a call waits least."""
        best: tuple[float, float] | None = None
        chosen = None
        for endpoint_id, model in self.models.items():
            if endpoint_id in exclude or not model.healthy_at(self.now):
                continue
            station = self._stations.get(endpoint_id)
            capacity = model.capacity_at(self.now)
            load = 0.0 if station is None or capacity is None else (station.in_system + 1) / capacity
            key = (load, self._oracle_rng.random())
            if best is None or key < best:
                best, chosen = key, endpoint_id
        return chosen

    def _arrive(self, station: Station[_Call], model: EndpointModel, call: _Call) -> None:
        capacity = model.capacity_at(self.now)
        admission = station.arrive(call, math.inf if capacity is None else capacity, model.max_queue)
        if admission is Admission.SHED:
            call.done = True
            self._push(self.now + 0.001, _COMPLETE, (call.request, call.permit, model.overload))
        elif admission is Admission.SERVE:
            self._serve(call)
            if call.service >= self.traffic.timeout:
                self._push(self.now + self.traffic.timeout, _DEADLINE, call)
        else:
            self._push(self.now + self.traffic.timeout, _DEADLINE, call)

    def _serve(self, call: _Call) -> None:
        """Service starts now (a queued call's deadline event was pushed when it arrived)."""
        self._push(self.now + call.service, _SERVED, call)
        meter = self._meters.get(call.endpoint)
        if meter is not None:
            meter.busy(self.now, self._stations[call.endpoint].busy)

    def _served(self, call: _Call) -> None:
        station = self._stations[call.endpoint]
        station.depart()
        self._kick(call.endpoint)
        meter = self._meters.get(call.endpoint)
        if meter is not None:
            meter.busy(self.now, station.busy)
            meter.answered(self.now, error=call.error is not None)
        if not call.done:
            call.done = True
            if meter is not None:  # the answer carries the server's report (a late one is lost with it)
                capacity = self.models[call.endpoint].capacity_at(self.now)
                call.permit.report_load(meter.report(self.now, math.inf if capacity is None else capacity))
            self._complete(call.request, call.permit, call.error)

    def _deadline(self, call: _Call) -> None:
        if not call.done:
            call.done = True
            self._complete(call.request, call.permit, Timeout())

    def _kick(self, endpoint_id: str) -> None:
        """Start the queued calls that a free slot (or a raised capacity) lets in."""
        capacity = self.models[endpoint_id].capacity_at(self.now)
        for call in self._stations[endpoint_id].start_waiting(math.inf if capacity is None else capacity):
            self._serve(call)

    def _mark(self, endpoint_id: str, read: bool) -> None:  # noqa: FBT001 - an event's payload
        station = self._stations[endpoint_id]
        if read:
            self._return_peaks[endpoint_id] = max(self._return_peaks.get(endpoint_id, 0), station.peak_since)
        else:
            station.mark()

    def _complete(self, request: _Request, permit: Permit, error: Observation | None) -> None:
        model = self.models[permit.endpoint.id]
        if model.quota is not None and self.config.reporting is Reporting.HEALTH:
            self._report_quota(model, permit, error)
        race = request.hedging
        if race is not None:
            if not permit.done:  # else a superseded loser's answer: it changes nothing
                self._complete_hedged(request, race, permit, error)
            return
        if error is None:
            self._report_success(permit)
            self._finish(request, ok=True)
            return
        fault = self._report_fault(request, permit, error)
        if request.retries.after_fault(fault, self.now) is AfterFault.RETRY:  # a denial counts in lb.retries_denied
            self._start(request)
            return
        self._finish(request, ok=False)

    def _report_quota(self, model: EndpointModel, permit: Permit, error: Observation | None) -> None:
        """A provider's answer says how much of its quota is left (``x-ratelimit-*``), as a real one does."""
        if isinstance(error, Timeout | Refused):
            return  # no answer, no headers
        left = model.quota_left(self.now)
        if left is not None:
            remaining, reset = left
            limit = model.quota.requests if model.quota is not None else None
            permit.report_quota(ProviderQuota(requests_limit=limit, requests_remaining=remaining, requests_reset=reset))

    def _report_success(self, permit: Permit) -> None:
        if self.config.reporting is Reporting.NONE:
            permit.cancel()
        else:
            permit.succeed()

    def _report_fault(self, request: _Request, permit: Permit, error: Observation) -> Fault:
        """Report a failed attempt as the configuration does; the fault its classifier saw."""
        lb = self._lbs[request.instance]
        reporting = self.config.reporting
        # What the client's library raises, judged by the configuration's classifier.
        verdict = lb._internals.classify(self._observer.exception(error), permit.endpoint.id)
        fault = verdict.fault
        if reporting is Reporting.NONE:
            permit.cancel()
        elif reporting is Reporting.EVICT and fault not in (Fault.TRANSIENT, Fault.CALLER):
            permit.fail(Fault.PERMANENT)
        else:
            permit.fail(fault, retry_after=verdict.retry_after, overload=verdict.overload)
        return fault

    def _finish(self, request: _Request, *, ok: bool) -> None:
        self._window_total += 1
        latency = self.now - request.arrival
        self._all_latencies.append(latency)
        self._window_latencies.append(latency)
        if ok:
            self._successes += 1
            self._window_ok += 1
            self._latencies.append(latency)

    def _observe(self, index: int, event: BalancerEvent) -> None:
        """Instance ``index``'s balancer emitted ``event``: count ejections and readmissions.

        A CLOSED circuit leaving rotation is an :class:`EndpointEjected` with its new
        state (active health's carry none); any move to OPEN a :class:`CircuitOpened`;
        a close a :class:`CircuitClosed`, whose ``previous`` also shows a block or a
        retirement that no event announced (from HALF_OPEN).
        """
        if isinstance(event, EndpointEjected):
            if event.state not in _EJECTED:
                return
            model = self.models[event.endpoint_id]
            self._ejected.add(model.id)
            if model.healthy_at(self.now):
                self._spurious += 1
            else:
                self._deserved += 1
        elif isinstance(event, CircuitOpened):
            self._ejected.add(event.endpoint_id)
        elif isinstance(event, CircuitClosed):
            if event.previous in _PARKED:
                self._ejected.add(event.endpoint_id)
            self._readmitted(index, event.endpoint_id)

    def _view(self, lb: LoadBalancer) -> dict[str, EndpointSnapshot]:
        """One instance's endpoints by id (its timers due now already fired)."""
        return {e.id: e for e in lb.snapshot().endpoints}

    def _health_changed(self, endpoint_id: str) -> None:
        model = self.models[endpoint_id]
        if model.healthy_at(self.now) and not model.healthy_at(self.now - 1e-9):
            for index, lb in enumerate(self._lbs):
                lb._internals.run_timers(self.now)
                e = self._view(lb).get(endpoint_id)
                if e is not None and e.eligible_reason is None and e.state is CircuitState.CLOSED:
                    self._readmits.append(0.0)  # never left rotation
                    self._back(endpoint_id)
                else:
                    self._recovered_at[index, endpoint_id] = self.now

    def _readmitted(self, index: int, endpoint_id: str) -> None:
        since = self._recovered_at.pop((index, endpoint_id), None)
        if since is not None:
            self._readmits.append(self.now - since)
            self._back(endpoint_id)

    def _back(self, endpoint_id: str) -> None:
        """A recovered endpoint is back in rotation: watch its queue for :data:`RETURN_WINDOW` seconds."""
        if endpoint_id in self._stations:
            self._mark(endpoint_id, False)
            self._push(self.now + RETURN_WINDOW, _MARK, (endpoint_id, True))

    def _sample(self) -> None:
        alive = 0
        in_rotation = 0.0
        states: list[str] = []
        limits: list[int | None] = []
        lbs = self._lbs
        for lb in lbs:
            lb._internals.run_timers(self.now)
        # A snapshot per instance costs; the fleet's are read only once an endpoint is alive.
        views: list[dict[str, EndpointSnapshot] | None] = [None] * len(lbs)
        views[0] = reported = self._view(lbs[0])
        for endpoint_id, model in self.models.items():
            first = reported.get(endpoint_id)
            limits.append(None if first is None else first.concurrency_limit)
            if first is None:
                states.append("absent")
            elif first.degraded and first.state is CircuitState.CLOSED:
                states.append("degraded")  # the ejection guard kept it, as reserve capacity
            else:
                states.append(first.state.value)
            if not model.healthy_at(self.now):
                continue
            alive += 1
            for index, lb in enumerate(lbs):
                view = views[index]
                if view is None:
                    view = views[index] = self._view(lb)
                e = view.get(endpoint_id)
                if e is not None and e.eligible_reason is None:
                    in_rotation += 1 / len(lbs)
                    if e.state is CircuitState.CLOSED and (index, endpoint_id) in self._recovered_at:
                        self._readmitted(index, endpoint_id)
        capacity = in_rotation / alive if alive else None
        if capacity is not None:
            self._capacity.append(capacity)
        rate = self._window_ok / self._window_total if self._window_total else None
        self._window_ok = self._window_total = 0
        window = sorted(self._window_latencies)
        self._window_latencies = []
        self._timeline.append(
            Sample(
                at=self.now,
                success_rate=rate,
                capacity=capacity,
                states=tuple(states),
                latency_p99=percentile(window, 0.99),
                queued=sum(len(s.waiting) for s in self._stations.values()),
                calls=tuple(self._calls_by.values()),
                limits=tuple(limits),
            )
        )

    def _result(self) -> RunResult:
        latencies = sorted(self._latencies)
        every = sorted(self._all_latencies)
        return RunResult(
            duration=self.traffic.duration,
            attempted=self._attempted,
            latencies_p999=percentile(latencies, 0.999),
            all_latencies_p50=percentile(every, 0.50),
            all_latencies_p99=percentile(every, 0.99),
            all_latencies_p999=percentile(every, 0.999),
            endpoint_calls=tuple(self._calls_by.values()),
            peak_queues=tuple(s.peak if (s := self._stations.get(i)) else 0 for i in self.models),
            return_peak_queues=dict(self._return_peaks),
            configuration=self.config.name,
            requests=self._requests,
            successes=self._successes,
            latencies_p50=percentile(latencies, 0.50),
            latencies_p99=percentile(latencies, 0.99),
            capacity_retained=sum(self._capacity) / len(self._capacity) if self._capacity else 1.0,
            spurious_ejections=self._spurious,
            deserved_ejections=self._deserved,
            probes_to_dead=self._probes_to_dead,
            readmit_times=tuple(self._readmits),
            no_eligible_while_alive=self._no_eligible,
            backend_calls=self._calls,
            timeline=tuple(self._timeline),
            endpoint_ids=tuple(self.models),
            ejected=tuple(sorted(self._ejected)),
            hedges_sent=sum(h.sent for h in self._hedges),
            hedges_won=sum(h.won for h in self._hedges),
            throttled=tuple(self._throttled),
        )

    @property
    def balancers(self) -> tuple[LoadBalancer, ...]:
        """The balancers of the run, one per fleet instance (after :meth:`run`: their ``statistics()``)."""
        return tuple(self._lbs)
