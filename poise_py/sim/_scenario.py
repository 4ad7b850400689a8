"""Scenarios: endpoint models, traffic and configurations, read from TOML.

A scenario file::

    name = "my-pool"
    description = "what it shows"
    seed = 1

    [traffic]
    rps = 100
    duration = 600          # virtual seconds
    timeout = 1.0
    attempts = 3

    [[endpoints]]
    id = "w"                # with count = 4: w1..w4
    count = 4
    latency = { median = 0.02, p99 = 0.08 }

    [[endpoints]]
    id = "broken"
    phases = [
        { start = 0, error_rate = 0.0 },
        { start = 120, error_rate = 1.0, fault = "suspect" },
        { start = 400, error_rate = 0.0 },       # recovers
    ]
    # also: flap = { period = 60, down = 20 }, rate_limit = { rps = 50, retry_after = 30 }

    [[configurations]]      # optional: compared with the built-in baselines
    name = "aggressive"
    policy = "round_robin"
    circuit = { consecutive_failures = 2, escalation = { base = 5 } }

Every configuration runs on the same seeded traffic. The baselines (naive round-robin,
first-strike permanent eviction, a consecutive-failures breaker with a constant open
window) and poise_py's default configuration are always included.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

import poise_py as poise

from .._core._policies import Policy
from .._errors import ConfigError
from .._faults import Fault
from ._engine import Configuration, DiscoverySpec, Fleet, Reporting, Traffic
from ._models import EndpointModel, Flap, Latency, Phase, RateLimit


def _policies() -> dict[str, Callable[[], Policy]]:
    names = {
        "round_robin": "RoundRobin",
        "p2c": "PowerOfTwoChoices",
        "power_of_two_choices": "PowerOfTwoChoices",
        "random": "Random",
        "weighted_round_robin": "WeightedRoundRobin",
        "weighted_random": "WeightedRandom",
        "peak_ewma": "PeakEwma",
    }
    found: dict[str, Callable[[], Policy]] = {}
    for key, attr in names.items():
        factory = getattr(poise, attr, None)
        if factory is not None:
            found[key] = factory
    return found


@attrs.frozen(kw_only=True)
class Scenario:
    """A whole simulated situation.

    Without ``discovery`` the pool is a static list of every endpoint; with it, a
    publisher announces each endpoint's joining and leaving ``discovery.delay`` seconds
    late, until it dies at ``discovery.publisher_dies_at``.
    """

    name: str
    description: str = ""
    seed: int = 1
    traffic: Traffic = attrs.field(factory=Traffic)
    endpoints: tuple[EndpointModel, ...]
    configurations: tuple[Configuration, ...] = ()
    discovery: DiscoverySpec | None = None
    fleet: Fleet = attrs.field(factory=Fleet)

    def all_configurations(self) -> tuple[Configuration, ...]:
        """poise_py's default, the baselines, then the scenario's own."""
        return (*default_configurations(), *self.configurations)


def default_configurations() -> tuple[Configuration, ...]:
    """poise_py's default configuration and the three baselines."""
    return (
        Configuration(name="poise_py default", policy=poise.PowerOfTwoChoices(), circuit=poise.CircuitPolicy()),
        Configuration(
            name="naive round-robin",
            policy=poise.RoundRobin(),
            circuit=poise.CircuitPolicy(),
            reporting=Reporting.NONE,
        ),
        Configuration(
            name="first-strike eviction",
            policy=poise.RoundRobin(),
            circuit=poise.CircuitPolicy(),
            reporting=Reporting.EVICT,
        ),
        Configuration(
            name="constant-window breaker",
            policy=poise.RoundRobin(),
            circuit=poise.CircuitPolicy(
                consecutive_failures=5,
                minimum_volume=1,
                max_ejection_percent=1.0,
                escalation=poise.Escalation(base=30.0, maximum=30.0, jitter=0.0),
            ),
        ),
    )


def _fault(value: object, where: str) -> Fault:
    try:
        return Fault(str(value).lower())
    except ValueError:
        raise ConfigError(where, f"unknown fault {value!r}; one of {[f.value for f in Fault]}") from None


def _table(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(where, f"must be a table, got {value!r}")
    return dict(value)


def _build(cls: Callable[..., Any], value: object, where: str) -> Any:
    table = _table(value, where)
    try:
        return cls(**table)
    except TypeError as exc:
        raise ConfigError(where, str(exc)) from None


def _phase(value: object, where: str) -> Phase:
    table = _table(value, where)
    if "fault" in table:
        table["fault"] = _fault(table["fault"], f"{where}.fault")
    return _build(Phase, table, where)  # type: ignore[no-any-return]


def _endpoints(raw: object) -> tuple[EndpointModel, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError("endpoints", "must be a non-empty array of tables")
    specs: list[EndpointModel] = []
    for n, item in enumerate(raw):
        where = f"endpoints[{n}]"
        table = _table(item, where)
        count = table.pop("count", None)
        base_id = table.pop("id", None)
        if not isinstance(base_id, str) or not base_id:
            raise ConfigError(f"{where}.id", "is required (a non-empty string)")
        if "latency" in table:
            table["latency"] = _build(Latency, table["latency"], f"{where}.latency")
        if "phases" in table:
            table["phases"] = tuple(_phase(p, f"{where}.phases[{i}]") for i, p in enumerate(table["phases"]))
        if "flap" in table:
            flap = _table(table["flap"], f"{where}.flap")
            if "fault" in flap:
                flap["fault"] = _fault(flap["fault"], f"{where}.flap.fault")
            table["flap"] = _build(Flap, flap, f"{where}.flap")
        if "rate_limit" in table:
            table["rate_limit"] = _build(RateLimit, table["rate_limit"], f"{where}.rate_limit")
        ids = [base_id] if count is None else [f"{base_id}{i}" for i in range(1, int(count) + 1)]
        specs.extend(_build(EndpointModel, {**table, "id": i}, where) for i in ids)
    seen: set[str] = set()
    for spec in specs:
        if spec.id in seen:
            raise ConfigError("endpoints", f"id {spec.id!r} appears twice")
        seen.add(spec.id)
    return tuple(specs)


def _circuit(value: object, where: str) -> poise.CircuitPolicy:
    table = _table(value, where)
    if "escalation" in table:
        esc = _table(table["escalation"], f"{where}.escalation")
        if "backoff" in esc:
            esc["backoff"] = poise.Backoff(str(esc["backoff"]).lower())
        table["escalation"] = _build(poise.Escalation, esc, f"{where}.escalation")
    if "window" in table:
        window = _table(table["window"], f"{where}.window")
        kind = window.pop("kind", "count")
        table["window"] = _build(poise.TimeWindow if kind == "time" else poise.CountWindow, window, f"{where}.window")
    if "hard_cap" in table:
        table["hard_cap"] = _build(poise.HardCap, table["hard_cap"], f"{where}.hard_cap")
    return _build(poise.CircuitPolicy, table, where)  # type: ignore[no-any-return]


def _configurations(raw: object) -> tuple[Configuration, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("configurations", "must be an array of tables")
    policies = _policies()
    out: list[Configuration] = []
    for n, item in enumerate(raw):
        where = f"configurations[{n}]"
        table = _table(item, where)
        name = table.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}.name", "is required")
        policy_name = str(table.get("policy", "p2c"))
        if policy_name not in policies:
            raise ConfigError(f"{where}.policy", f"unknown policy {policy_name!r}; one of {sorted(policies)}")
        circuit = _circuit(table.get("circuit", {}), f"{where}.circuit")
        budget = _build(poise.RetryBudget, table.get("retry_budget", {}), f"{where}.retry_budget")
        options: dict[str, object] = {}
        if "on_discovery_end" in table:
            try:
                options["on_discovery_end"] = poise.DiscoveryEnd(str(table["on_discovery_end"]).lower())
            except ValueError:
                raise ConfigError(f"{where}.on_discovery_end", "must be last_known_good or fail_closed") from None
        coordination = table.get("coordination", False)
        if not isinstance(coordination, bool):
            raise ConfigError(f"{where}.coordination", f"must be true or false, got {coordination!r}")
        out.append(
            Configuration(
                name=name,
                policy=policies[policy_name](),
                circuit=circuit,
                retry_budget=budget,
                balancer_options=options,
                coordination=coordination,
            )
        )
    return tuple(out)


def parse_scenario(data: Mapping[str, Any]) -> Scenario:
    """Build a scenario from parsed TOML; raise ConfigError naming the bad key."""
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("name", "a scenario needs a name")
    traffic = _build(Traffic, data.get("traffic", {}), "traffic")
    seed = data.get("seed", 1)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError("seed", f"must be an int, got {seed!r}")
    return Scenario(
        name=name,
        description=str(data.get("description", "")),
        seed=seed,
        traffic=traffic,
        endpoints=_endpoints(data.get("endpoints")),
        configurations=_configurations(data.get("configurations")),
        discovery=None if "discovery" not in data else _build(DiscoverySpec, data["discovery"], "discovery"),
        fleet=_build(Fleet, data.get("fleet", {}), "fleet"),
    )


def load_scenario(source: str | Path) -> Scenario:
    """A built-in scenario by name, or a TOML file by path."""
    path = Path(source)
    if path.suffix == ".toml" or path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError("scenario", f"cannot read {path}: {exc}") from exc
    else:
        try:
            text = resources.files("poise_py.sim.scenarios").joinpath(f"{source}.toml").read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError("scenario", f"no built-in scenario {source!r}; one of {builtin_names()}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("scenario", f"{source}: invalid TOML: {exc}") from exc
    return parse_scenario(data)


def builtin_names() -> list[str]:
    """The names of the built-in scenarios."""
    files = resources.files("poise_py.sim.scenarios").iterdir()
    return sorted(f.name.removesuffix(".toml") for f in files if f.name.endswith(".toml"))
