"""The balancer's constructor arguments, checked and defaulted (async shell, construction only).

:func:`checked_settings` is everything ``LoadBalancer(...)`` checks before it builds a part:
each bad argument raises a :class:`~poise_py.ConfigError` naming it (with what to write
instead where a common mistake is recognised), in the order of the signature, and nothing
is built. What it returns, :class:`Settings`, is what the balancer assembles its parts from.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable

import attrs

from ._coordination._config import Coordination
from ._core._budget import RetryBudget
from ._core._circuit_policy import CircuitPolicy
from ._core._concurrency import AdaptiveConcurrency, LoadPolicy, SlowStart
from ._core._health_schedule import HealthCheck
from ._core._routing import Panic, Routing
from ._core._selection import Policy, PowerOfTwoChoices
from ._default_classifier import Classifier, classifier_problem
from ._discovery import DiscoveryEnd, Snapshot, Update
from ._endpoint import MAX_IN_FLIGHT_LIMIT, Endpoint
from ._errors import ConfigError
from ._knobs import RESOLUTION, check_count, check_duration
from ._logs import LogLimit
from ._membership import EndpointClose, EndpointFactory, Readiness


@attrs.frozen
class Settings:
    """A balancer's constructor arguments, checked, with their defaults filled in (see ``LoadBalancer``)."""

    discovery: AsyncIterable[Update]
    policy: Policy
    circuit: CircuitPolicy
    classifier: Classifier
    on_discovery_end: DiscoveryEnd
    clock: Callable[[], float] | None
    seed: int | None
    retry_budget: RetryBudget
    no_eligible_alert_after: float | None
    log_limit: LogLimit
    health_check: HealthCheck | None
    endpoint_factory: EndpointFactory | None
    endpoint_close: EndpointClose | None
    readiness: Readiness | None
    coordination: Coordination | None
    routing: Routing | None
    panic: Panic | None
    load: LoadPolicy
    """The load knobs together: ``max_in_flight``, ``concurrency`` and ``slow_start``."""


def checked_settings(
    discovery: AsyncIterable[Update],
    *,
    policy: Policy | None,
    circuit: CircuitPolicy | None,
    classifier: Classifier,
    on_discovery_end: DiscoveryEnd,
    clock: Callable[[], float] | None,
    seed: int | None,
    retry_budget: RetryBudget | None,
    no_eligible_alert_after: float | None,
    log_limit: LogLimit | None,
    health_check: HealthCheck | None,
    endpoint_factory: EndpointFactory | None,
    endpoint_close: EndpointClose | None,
    readiness: Readiness | None,
    coordination: Coordination | None,
    routing: Routing | None,
    panic: Panic | None,
    max_in_flight: int | None,
    concurrency: AdaptiveConcurrency | None,
    slow_start: SlowStart | None,
) -> Settings:
    """``LoadBalancer``'s arguments checked in the order of its signature, defaults filled in.

    Raises:
        ConfigError: the first argument refused, named.
    """
    if isinstance(discovery, type):  # the class has __aiter__ too: name the mistake
        raise ConfigError(
            "discovery",
            f"must be a discovery source, got the class {discovery.__name__}: write {discovery.__name__}(...)",
        )
    if not hasattr(discovery, "__aiter__"):
        raise ConfigError("discovery", _discovery_problem(discovery))
    policy = PowerOfTwoChoices() if policy is None else policy
    if isinstance(policy, type):
        raise ConfigError(
            "policy", f"must be a policy instance, got the class {policy.__name__}: write {policy.__name__}()"
        )
    if not callable(getattr(policy, "bind", None)):
        raise ConfigError("policy", _policy_problem(policy))
    circuit = CircuitPolicy() if circuit is None else circuit
    if not isinstance(circuit, CircuitPolicy):
        raise ConfigError("circuit", f"must be a CircuitPolicy, got {circuit!r}")
    if not callable(classifier):
        raise ConfigError("classifier", classifier_problem(classifier))
    if not isinstance(on_discovery_end, DiscoveryEnd):
        raise ConfigError("on_discovery_end", f"must be a DiscoveryEnd, got {on_discovery_end!r}")
    if clock is not None and not callable(clock):
        raise ConfigError("clock", f"must be callable, got {clock!r}")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ConfigError("seed", f"must be an int or None, got {seed!r:.80}")
    retry_budget = RetryBudget() if retry_budget is None else retry_budget
    if not isinstance(retry_budget, RetryBudget):
        raise ConfigError("retry_budget", f"must be a RetryBudget, got {retry_budget!r}")
    if no_eligible_alert_after is not None:
        no_eligible_alert_after = check_duration("no_eligible_alert_after", no_eligible_alert_after, minimum=RESOLUTION)
    log_limit = LogLimit() if log_limit is None else log_limit
    if not isinstance(log_limit, LogLimit):
        raise ConfigError("log_limit", f"must be a LogLimit, got {log_limit!r}")
    if health_check is not None:
        _check_health(health_check, circuit)
    if endpoint_factory is not None and not callable(endpoint_factory):
        raise ConfigError("endpoint_factory", f"must be callable, got {endpoint_factory!r}")
    if endpoint_close is not None and not callable(endpoint_close):
        raise ConfigError("endpoint_close", f"must be callable, got {endpoint_close!r}")
    if readiness is not None and not isinstance(readiness, Readiness):
        raise ConfigError("readiness", f"must be a Readiness, got {readiness!r}")
    if coordination is not None:
        if not isinstance(coordination, Coordination):
            raise ConfigError("coordination", f"must be a Coordination or None, got {coordination!r}")
        coordination.check(circuit)
    if routing is not None and not isinstance(routing, Routing):
        raise ConfigError("routing", f"must be a Routing, got {routing!r}")
    if panic is not None and not isinstance(panic, Panic):
        raise ConfigError("panic", f"must be a Panic or None, got {panic!r}")
    if max_in_flight is not None:
        check_count("max_in_flight", max_in_flight, maximum=MAX_IN_FLIGHT_LIMIT)
    if concurrency is not None and not isinstance(concurrency, AdaptiveConcurrency):
        raise ConfigError("concurrency", f"must be a poise.AdaptiveConcurrency(...) or None, got {concurrency!r:.80}")
    if slow_start is not None and not isinstance(slow_start, SlowStart):
        raise ConfigError("slow_start", f"must be a poise.SlowStart(...) or None, got {slow_start!r:.80}")
    return Settings(
        discovery=discovery,
        policy=policy,
        circuit=circuit,
        classifier=classifier,
        on_discovery_end=on_discovery_end,
        clock=clock,
        seed=seed,
        retry_budget=retry_budget,
        no_eligible_alert_after=no_eligible_alert_after,
        log_limit=log_limit,
        health_check=health_check,
        endpoint_factory=endpoint_factory,
        endpoint_close=endpoint_close,
        readiness=readiness,
        coordination=coordination,
        routing=routing,
        panic=panic,
        load=LoadPolicy(max_in_flight=max_in_flight, adaptive=concurrency, slow_start=slow_start),
    )


def _discovery_problem(discovery: object) -> str:
    """Why ``discovery`` is refused, ending with what to write instead."""
    got = f"{discovery!r:.80}"
    if isinstance(discovery, Endpoint) or (
        isinstance(discovery, list | tuple) and discovery and all(isinstance(e, Endpoint) for e in discovery)
    ):
        return f"must be a discovery source, got endpoints {got}: wrap them, discovery=poise.StaticDiscovery([...])"
    if isinstance(discovery, Snapshot):
        return "must be a discovery source, got one Snapshot: write discovery=poise.StaticDiscovery(snapshot.endpoints)"
    return (
        f"must be an async iterable of Snapshot/Delta updates, got {got}: use poise.StaticDiscovery([...]), "
        "a DiscoveryPublisher().subscribe(), DnsDiscovery(...) or FileDiscovery(...)"
    )


_POLICIES = {
    "PowerOfTwoChoices": ("p2c", "power_of_two", "power_of_two_choices", "least_request", "leastrequest"),
    "RoundRobin": ("rr", "round_robin", "roundrobin"),
    "Random": ("random",),
    "WeightedRoundRobin": ("wrr", "weighted_round_robin", "weightedroundrobin"),
    "WeightedRandom": ("weighted_random", "weightedrandom"),
    "PeakEwma": ("ewma", "peak_ewma", "peakewma"),
    "ConsistentHash": ("hash", "consistent_hash", "consistenthash", "ring_hash", "ringhash", "maglev"),
}
"""The policies a string such as ``"p2c"`` or ``"round-robin"`` most likely meant."""


def _policy_problem(policy: object) -> str:
    """Why ``policy`` is refused, ending with the policy instance to write."""
    got = f"{policy!r:.80}"
    if isinstance(policy, str):
        name = policy.strip().lower().replace("-", "_").replace(" ", "_")
        for cls, aliases in _POLICIES.items():
            if name in aliases or name == cls.lower():
                return f"must be a selection policy instance, not the string {got}: write policy=poise.{cls}()"
    choices = ", ".join(f"poise.{cls}()" for cls in _POLICIES)
    return f"must be a selection policy instance, got {got}: write one of {choices}"


def _check_health(check: object, circuit: CircuitPolicy) -> None:
    """Refuse a health check that could hold a recovered endpoint out longer than the breaker.

    Seed 001's gateway had a health filter with a 5-minute recovery window in front of a
    60-second breaker: the filter, not the breaker, decided when an endpoint came back.
    Here the active side's worst-case readmission time must fit in the breaker's shortest
    open window (see docs/health.md).
    """
    if not isinstance(check, HealthCheck):
        raise ConfigError("health_check", f"must be a HealthCheck or None, got {check!r}")
    escalation = circuit.escalation
    shortest = escalation.window(0) * (1.0 - escalation.jitter)
    if check.readmit_bound > shortest:
        raise ConfigError(
            "health_check",
            f"a recovered endpoint could stay excluded {check.readmit_bound:.3g} s "
            f"(timeout + healthy_threshold x (unhealthy_interval x (1 + jitter) + timeout)), "
            f"longer than the breaker's shortest open window ({shortest:.3g} s); lower "
            "unhealthy_interval, healthy_threshold or timeout, or raise CircuitPolicy.escalation.base",
        )
