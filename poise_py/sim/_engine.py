"""The discrete-event engine: one configuration, one seeded traffic, virtual time.

The engine drives a real :class:`~poise_py.LoadBalancer` (its clock injected, so its
timers follow virtual time) from a synchronous event loop: ``acquire`` and the permit's
reports are synchronous, so a simulated hour takes seconds. Arrivals and every random
draw of a request come from one stream seeded per scenario, consumed the same way
whatever the configuration does, so configurations are compared on identical traffic.

The engine is a user of the balancer like any other: it takes permits and reports
outcomes, retries through the decision ``lb.call`` uses (a :class:`RetryLoop` from
``lb._internals``, the one internal interface), sees circuit moves as the public typed
events of ``lb.add_observer``, and reads endpoint states from ``lb.snapshot()``. Beyond
the public API it uses ``lb._internals`` for the retry loop, the balancer's classifier,
and to fire due timers at the instants it samples (nothing else moves virtual time).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import heapq
import logging
import math
import random
from collections.abc import AsyncIterable, Callable, Sequence

import anyio
import attrs

from .._balancer import LoadBalancer
from .._classify import Classifier
from .._coordination._config import Coordination
from .._coordination._memory import InMemoryStorage
from .._core._budget import RetryBudget
from .._core._circuit import CircuitState
from .._core._circuit_policy import CircuitPolicy
from .._core._retry import Next, RetryLoop
from .._core._selection import Policy
from .._discovery import Delta, Snapshot, StaticDiscovery, Update
from .._discovery._publisher import DiscoveryPublisher
from .._endpoint import Endpoint
from .._errors import ConfigError, NoEligibleEndpoints, SelectionError
from .._events import BalancerEvent, CircuitClosed, CircuitOpened, EndpointEjected
from .._faults import Fault
from .._knobs import check_count, check_number
from .._permit import Permit
from .._snapshot import EndpointSnapshot
from ._models import EndpointModel
from ._observe import Client, Observation, Observer, Timeout
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
    """The state of a run at one instant of the timeline."""

    at: float
    success_rate: float | None
    capacity: float | None
    states: tuple[str, ...]


@attrs.frozen(kw_only=True)
class RunResult:
    """What one configuration did with the scenario's traffic."""

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

    @property
    def success_rate(self) -> float:
        """Successful requests / requests."""
        return self.successes / self.requests if self.requests else 1.0

    @property
    def mean_readmit(self) -> float | None:
        """Mean seconds from an endpoint's recovery to its return to rotation."""
        return sum(self.readmit_times) / len(self.readmit_times) if self.readmit_times else None


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (nearest rank) of already sorted values; None when there are none."""
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[i]


@attrs.define(eq=False)
class _Request:
    arrival: float
    draws: list[float]
    retries: RetryLoop
    instance: int = 0


_ARRIVAL, _COMPLETE, _SAMPLE, _DISCOVERY = 0, 1, 2, 3


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
        self._calls = 0
        self._readmits: list[float] = []
        self._recovered_at: dict[tuple[int, str], float] = {}
        self._window_ok = self._window_total = 0
        self._timeline: list[Sample] = []
        self._capacity: list[float] = []

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
        self._schedule_discovery()
        end = traffic.duration
        events = self._events
        next_progress = 0.0
        while events:
            at, _, kind, payload = heapq.heappop(events)
            if at > end and kind != _COMPLETE:
                continue
            if self._virtual and at > self.now:
                await anyio.sleep(at - anyio.current_time())  # background tasks run up to `at`
            self.now = at
            if kind == _ARRIVAL:
                self._push(self._next_arrival(at), _ARRIVAL, None)
                self._start(self._new_request(at))
            elif kind == _COMPLETE:
                self._complete(*payload)  # type: ignore[misc]
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
        retries = self._lbs[instance]._internals.retry_loop(self.traffic.attempts)
        return _Request(arrival=at, draws=draws, retries=retries, instance=instance)

    def _start(self, request: _Request) -> None:
        retries = request.retries
        if retries.attempts_made == 0:
            self._requests += 1
            retries.start(self.now)
        try:
            permit = self._lbs[request.instance].acquire(exclude=retries.exclude)
        except SelectionError as exc:
            if isinstance(exc, NoEligibleEndpoints) and any(m.healthy_at(self.now) for m in self.models.values()):
                self._no_eligible += 1
            self._finish(request, ok=False)
            return
        model = self.models[permit.endpoint.id]
        i = 2 * retries.attempts_made
        retries.attempt(model.id)
        if permit.probe and not model.healthy_at(self.now):
            self._probes_to_dead += 1
        self._calls += 1
        response = model.respond(self.now, request.draws[i], request.draws[i + 1])
        timeout = self.traffic.timeout
        if response.latency >= timeout:  # the client gives up at its deadline
            self._push(self.now + timeout, _COMPLETE, (request, permit, Timeout()))
        else:
            self._push(self.now + response.latency, _COMPLETE, (request, permit, response.error))

    def _complete(self, request: _Request, permit: Permit, error: Observation | None) -> None:
        lb = self._lbs[request.instance]
        reporting = self.config.reporting
        if error is None:
            if reporting is Reporting.NONE:
                permit.cancel()
            else:
                permit.succeed()
            self._finish(request, ok=True)
            return
        # What the client's library raises, judged by the configuration's classifier.
        fault, retry_after = lb._internals.classify(self._observer.exception(error), permit.endpoint.id)
        if reporting is Reporting.NONE:
            permit.cancel()
        elif reporting is Reporting.EVICT and fault not in (Fault.TRANSIENT, Fault.CALLER):
            permit.fail(Fault.PERMANENT)
        else:
            permit.fail(fault, retry_after=retry_after)
        if request.retries.after_fault(fault, self.now) is Next.RETRY:  # a denial counts in lb.retries_denied
            self._start(request)
            return
        self._finish(request, ok=False)

    def _finish(self, request: _Request, *, ok: bool) -> None:
        self._window_total += 1
        if ok:
            self._successes += 1
            self._window_ok += 1
            self._latencies.append(self.now - request.arrival)

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
                else:
                    self._recovered_at[index, endpoint_id] = self.now

    def _readmitted(self, index: int, endpoint_id: str) -> None:
        since = self._recovered_at.pop((index, endpoint_id), None)
        if since is not None:
            self._readmits.append(self.now - since)

    def _sample(self) -> None:
        alive = 0
        in_rotation = 0.0
        states: list[str] = []
        lbs = self._lbs
        for lb in lbs:
            lb._internals.run_timers(self.now)
        # A snapshot per instance costs; the fleet's are read only once an endpoint is alive.
        views: list[dict[str, EndpointSnapshot] | None] = [None] * len(lbs)
        views[0] = reported = self._view(lbs[0])
        for endpoint_id, model in self.models.items():
            first = reported.get(endpoint_id)
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
        self._timeline.append(Sample(at=self.now, success_rate=rate, capacity=capacity, states=tuple(states)))

    def _result(self) -> RunResult:
        latencies = sorted(self._latencies)
        return RunResult(
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
        )
