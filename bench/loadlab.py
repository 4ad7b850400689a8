"""The load lab: a scenario's queueing model on real loopback backends, to check the simulator against.

Run: ``python bench/loadlab.py [scenario] [--duration S] [--configs a,b] [--seed N] [--json]
[--compare]`` (default: ``heterogeneous-pool``, 15 s of traffic for each of the five
configurations, about a minute and a half in all; ``--configs`` takes names separated by
commas, "round robin, default circuit" included, and ``circuit`` names every policy three
ways: with the default circuit, with one that never ejects, reporting nothing; ``--compare``
also runs the simulator on the same traffic and prints its figures under the lab's).

The simulator (``poise_py.sim``) models an endpoint with a capacity as a station: it serves
at most ``capacity`` calls at once, the rest wait in a FIFO queue (past ``max_queue`` it
answers its overload status at once), a call's latency is its wait plus a log-normal
service time, and the client gives up at its per-attempt deadline while the server still
serves the abandoned call in its turn. The lab runs that model for real and measures the
same outcomes, so that when the two disagree it is the simulator that is wrong:

- **Backends** (``bench/_lab_backends.py``): one real HTTP/1.1 keep-alive server per
  endpoint on 127.0.0.1, h11 on anyio, all in one child process, a fresh one for every
  configuration (each configuration's process is started before any traffic, so no
  process start takes CPU from a run, and stopped right after its run, its abandoned
  work with it). Each serves as the model says (slots, a FIFO queue, service times drawn
  from the scenario's latency and phases, which follow wall-clock time since the
  traffic started) and publishes its calls in system and its peak queue in shared memory.
- **Traffic**: open-loop Poisson arrivals at ``traffic.rps`` for ``duration`` seconds,
  each request started at its scheduled instant whatever earlier ones are doing (a task
  per request). The schedule and each attempt's two uniform draws come from the same
  seeded stream the simulator's engine consumes (:func:`schedule`), and the draws travel
  to the backend in a header: the lab and the simulator see the same arrivals and the
  same service times, so what differs is only what is real (time, sockets, scheduling).
- **Client**: an ``httpx.AsyncClient`` whose per-attempt deadline is the httpx timeout
  ``traffic.timeout``, with ``traffic.attempts`` attempts, balanced five ways by default,
  named as the simulator names them (:data:`CONFIGURATIONS`): poise_py's default and round
  robin with the default circuit through :class:`~poise_py.contrib.httpx.PoiseTransport`
  (``--configs`` adds "poise_py, every failure its own", the circuit with
  ``overload_window=None``, and "poise_py, PeakEwma", as the ``overload-503`` scenario names them,
  and "random, default circuit" against "random, never ejects", a circuit that never trips);
  naive round-robin, uniform random and the shortest-queue oracle (which reads every
  backend's calls in system from the shared memory) through a transport that reports
  nothing to the balancer (every permit is cancelled) but retries through the same
  retry decision.
- **Outcomes**, defined as the simulator's ``RunResult``: success (a 2xx after retries),
  goodput, p50/p99/p99.9 of every request's latency from its scheduled arrival to its
  outcome (a timeout when the client gave up), p99 of successes, extra load (retries
  per request; a request shed before any attempt adds none), each endpoint's share of
  attempts and peak queue; besides, the client's CPU seconds and the generator's lag,
  with a warning when the generator and not the pool is the bottleneck.

Only scenarios the backends can serve are accepted: an HTTP client, a static pool, and
failures that are HTTP statuses (an endpoint without a capacity serves every call at once,
as the simulator's does). Anything else (rate limits, quotas, flapping, cold starts,
timeouts or refusals as phases, joining or leaving, discovery, fleets) is refused with
exit status 2, naming what is unsupported. The scenario's own ``[[configurations]]`` are
not run.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import random
import ssl
import sys
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import poise_py as poise
from bench._lab_backends import DRAW_HEADER, Backends
from poise_py import sim
from poise_py._core._retry import AfterFault
from poise_py.contrib.httpx import PoiseTransport, endpoint_url

DEFAULT_SCENARIO = "heterogeneous-pool"
DEFAULT_DURATION = 15.0
"""Seconds of traffic per configuration by default (five configurations: about 85 s in all)."""
LAG_LIMIT = 0.020
"""A start lag p99 above this says the generator, not the pool, is the bottleneck."""
ON_TIME = 0.010
"""A request starts on time within this many seconds of its schedule."""
ON_TIME_SHARE = 0.95
"""Below this share of requests on time, the generator is the bottleneck."""
OVERRUN = 5.0
"""A generator this many seconds behind its schedule stops the run (:class:`Overrun`)."""
_LEAD = 0.05
"""Seconds between publishing the traffic's start and its time zero."""
_DRAIN_SLACK = 30.0
"""Seconds the last requests may take past their deadlines before the run is called stuck."""
_HOST = "lab"


class Overrun(Exception):  # noqa: N818 - reads as what happened
    """The load generator fell :data:`OVERRUN` seconds behind its schedule: the run was stopped."""

    def __init__(self, configuration: str, behind: float) -> None:
        super().__init__(
            f"{configuration}: the load generator fell {behind:.1f} s behind its schedule; this machine cannot "
            f"drive this load now (its figures would measure the machine, not the pool), so the run was stopped"
        )
        self.configuration = configuration
        self.behind = behind


class Unsupported(Exception):  # noqa: N818 - reads as a verdict on the scenario
    """The lab cannot model this scenario; ``problems`` says what it lacks."""

    def __init__(self, scenario: str, problems: Sequence[str]) -> None:
        super().__init__(f"{scenario}: the load lab cannot model {'; '.join(problems)}")
        self.problems = tuple(problems)


@attrs.frozen(kw_only=True)
class LabConfiguration:
    """One way of balancing the lab's client, named as the simulator names it.

    ``health``: the balancer hears every outcome (``PoiseTransport``); otherwise every
    permit is cancelled after its call, whatever happened. ``oracle``: each attempt goes
    to the endpoint with the fewest calls in system per slot, read from the backends.
    """

    name: str
    policy: Callable[[], poise.Policy]
    health: bool
    oracle: bool = False
    circuit: Callable[[], poise.CircuitPolicy] = poise.CircuitPolicy
    options: Callable[[], dict[str, Any]] = dict
    """More ``LoadBalancer`` keyword arguments: the load knobs."""
    transport: Callable[[], dict[str, Any]] = dict
    """More ``PoiseTransport`` keyword arguments (``hedge=``)."""


def _never_ejects() -> poise.CircuitPolicy:
    """A circuit that never trips but still hears every outcome: "no circuit", like for like."""
    return poise.CircuitPolicy(consecutive_failures=1_000_000, consecutive_transient_failures=1_000_000)


EVERY_POLICY: dict[str, Callable[[], poise.Policy]] = {
    "round robin": poise.RoundRobin,
    "random": poise.Random,
    "weighted random": poise.WeightedRandom,
    "weighted round robin": poise.WeightedRoundRobin,
    "power of two choices": poise.PowerOfTwoChoices,
    "peak ewma": poise.PeakEwma,
    "consistent hash": poise.ConsistentHash,
}
"""Every selection policy, for the circuit's like-for-like family (``--configs circuit``)."""


def _circuit_family() -> list[LabConfiguration]:
    """Each policy with the default circuit, with one that never ejects, and reporting nothing.

    Issue 36's claim on real backends: on ``heterogeneous-pool`` and at twice the capacity
    (``overload``), every policy with the default circuit serves at least as many calls
    as the same policy with no circuit (reporting nothing, as the simulator's
    ``Reporting.NONE``, or hearing everything but never ejecting).
    """
    family = []
    for name, policy in EVERY_POLICY.items():
        family += [
            LabConfiguration(name=f"{name}: default circuit", policy=policy, health=True),
            LabConfiguration(name=f"{name}: never ejects", policy=policy, health=True, circuit=_never_ejects),
            LabConfiguration(name=f"{name}: reporting nothing", policy=policy, health=False),
        ]
    return family


CONFIGURATIONS: dict[str, LabConfiguration] = {
    c.name: c
    for c in (
        LabConfiguration(name="poise_py default", policy=poise.PowerOfTwoChoices, health=True),
        LabConfiguration(name="naive round-robin", policy=poise.RoundRobin, health=False),
        LabConfiguration(name="uniform random", policy=poise.Random, health=False),
        LabConfiguration(name="shortest-queue oracle", policy=poise.RoundRobin, health=False, oracle=True),
        LabConfiguration(name="round robin, default circuit", policy=poise.RoundRobin, health=True),
        LabConfiguration(
            name="poise_py, every failure its own",
            policy=poise.PowerOfTwoChoices,
            health=True,
            circuit=lambda: poise.CircuitPolicy(overload_window=None),
        ),
        LabConfiguration(name="poise_py, PeakEwma", policy=poise.PeakEwma, health=True),
        LabConfiguration(name="random, default circuit", policy=poise.Random, health=True),
        LabConfiguration(name="random, never ejects", policy=poise.Random, health=True, circuit=_never_ejects),
        LabConfiguration(
            name="poise_py, max_in_flight 8",
            policy=poise.PowerOfTwoChoices,
            health=True,
            options=lambda: {"max_in_flight": 8},
        ),
        LabConfiguration(
            name="poise_py, AIMD, latency target",
            policy=poise.PowerOfTwoChoices,
            health=True,
            options=lambda: {
                "concurrency": poise.AdaptiveConcurrency(poise.AIMD(timeout=0.115, window=20, initial_limit=4))
            },
        ),
        LabConfiguration(
            name="poise_py default + hedge",
            policy=poise.PowerOfTwoChoices,
            health=True,
            transport=lambda: {"hedge": poise.Hedge.quantile(0.99)},
        ),
        LabConfiguration(
            name="poise_py default + hedge at 150 ms",
            policy=poise.PowerOfTwoChoices,
            health=True,
            transport=lambda: {"hedge": poise.Hedge(delay=0.15)},
        ),
        LabConfiguration(
            name="poise_py + load reports",
            policy=lambda: poise.WeightedByLoad(blackout_period=0.5),
            health=True,
        ),
        *_circuit_family(),
    )
}
"""The lab's configurations; each runs with its ``circuit`` (default ``poise.CircuitPolicy()``) and
the scenario's classifier. The first five run by default; the next two are overload-503's own, the next two overload's,
then stragglers' and gray-failure's, then heterogeneous-pool's (as their scenario files configure them); last,
every policy with the default circuit, with one that never ejects and reporting nothing (``--configs circuit``)."""

DEFAULT_CONFIGURATIONS = tuple(CONFIGURATIONS)[:5]

CIRCUIT_FAMILY = "circuit"
"""``--configs circuit``: every policy three ways (:func:`_circuit_family`)."""


@attrs.frozen(kw_only=True)
class LabResult(sim.Outcomes):
    """What one configuration did with the lab's traffic (the fields of the simulator's ``RunResult``).

    Latencies are seconds from a request's scheduled arrival to its outcome (a timeout
    when the client gave up); ``all_latencies_*`` are over every request, ``latencies_p99``
    over the successful ones. ``endpoint_calls`` and ``peak_queues`` follow
    ``endpoint_ids``. ``lag_p99`` is the p99 of (actual start - scheduled start),
    ``on_time`` the share of requests that started within :data:`ON_TIME` of their
    schedule, ``offered_rps`` the schedule's rate and ``achieved_rps`` the rate at which
    requests were actually started. Success rate, goodput, extra load, shares and peak
    queue are the simulator's own (:class:`poise_py.sim.Outcomes`).
    """

    configuration: str
    duration: float
    requests: int
    successes: int
    all_latencies_p50: float | None
    all_latencies_p99: float | None
    all_latencies_p999: float | None
    latencies_p99: float | None
    backend_calls: int
    attempted: int
    endpoint_ids: tuple[str, ...]
    endpoint_calls: tuple[int, ...]
    peak_queues: tuple[int, ...]
    cpu_seconds: float
    lag_p99: float | None
    on_time: float
    offered_rps: float
    achieved_rps: float
    hedges_sent: int = 0
    hedges_won: int = 0

    @property
    def generator_bound(self) -> bool:
        """Whether the load generator, not the pool, limited this run (its figures measure the machine)."""
        late = self.lag_p99 is not None and self.lag_p99 > LAG_LIMIT
        return late or self.on_time < ON_TIME_SHARE


def check_supported(scenario: sim.Scenario) -> None:
    """Raise :class:`Unsupported` naming everything in ``scenario`` the lab's backends cannot serve."""
    problems: list[str] = []
    if scenario.client.protocol is not sim.Protocol.HTTP:
        problems.append(f"client.protocol = {scenario.client.protocol.value!r} (the backends speak HTTP only)")
    if scenario.discovery is not None:
        problems.append("[discovery] (the lab's pool is static)")
    if scenario.fleet.instances > 1:
        problems.append(f"fleet.instances = {scenario.fleet.instances} (the lab runs one client)")
    where: dict[str, list[str]] = {}
    for model in scenario.endpoints:
        lacks = {f for f in ("flap", "rate_limit", "quota", "warmup", "leaves_at") if getattr(model, f) is not None}
        if model.joins_at > 0:
            lacks.add("joins_at")
        if not isinstance(model.overload, sim.Overloaded | sim.HttpStatus):
            lacks.add(f"overload = {type(model.overload).__name__} (HTTP statuses only)")
        lacks |= {
            f"phases failing with {type(p.error).__name__} (HTTP statuses only)"
            for p in model.phases
            if p.error_rate > 0 and not isinstance(p.error, sim.HttpStatus)
        }
        for lack in lacks:
            where.setdefault(lack, []).append(model.id)
    for lack, ids in sorted(where.items()):
        shown = ", ".join(ids[:4]) + (f" and {len(ids) - 4} more" if len(ids) > 4 else "")
        problems.append(f"{lack}: {shown}")
    if problems:
        raise Unsupported(scenario.name, problems)


def schedule(traffic: sim.Traffic, seed: int, duration: float) -> list[tuple[float, tuple[float, ...]]]:
    """Each request's arrival (seconds from the start) and per-attempt draws, as the simulator draws them.

    The engine's traffic stream is ``random.Random(seed)``: the first arrival is one
    exponential gap after 0; at each arrival it draws the gap to the next, then the
    request's ``2 x attempts`` uniform draws (attempt ``i`` uses ``2i`` for its service
    time and ``2i + 1`` for its error); arrivals after ``duration`` are not sent.
    """
    rng = random.Random(seed)
    requests: list[tuple[float, tuple[float, ...]]] = []
    at = rng.expovariate(traffic.rps)
    while at <= duration:
        after = at + rng.expovariate(traffic.rps)
        requests.append((at, tuple(rng.random() for _ in range(2 * traffic.attempts))))
        at = after
    return requests


class _Draws:
    """One request's draws and how many of its attempts went out (in ``request.extensions``)."""

    __slots__ = ("draws", "made")

    def __init__(self, draws: tuple[float, ...]) -> None:
        self.draws = draws
        self.made = 0


class _Tally(httpx.AsyncBaseTransport):
    """The innermost transport: one attempt, with its draws, counted, sent to its backend within the deadline.

    The deadline is the model's: the whole attempt (connecting, sending, waiting for the
    answer) gets ``deadline`` seconds, then ends as ``httpx.ReadTimeout`` (what the
    simulator's HTTP client observes of a timeout). httpx's own timeouts, which the
    client sets to the same value, bound each operation separately, so alone they let an
    attempt that waited to connect run past the deadline.

    Each backend has its own ``httpx.AsyncHTTPTransport``: a connection pool per origin,
    with no limit on connections (a queued call holds one, and the model has no queue in
    the client) and httpx's default of 20 kept alive. httpcore's pool scans its idle
    connections against all the others on every request, so a pool that kept every
    connection a burst opened, or one pool for all the backends, spent most of the
    client's CPU there, and a generator that fell behind made bigger bursts.
    """

    def __init__(self, ports: Sequence[int], deadline: float) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=20)
        tls = ssl.create_default_context()  # never used (plain HTTP), but each pool would load the CA store again
        self._pools = {
            port: (i, httpx.AsyncHTTPTransport(verify=tls, limits=limits, retries=0)) for i, port in enumerate(ports)
        }
        self._deadline = deadline
        self.calls = [0] * len(ports)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        lab: _Draws = request.extensions["poise_lab"]
        i = 2 * lab.made
        lab.made += 1
        request.headers[DRAW_HEADER] = f"{lab.draws[i]!r} {lab.draws[i + 1]!r}"
        index, pool = self._pools[request.url.port or 80]
        self.calls[index] += 1
        try:
            with anyio.fail_after(self._deadline):
                return await pool.handle_async_request(request)
        except TimeoutError:
            raise httpx.ReadTimeout(f"no answer within the {self._deadline:g} s deadline", request=request) from None

    async def aclose(self) -> None:
        for _, pool in self._pools.values():
            await pool.aclose()


class _NoHealthTransport(httpx.AsyncBaseTransport):
    """Balances without health: each permit is cancelled after its call, whatever happened.

    Retries follow the retry decision ``PoiseTransport`` and the simulator use (a
    ``RetryLoop`` from ``lb._internals``, on the balancer's retry budget), each on an
    endpoint not yet tried. With ``pick``, each attempt goes to the endpoint it names
    (the oracle), or wherever the policy says when it names none.
    """

    def __init__(
        self,
        lb: poise.LoadBalancer,
        inner: httpx.AsyncBaseTransport,
        *,
        attempts: int,
        gateway: poise.Fault,
        pick: Callable[[Collection[str]], str | None] | None = None,
    ) -> None:
        self._lb = lb
        self._inner = inner
        self._attempts = attempts
        self._gateway = gateway
        self._pick = pick
        self._others: dict[str, frozenset[str]] = {}

    def others(self, endpoint_ids: Collection[str]) -> None:
        """The pool's ids, so a pick can exclude every other endpoint."""
        self._others = {i: frozenset(endpoint_ids) - {i} for i in endpoint_ids}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        lb = self._lb
        internals = lb._internals  # the retry decision every poise_py integration shares
        loop = internals.retry_loop(self._attempts)
        loop.start(internals.now())
        original = request.url
        while True:
            exclude: Collection[str] = loop.exclude
            if self._pick is not None and (chosen := self._pick(exclude)) is not None:
                exclude = self._others[chosen]
            permit = lb.acquire(exclude=exclude)
            loop.attempt(permit.endpoint.id)
            request.url = endpoint_url(original, permit.endpoint)
            try:
                response = await self._inner.handle_async_request(request)
            except Exception as exc:
                permit.cancel()
                fault = internals.classify(exc, permit.endpoint.id).fault
                if loop.after_fault(fault, internals.now(), pool_size=internals.pool_size) is not AfterFault.RETRY:
                    raise
                continue
            except BaseException:
                permit.cancel()
                raise
            finally:
                request.url = original
            permit.cancel()
            verdict = poise.classify.http_status(response.status_code, response.headers, gateway=self._gateway)
            if verdict is None:
                return response
            fault = verdict.fault if isinstance(verdict, poise.Classification) else verdict
            if loop.after_fault(fault, internals.now(), pool_size=internals.pool_size) is not AfterFault.RETRY:
                return response
            await response.aclose()

    async def aclose(self) -> None:
        await self._inner.aclose()


def _oracle(
    models: Sequence[sim.EndpointModel], backends: Backends, seed: int
) -> Callable[[Collection[str]], str | None]:
    """The simulator's oracle on the real backends: the healthy endpoint not yet tried with least (in system + 1) / capacity."""
    rng = random.Random(seed)
    board = backends.board

    def pick(exclude: Collection[str]) -> str | None:
        now = board.elapsed()
        best: tuple[float, float] | None = None
        chosen = None
        for index, model in enumerate(models):
            if model.id in exclude or not model.healthy_at(now):
                continue
            capacity = model.capacity_at(now)
            load = 0.0 if capacity is None else (board.in_system(index) + 1) / capacity
            key = (load, rng.random())
            if best is None or key < best:
                best, chosen = key, model.id
        return chosen

    return pick


@attrs.define(eq=False)
class _Tape:
    """What the request tasks recorded."""

    latencies: list[float] = attrs.field(factory=list)
    ok_latencies: list[float] = attrs.field(factory=list)
    lags: list[float] = attrs.field(factory=list)
    last_start: float = 0.0
    unattempted: int = 0
    """Requests that found no endpoint at all (shed with ``Overloaded``, say): no attempt made."""


async def _one(client: httpx.AsyncClient, when: float, draws: tuple[float, ...], tape: _Tape) -> None:
    started = time.monotonic()
    tape.lags.append(started - when)
    tape.last_start = max(tape.last_start, started)
    ok = False
    try:
        response = await client.get("/", extensions={"poise_lab": _Draws(draws)})
        ok = response.is_success
    except httpx.HTTPError:
        pass  # a timeout, a reset: the request failed, now
    except poise.SelectionError:
        tape.unattempted += 1  # nothing eligible for its first attempt (a retry ends on the last answer)
    latency = time.monotonic() - when
    tape.latencies.append(latency)
    if ok:
        tape.ok_latencies.append(latency)


def _balancer(
    configuration: LabConfiguration, endpoints: Sequence[poise.Endpoint], classifier: poise.Classifier, seed: int
) -> poise.LoadBalancer:
    return poise.LoadBalancer(
        poise.StaticDiscovery(endpoints),
        policy=configuration.policy(),
        circuit=configuration.circuit(),
        classifier=classifier,
        seed=seed,
        **configuration.options(),
    )


async def _run_configuration(
    scenario: sim.Scenario, configuration: LabConfiguration, duration: float, seed: int, running: Backends
) -> LabResult:
    traffic = scenario.traffic
    models = scenario.endpoints
    plan = schedule(traffic, seed, duration)
    classifier = scenario.client.build()
    gateway = scenario.client.gateway
    endpoints = [
        poise.Endpoint(m.id, address=("127.0.0.1", port), tier=m.tier, zone=m.zone, weight=m.weight)
        for m, port in zip(models, running.ports, strict=True)
    ]
    tally = _Tally(running.ports, traffic.timeout)
    lb = _balancer(configuration, endpoints, classifier, seed)
    transport: httpx.AsyncBaseTransport
    if configuration.health:
        transport = PoiseTransport(
            lb,
            transport=tally,
            classifier=classifier,
            gateway=gateway,
            attempts=traffic.attempts,
            host=_HOST,
            **configuration.transport(),
        )
    else:
        pick = _oracle(models, running, seed) if configuration.oracle else None
        no_health = _NoHealthTransport(lb, tally, attempts=traffic.attempts, gateway=gateway, pick=pick)
        no_health.others([m.id for m in models])
        transport = no_health
    tape = _Tape()
    client = httpx.AsyncClient(transport=transport, base_url=f"http://{_HOST}", timeout=traffic.timeout)
    async with lb, client:
        gc.collect()
        gc.freeze()  # a full collection would rescan the import-time heap: tens of ms with the generator stalled
        try:
            cpu = time.process_time()
            start = time.monotonic() + _LEAD
            running.board.publish_start(start)
            stuck_after = duration + traffic.attempts * traffic.timeout + _DRAIN_SLACK
            behind = 0.0
            with anyio.fail_after(_LEAD + stuck_after):
                async with anyio.create_task_group() as tg:
                    for at, draws in plan:
                        when = start + at
                        if (wait := when - time.monotonic()) > 0:
                            await anyio.sleep(wait)
                        elif -wait > OVERRUN:
                            behind = -wait
                            tg.cancel_scope.cancel()
                            break
                        tg.start_soon(_one, client, when, draws, tape)
            if behind:
                raise Overrun(configuration.name, behind)
            cpu = time.process_time() - cpu
        finally:
            gc.unfreeze()
    peaks = tuple(running.board.peak_queue(i) for i in range(len(models)))
    pool = lb.statistics().pool
    every = sorted(tape.latencies)
    ok = sorted(tape.ok_latencies)
    lags = sorted(tape.lags)
    span = max(duration, tape.last_start - start)
    return LabResult(
        configuration=configuration.name,
        duration=duration,
        requests=len(plan),
        successes=len(ok),
        all_latencies_p50=sim.percentile(every, 0.50),
        all_latencies_p99=sim.percentile(every, 0.99),
        all_latencies_p999=sim.percentile(every, 0.999),
        latencies_p99=sim.percentile(ok, 0.99),
        backend_calls=sum(tally.calls),
        attempted=len(plan) - tape.unattempted,
        endpoint_ids=tuple(m.id for m in models),
        endpoint_calls=tuple(tally.calls),
        peak_queues=peaks,
        cpu_seconds=cpu,
        lag_p99=sim.percentile(lags, 0.99),
        on_time=sum(1 for lag in lags if lag <= ON_TIME) / len(lags) if lags else 1.0,
        offered_rps=len(plan) / duration,
        achieved_rps=len(plan) / span,
        hedges_sent=pool.hedges_sent,
        hedges_won=pool.hedges_won,
    )


def parse_names(text: str) -> list[str]:
    """``--configs``: comma-separated configuration names (a name may hold a comma: "round robin, default circuit").

    Raises:
        ValueError: a name the lab does not know.
    """
    parts = [part.strip() for part in text.split(",")]
    names: list[str] = []
    i = 0
    while i < len(parts):
        if not parts[i]:
            i += 1
            continue
        if parts[i] == CIRCUIT_FAMILY:
            names += [c.name for c in _circuit_family()]
            i += 1
            continue
        for j in range(len(parts), i, -1):  # the longest known name starting here
            if (candidate := ", ".join(parts[i:j])) in CONFIGURATIONS:
                names.append(candidate)
                i = j
                break
        else:
            raise ValueError(f"unknown configuration {parts[i]!r}; one of {list(CONFIGURATIONS)}")
    return names


def configurations_named(names: Sequence[str] | None) -> list[LabConfiguration]:
    """The lab's configurations by name (the first five for None); ValueError names an unknown one."""
    if names is None:
        return [CONFIGURATIONS[n] for n in DEFAULT_CONFIGURATIONS]
    unknown = [n for n in names if n not in CONFIGURATIONS]
    if unknown:
        raise ValueError(f"unknown configuration {unknown[0]!r}; one of {list(CONFIGURATIONS)}")
    return [CONFIGURATIONS[n] for n in names]


def run_lab(
    scenario: sim.Scenario, *, duration: float, configurations: Sequence[str] | None = None, seed: int | None = None
) -> list[LabResult]:
    """Run each configuration (by name; None: all) for ``duration`` seconds of real traffic, one after another.

    ``seed`` (default the scenario's) seeds the traffic, as the simulator's. Each
    configuration gets a fresh backend process. The balancer's own log lines are muted
    while it runs, as the simulator mutes them (incidents in the lab are not the operator's).

    Raises:
        Unsupported: the scenario has something the lab cannot model.
        ValueError: an unknown configuration name, or a duration that is not > 0.
        Overrun: the machine could not keep to the traffic's schedule.
    """
    check_supported(scenario)
    chosen = configurations_named(configurations)
    if not 0 < duration < math.inf:
        raise ValueError(f"duration must be a finite number of seconds > 0, got {duration}")
    seed = scenario.seed if seed is None else seed
    log = logging.getLogger("poise_py")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        return anyio.run(_run_all, scenario, chosen, duration, seed)
    finally:
        log.setLevel(level)


async def _run_all(
    scenario: sim.Scenario, chosen: Sequence[LabConfiguration], duration: float, seed: int
) -> list[LabResult]:
    """Every configuration in turn, each on its own backend process.

    The processes are all started first, together, and the traffic waits until every one
    listens: a process waiting for its turn only sleeps, where one starting up would take
    CPU from the configuration being measured.
    """
    processes: list[Backends] = []
    try:
        for _ in chosen:
            processes.append(await Backends.spawn(scenario.endpoints))  # noqa: PERF401 - `finally` stops those spawned before a failure
        for process in processes:  # every process listens (its start-up CPU spent) before any traffic
            await process.ready()
        results = []
        for configuration, process in zip(chosen, processes, strict=True):
            results.append(await _run_configuration(scenario, configuration, duration, seed, process))
            await process.stop()  # before the next configuration: its abandoned work ends with it
        return results
    finally:
        for process in processes:
            await process.stop()


def simulate(
    scenario: sim.Scenario, *, duration: float, configurations: Sequence[str] | None = None, seed: int | None = None
) -> list[sim.RunResult]:
    """The simulator's results for the same configurations, traffic and duration as :func:`run_lab`'s.

    A configuration the simulator does not run by default (round robin with the default
    circuit) is simulated as ``RoundRobin()`` with ``CircuitPolicy()``, reporting health.
    """
    chosen = configurations_named(configurations)
    seed = scenario.seed if seed is None else seed
    shortened = attrs.evolve(scenario, traffic=attrs.evolve(scenario.traffic, duration=duration))
    known = {c.name: c for c in scenario.all_configurations()}
    results = []
    for lab in chosen:
        configuration = known.get(lab.name) or sim.Configuration(
            name=lab.name, policy=lab.policy(), circuit=lab.circuit()
        )
        results.append(sim.run_configuration(shortened, configuration, seed=seed))
    return results


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.0f} ms"


def _row(result: LabResult | sim.RunResult) -> list[str]:
    cpu = f"{result.cpu_seconds:.2f}" if isinstance(result, LabResult) else "-"
    return [
        result.configuration,
        f"{result.success_rate:.2%}",
        f"{result.goodput:,.1f}",
        _ms(result.all_latencies_p50),
        _ms(result.all_latencies_p99),
        _ms(result.all_latencies_p999),
        _ms(result.latencies_p99),
        f"{result.extra_load:+.3f}",
        f"{result.hedges_sent:,}",
        f"{result.peak_queue:,}",
        cpu,
    ]


COLUMNS = (
    "configuration",
    "success",
    "goodput/s",
    "p50",
    "p99",
    "p99.9",
    "ok p99",
    "extra load",
    "hedges",
    "peak queue",
    "CPU s",
)
LEGEND = (
    "success: requests with a 2xx after retries; goodput: successes per second; p50, p99, p99.9: latency of every "
    "request from its scheduled arrival to its outcome (a timeout when the client gave up); ok p99: of successes; "
    "extra load: retries and hedges per request; hedges: hedges sent; peak queue: the longest any backend's queue grew; CPU s: the client "
    "process's CPU seconds."
)


def _table(title: str, results: Sequence[LabResult | sim.RunResult]) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAVY)
    for i, column in enumerate(COLUMNS):
        table.add_column(column, justify="left" if i == 0 else "right")
    for result in results:
        table.add_row(*_row(result))
    return table


def warnings(results: Sequence[LabResult]) -> list[str]:
    """One line per configuration whose load generator, not the pool, was the bottleneck."""
    return [
        f"warning: {r.configuration}: the load generator was the bottleneck (start lag p99 {_ms(r.lag_p99)}, "
        f"{r.on_time:.1%} on time within {ON_TIME * 1000:.0f} ms, {r.achieved_rps:.1f} of {r.offered_rps:.1f} "
        "requests/s): these figures measure this machine, not the pool"
        for r in results
        if r.generator_bound
    ]


def _json_result(result: LabResult | sim.RunResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "configuration": result.configuration,
        "requests": result.requests,
        "successes": result.successes,
        "success_rate": round(result.success_rate, 6),
        "goodput": round(result.goodput, 3),
        "latency_p50": result.all_latencies_p50,
        "latency_p99": result.all_latencies_p99,
        "latency_p999": result.all_latencies_p999,
        "ok_latency_p99": result.latencies_p99,
        "attempts": result.backend_calls,
        "extra_load": round(result.extra_load, 6),
        "hedges_sent": result.hedges_sent,
        "hedges_won": result.hedges_won,
        "shares": {e: round(s, 6) for e, s in zip(result.endpoint_ids, result.shares, strict=True)},
        "peak_queues": dict(zip(result.endpoint_ids, result.peak_queues, strict=True)),
        "peak_queue": result.peak_queue,
    }
    if isinstance(result, LabResult):
        out |= {
            "cpu_seconds": round(result.cpu_seconds, 3),
            "lag_p99": result.lag_p99,
            "on_time": round(result.on_time, 6),
            "offered_rps": round(result.offered_rps, 3),
            "achieved_rps": round(result.achieved_rps, 3),
            "generator_bound": result.generator_bound,
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO, help="a built-in scenario or a TOML file")
    parser.add_argument("--duration", type=float, default=DEFAULT_DURATION, help="seconds of traffic per configuration")
    parser.add_argument(
        "--configs", help=f"comma-separated configuration names (default all: {', '.join(CONFIGURATIONS)})"
    )
    parser.add_argument("--seed", type=int, help="the traffic's seed (default the scenario's)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--compare", action="store_true", help="also run the simulator on the same traffic")
    args = parser.parse_args(argv)
    if not 0 < args.duration < math.inf:
        print(f"loadlab: --duration must be a finite number of seconds > 0, got {args.duration}", file=sys.stderr)
        return 2
    try:
        names = parse_names(args.configs) if args.configs else None
        scenario = sim.load_scenario(args.scenario)
        check_supported(scenario)
    except (poise.ConfigError, Unsupported, ValueError) as exc:
        print(f"loadlab: {exc}", file=sys.stderr)
        return 2
    seed = scenario.seed if args.seed is None else args.seed
    try:
        results = run_lab(scenario, duration=args.duration, configurations=names, seed=seed)
    except Overrun as exc:
        print(f"loadlab: {exc}", file=sys.stderr)
        return 1
    simulated = simulate(scenario, duration=args.duration, configurations=names, seed=seed) if args.compare else []
    if args.json:
        document: dict[str, Any] = {
            "scenario": scenario.name,
            "seed": seed,
            "duration": args.duration,
            "rps": scenario.traffic.rps,
            "timeout": scenario.traffic.timeout,
            "attempts": scenario.traffic.attempts,
            "results": [_json_result(r) for r in results],
            "warnings": warnings(results),
        }
        if args.compare:
            document["simulator"] = [_json_result(r) for r in simulated]
        print(json.dumps(document, indent=2))
        return 0
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 130)
    traffic = scenario.traffic
    about = f"seed {seed}, {args.duration:g} s at {traffic.rps:g} requests/s, timeout {traffic.timeout:g} s"
    console.print(_table(f"{scenario.name}: the load lab ({about})", results))
    console.print(LEGEND, style="dim")
    for line in warnings(results):
        console.print(line, style="bold yellow")
    if args.compare:
        console.print(_table(f"{scenario.name}: the simulator, same traffic ({about})", simulated))
    return 0


if __name__ == "__main__":
    sys.exit(main())
