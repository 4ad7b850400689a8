"""Scenarios: endpoint models, traffic and configurations, read from TOML.

A scenario file::

    name = "my-pool"
    description = "What it shows, in whole sentences."
    seed = 1

    [client]
    protocol = "grpc"       # "grpc", "http" or "plain": what a timeout or refusal raises
    marker = ["wool-fault", "worker-internal"]   # for classify.grpc(marker=...)

    [traffic]
    rps = 100
    duration = 600          # virtual seconds
    timeout = 1.0           # the client's per-attempt deadline
    attempts = 3

    [[endpoints]]
    id = "w"                # with count = 4: w1..w4
    count = 4
    latency = { median = 0.02, p99 = 0.08, straggler_rate = 0.01, straggler_scale = 100 }
    # straggler_rate: the slowest 1% of calls take 100 medians instead (default 0: none)

    [[endpoints]]
    id = "broken"
    phases = [
        { start = 0, error_rate = 0.005, grpc = "INTERNAL" },
        { start = 120, grpc = "INTERNAL", trailing = { "wool-fault" = "worker-internal" } },
        { start = 300, refused = true },          # the process died
        { start = 400, timeout = true },          # a black hole
        { start = 500, error_rate = 0.0 },        # recovers
    ]
    # HTTP: { http = 429, retry_after = 60 }; the client's own FaultError: { fault = "suspect" }
    # also: flap = { period = 60, down = 20, http = 503 }, rate_limit = { rps = 50, retry_after = 30 }

    [[endpoints]]           # load: serves 4 calls at once, queues 20 more, sheds the rest
    id = "small"
    capacity = 4
    max_queue = 20
    overload = { http = 429, retry_after = 1 }   # default: the protocol's overload status
    warmup = { duration = 30, capacity = 0.25 }  # starts cold when it joins or comes back
    quota = { requests = 600, per = 60 }          # a provider's requests per minute
    phases = [{ start = 0 }, { start = 60, latency_scale = 10, capacity = 2 }]

    [[configurations]]      # optional: compared with the built-in baselines
    name = "aggressive"
    policy = "round_robin"
    classifier = "default"  # optional: "grpc", "http" or "default" (else the client's)
    circuit = { consecutive_failures = 2, escalation = { base = 5 } }
    max_in_flight = 8                        # optional load knobs: a cap per endpoint,
    slow_start = { window = 30 }             # Envoy's slow start,
    concurrency = { algorithm = "aimd" }     # adaptive limits ("gradient2" or "aimd", with their knobs)
    hedge = { quantile = 0.99 }              # hedged requests: poise.Hedge.quantile(0.99), or
                                             # { delay = 0.05 }; also max_attempts, max_extra_load,
                                             # and with quantile: min_samples, initial

Every configuration runs on the same seeded traffic. The baselines (naive round-robin,
first-strike permanent eviction, a consecutive-failures breaker with a constant open
window) and poise_py's default configuration are always included; when an endpoint has a
capacity, so are uniform random and the shortest-queue oracle. Every field is checked
before anything runs; unknown keys are refused.
"""

from __future__ import annotations

import math
import re
import reprlib
import tomllib
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

import poise_py as poise

from .. import ConfigError, Fault, Policy
from .._internal import RESOLUTION, is_number
from ._engine import Configuration, DiscoverySpec, Fleet, Reporting, Traffic
from ._models import MAX_CAPACITY, EndpointModel, Flap, Latency, Phase, Quota, RateLimit, Warmup
from ._observe import (
    ClassifierName,
    Client,
    GrpcStatus,
    HttpStatus,
    Observation,
    Protocol,
    Refused,
    Stated,
    Timeout,
    grpc_code,
)

MAX_COUNT = 1000
"""The most endpoints one ``[[endpoints]]`` table may stand for (``count``)."""
MAX_ENDPOINTS = 10_000
ALIASES = {
    "seed-000-grpc-pool": "grpc-worker-pool",
    "seed-001-llm-tiers": "llm-gateway",
    "seed-002-fleet": "fleet-shared-breaker",
}
"""Former names of built-in scenarios, still accepted."""

_repr = reprlib.Repr()
_repr.maxlevel = 2
_repr.maxstring = _repr.maxother = 40
_show = _repr.repr


def _policies() -> dict[str, Callable[[], Policy]]:
    names = {
        "round_robin": "RoundRobin",
        "p2c": "PowerOfTwoChoices",
        "power_of_two_choices": "PowerOfTwoChoices",
        "random": "Random",
        "weighted_round_robin": "WeightedRoundRobin",
        "weighted_random": "WeightedRandom",
        "peak_ewma": "PeakEwma",
        "weighted_by_load": "WeightedByLoad",
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
    late, until it dies at ``discovery.publisher_dies_at``. ``client`` says which library
    the simulated client uses (what a timeout or a refused connection raises) and which
    classifier judges its failures.
    """

    name: str
    description: str = ""
    seed: int = 1
    traffic: Traffic = attrs.field(factory=Traffic)
    endpoints: tuple[EndpointModel, ...]
    configurations: tuple[Configuration, ...] = ()
    discovery: DiscoverySpec | None = None
    fleet: Fleet = attrs.field(factory=Fleet)
    client: Client = attrs.field(factory=Client)

    def all_configurations(self) -> tuple[Configuration, ...]:
        """poise_py's default, the baselines, then the scenario's own."""
        return (*default_configurations(load=self.loaded), *self.configurations)

    @property
    def loaded(self) -> bool:
        """Whether any endpoint has a capacity (so calls queue, and the load baselines run)."""
        return any(m.loaded for m in self.endpoints)

    def fault_windows(self) -> list[tuple[float, float, str]]:
        """Each stretch of a phase in which an endpoint misbehaves, as ``(start, end, endpoint id)``.

        Misbehaving: a phase that is unhealthy, slowed (``latency_scale`` other than 1) or
        with a capacity of its own, while the endpoint exists; the timeline plot shades
        these. A flapping cycle is not drawn (it would cover the whole run).
        """
        end = self.traffic.duration
        windows: list[tuple[float, float, str]] = []
        for model in self.endpoints:
            points = [p for p in sorted({0.0, *model.change_points()}) if p < end]
            opened: float | None = None
            for at, until in zip(points, [*points[1:], end], strict=True):
                middle = (at + until) / 2
                phase = model.phase_at(middle)
                odd = model.exists_at(middle) and (
                    not phase.is_healthy or phase.latency_scale != 1 or phase.capacity is not None
                )
                if odd and opened is None:
                    opened = at
                elif not odd and opened is not None:
                    windows.append((opened, at, model.id))
                    opened = None
            if opened is not None:
                windows.append((opened, end, model.id))
        return windows

    @property
    def summary(self) -> str:
        """The description's first sentence (whole, never cut)."""
        return first_sentence(self.description)


def first_sentence(text: str) -> str:
    """The first sentence of ``text``, on one line."""
    flat = " ".join(text.split())
    # A sentence ends at . ! or ? before a capital letter ("e.g. classify" goes on).
    match = re.search(r"[.!?](?= [A-Z0-9])", flat)
    return flat if match is None else flat[: match.end()]


def default_configurations(*, load: bool = False) -> tuple[Configuration, ...]:
    """poise_py's default configuration and the three baselines (five when ``load``).

    With ``load`` (a scenario whose endpoints have a capacity) two more: uniform random
    with no health, and a join-the-shortest-queue oracle that sees every endpoint's true
    queue and health (the lower bound a client-side policy can approach).
    """
    return (*_fault_baselines(), *(_load_baselines() if load else ()))


def _load_baselines() -> tuple[Configuration, ...]:
    return (
        Configuration(
            name="uniform random", policy=poise.Random(), circuit=poise.CircuitPolicy(), reporting=Reporting.NONE
        ),
        Configuration(
            name="shortest-queue oracle",
            policy=poise.RoundRobin(),
            circuit=poise.CircuitPolicy(),
            reporting=Reporting.NONE,
            oracle=True,
        ),
    )


def _fault_baselines() -> tuple[Configuration, ...]:
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
                overload_window=None,  # a peer's breaker: every failure is the endpoint's own
            ),
        ),
    )


class _Table:
    """One TOML table being read: typed getters, and unknown keys refused at the end."""

    def __init__(self, value: object, where: str) -> None:
        if not isinstance(value, Mapping):
            raise ConfigError(where or "scenario", f"must be a table, got {_show(value)}")
        for key in value:
            if not isinstance(key, str):
                raise ConfigError(where or "scenario", f"keys must be strings, got {_show(key)}")
        self.data: dict[str, Any] = dict(value)
        self.where = where
        self.read: set[str] = set()
        self.known: set[str] = set()
        """Keys the table takes that were not read (the reading went another way): listed too."""

    def at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def has(self, key: str) -> bool:
        return key in self.data

    def expect(self, *keys: str) -> None:
        """Say that the table takes ``keys`` too, for the list an unknown key's error gives."""
        self.known.update(keys)

    def raw(self, key: str) -> object:
        self.read.add(key)
        return self.data.get(key)

    def number(
        self, key: str, default: float | None, *, low: float = 0.0, high: float = math.inf, open_low: bool = False
    ) -> float | None:
        value = self.raw(key)
        if value is None:
            return default
        if not is_number(value):
            raise ConfigError(self.at(key), f"must be a number, got {_show(value)}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if math.isnan(number) or number < low or (open_low and number == low) or number > high or math.isinf(number):
            bound = f"{'>' if open_low else '>='} {low:g}" + ("" if high == math.inf else f" and <= {high:g}")
            raise ConfigError(self.at(key), f"must be a finite number {bound}, got {_show(value)}")
        return number

    def integer(self, key: str, default: int | None, *, low: int, high: int) -> int | None:
        value = self.raw(key)
        if value is None:
            return default
        if not is_number(value) or not isinstance(value, int):
            raise ConfigError(self.at(key), f"must be an integer, got {_show(value)}")
        if not low <= value <= high:
            raise ConfigError(self.at(key), f"must be in [{low}, {high}], got {_show(value)}")
        return value

    def string(self, key: str, default: str | None, choices: Mapping[str, object] | None = None) -> str | None:
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, str) or not value:
            raise ConfigError(self.at(key), f"must be a non-empty string, got {_show(value)}")
        if choices is not None and value.lower() not in choices:
            raise ConfigError(self.at(key), f"unknown value {_show(value)}; one of {sorted(choices)}")
        return value.lower() if choices is not None else value

    def boolean(self, key: str, default: bool | None) -> bool | None:  # noqa: FBT001 - a default, not a flag
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(self.at(key), f"must be true or false, got {_show(value)}")
        return value

    def table(self, key: str) -> _Table | None:
        value = self.raw(key)
        return None if value is None else _Table(value, self.at(key))

    def array(self, key: str) -> list[object] | None:
        value = self.raw(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise ConfigError(self.at(key), f"must be an array, got {_show(value)}")
        return value

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.read)
        if unknown:
            raise ConfigError(self.at(unknown[0]), f"unknown key; known here: {sorted(self.read | self.known)}")


def _construct(cls: Callable[..., Any], where: str, **kwargs: Any) -> Any:
    """Build a value; any complaint of its constructor becomes a ConfigError naming ``where``."""
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        knob = exc.knob
        problem = str(exc).removeprefix(f"{knob}: ")
        field = knob.rsplit(".", 1)[-1]
        raise ConfigError(f"{where}.{field}" if field in kwargs else where, problem) from None
    except TypeError as exc:  # a key the value does not take: name it, and the ones it does
        unexpected = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        if unexpected is not None and attrs.has(cls):  # type: ignore[arg-type]
            known = sorted(f.alias for f in attrs.fields(cls) if f.init)
            raise ConfigError(f"{where}.{unexpected[1]}", f"unknown key; known here: {known}") from None
        raise ConfigError(where, str(exc)) from None
    except (ValueError, ArithmeticError) as exc:
        raise ConfigError(where, str(exc)) from None


_FAULTS = {f.value: f for f in Fault}
_OBSERVATION_KEYS = ("grpc", "http", "timeout", "refused", "blackhole", "fault")


def _observation(t: _Table) -> Observation | None:
    """The observation a phase or flap table states (None: it names none)."""
    t.expect(*_OBSERVATION_KEYS, "trailing")
    given = [k for k in _OBSERVATION_KEYS if t.has(k)]
    if len(given) > 1:
        raise ConfigError(t.at(given[1]), f"a failure is one observation; this table also has {given[0]!r}")
    retry_after = t.number("retry_after", None)
    kind = given[0] if given else None
    if kind != "grpc" and t.has("trailing"):
        raise ConfigError(t.at("trailing"), 'trailing metadata goes with grpc = "STATUS"')
    if retry_after is not None and kind not in ("http", "fault"):
        raise ConfigError(t.at("retry_after"), 'Retry-After goes with http = 429/5xx or fault = "..."')
    if kind == "grpc":
        code = grpc_code(t.raw("grpc"), t.at("grpc"))
        trailing = t.table("trailing")
        pairs: list[tuple[str, str]] = []
        if trailing is not None:
            for key in list(trailing.data):
                value = trailing.string(key, None)
                assert value is not None  # noqa: S101 - present
                pairs.append((key.lower(), value))
            trailing.done()
        return GrpcStatus(code=code, trailing=tuple(pairs))
    if kind == "http":
        status = t.integer("http", None, low=400, high=599)
        assert status is not None  # noqa: S101 - present
        if retry_after is not None and not (status == 429 or status >= 500):
            raise ConfigError(t.at("retry_after"), f"HTTP {status} carries no Retry-After (429 and 5xx do)")
        return HttpStatus(status=status, retry_after=retry_after)
    if kind in ("timeout", "refused", "blackhole"):
        if t.boolean(kind, None) is not True:
            raise ConfigError(t.at(kind), "must be true (leave it out otherwise)")
        return Refused() if kind == "refused" else Timeout()
    if kind == "fault":
        name = t.string("fault", None, _FAULTS)
        assert name is not None  # noqa: S101 - present
        return Stated(fault=_FAULTS[name], retry_after=retry_after)
    return None


def _load(t: _Table) -> dict[str, Any]:
    """An endpoint table's load model: capacity, queue, overload answer, warm-up, quota."""
    options: dict[str, Any] = {
        "capacity": t.integer("capacity", None, low=1, high=MAX_CAPACITY),
        "max_queue": t.integer("max_queue", None, low=0, high=MAX_CAPACITY),
        "reports_load": t.boolean("reports_load", None),
    }
    overload = t.table("overload")
    if overload is not None:
        observation = _observation(overload)
        overload.done()
        if observation is None:
            raise ConfigError(overload.where, 'names what a shed call sees: http = 503, grpc = "UNAVAILABLE", ...')
        options["overload"] = observation
    warmup = t.table("warmup")
    if warmup is not None:
        duration = warmup.number("duration", None, open_low=True)
        share = warmup.number("capacity", 0.25, open_low=True, high=1.0)
        warmup.done()
        if duration is None:
            raise ConfigError(warmup.at("duration"), "is required (seconds to full capacity)")
        options["warmup"] = _construct(Warmup, warmup.where, duration=duration, capacity=share)
    quota = t.table("quota")
    if quota is not None:
        requests = quota.integer("requests", None, low=1, high=MAX_CAPACITY)
        per = quota.number("per", 60.0, low=RESOLUTION)  # a window the simulated provider resets
        quota.done()
        if requests is None:
            raise ConfigError(quota.at("requests"), "is required (requests per window)")
        options["quota"] = _construct(Quota, quota.where, requests=requests, per=per)
    return {k: v for k, v in options.items() if v is not None}


def _phase(value: object, where: str) -> Phase:
    t = _Table(value, where)
    error = _observation(t)
    start = t.number("start", 0.0)
    error_rate = t.number("error_rate", 0.0 if error is None else 1.0, high=1.0)
    latency_scale = t.number("latency_scale", 1.0, open_low=True)
    error_latency = t.number("error_latency", None, open_low=True)
    capacity = t.integer("capacity", None, low=1, high=MAX_CAPACITY)
    healthy = t.boolean("healthy", None)
    t.done()
    return _construct(  # type: ignore[no-any-return]
        Phase,
        where,
        start=start,
        error_rate=error_rate,
        error=error or Stated(fault=Fault.SUSPECT),
        latency_scale=latency_scale,
        error_latency=error_latency,
        capacity=capacity,
        healthy=healthy,
    )


def _flap(t: _Table) -> Flap:
    error = _observation(t)
    period = t.number("period", None, open_low=True)
    down = t.number("down", None, open_low=True)
    start = t.number("start", 0.0)
    t.done()
    if period is None or down is None:
        raise ConfigError(t.where, "needs period and down (seconds)")
    return _construct(Flap, t.where, period=period, down=down, start=start, error=error or Stated(fault=Fault.SUSPECT))  # type: ignore[no-any-return]


def _endpoints(raw: object, where: str = "endpoints") -> tuple[EndpointModel, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(where, "must be a non-empty array of tables ([[endpoints]])")
    specs: list[EndpointModel] = []
    for n, item in enumerate(raw):
        t = _Table(item, f"{where}[{n}]")
        base_id = t.string("id", None)
        if base_id is None:
            raise ConfigError(t.at("id"), "is required (a non-empty string)")
        count = t.integer("count", None, low=1, high=MAX_COUNT)
        options: dict[str, Any] = {}
        tier = t.integer("tier", 0, low=0, high=1000)
        zone = t.string("zone", None)
        weight = t.integer("weight", 1, low=1, high=1_000_000)
        options.update(tier=tier, zone=zone, weight=weight)
        latency = t.table("latency")
        if latency is not None:
            median = latency.number("median", 0.02, open_low=True)
            p99 = latency.number("p99", 0.08, open_low=True)
            straggler_rate = latency.number("straggler_rate", 0.0)
            straggler_scale = latency.number("straggler_scale", 100.0)
            latency.done()
            options["latency"] = _construct(
                Latency,
                latency.where,
                median=median,
                p99=p99,
                straggler_rate=straggler_rate,
                straggler_scale=straggler_scale,
            )
        phases = t.array("phases")
        if phases is not None:
            if not phases:
                raise ConfigError(t.at("phases"), "must list at least one phase")
            options["phases"] = tuple(_phase(p, f"{t.at('phases')}[{i}]") for i, p in enumerate(phases))
        flap = t.table("flap")
        if flap is not None:
            options["flap"] = _flap(flap)
        rate_limit = t.table("rate_limit")
        if rate_limit is not None:
            rps = rate_limit.integer("rps", None, low=1, high=1_000_000)
            if rps is None:
                raise ConfigError(rate_limit.at("rps"), "is required (calls per second)")
            retry_after = rate_limit.number("retry_after", 1.0)
            rate_limit.done()
            options["rate_limit"] = RateLimit(rps=rps, retry_after=retry_after or 0.0)
        options["joins_at"] = t.number("joins_at", 0.0)
        options["leaves_at"] = t.number("leaves_at", None)
        options.update(_load(t))
        t.done()
        if options["leaves_at"] is not None and options["leaves_at"] <= options["joins_at"]:
            raise ConfigError(t.at("leaves_at"), "must be after joins_at")
        ids = [base_id] if count is None else [f"{base_id}{i}" for i in range(1, count + 1)]
        if len(specs) + len(ids) > MAX_ENDPOINTS:
            raise ConfigError(t.at("count"), f"a scenario has at most {MAX_ENDPOINTS} endpoints")
        specs.extend(_construct(EndpointModel, t.where, id=i, **options) for i in ids)
    seen: set[str] = set()
    for spec in specs:
        if spec.id in seen:
            raise ConfigError(where, f"id {spec.id!r} appears twice")
        seen.add(spec.id)
    return tuple(specs)


_BACKOFFS = {b.value: b for b in poise.Backoff}
_WINDOWS = {"count": poise.CountWindow, "time": poise.TimeWindow}


def _plain_or_off(t: _Table) -> dict[str, Any]:
    """:func:`_plain`, where TOML's stand-in for null, ``"off"``, turns an optional knob off (None)."""
    return {key: None if value == "off" else value for key, value in _plain(t).items()}


def _plain(t: _Table) -> dict[str, Any]:
    """The table's unread scalar knobs, passed through to a constructor that validates them."""
    out: dict[str, Any] = {}
    for key in [k for k in t.data if k not in t.read]:
        value = t.raw(key)
        if isinstance(value, Mapping | list):
            raise ConfigError(t.at(key), f"must be a number, string or boolean, got {_show(value)}")
        out[key] = value
    return out


def _circuit(t: _Table) -> poise.CircuitPolicy:
    knobs: dict[str, Any] = {}
    escalation = t.table("escalation")
    if escalation is not None:
        backoff = escalation.string("backoff", None, _BACKOFFS)
        esc = _plain_or_off(escalation)
        if backoff is not None:
            esc["backoff"] = _BACKOFFS[backoff]
        knobs["escalation"] = _construct(poise.Escalation, escalation.where, **esc)
    window = t.table("window")
    if window is not None:
        kind = window.string("kind", "count", _WINDOWS)
        assert kind is not None  # noqa: S101 - defaulted
        knobs["window"] = _construct(_WINDOWS[kind], window.where, **_plain(window))
    if t.data.get("hard_cap") == "off":  # no cap, as when the key is left out
        t.raw("hard_cap")
        knobs["hard_cap"] = None
    hard_cap = None if "hard_cap" in knobs else t.table("hard_cap")
    if hard_cap is not None:
        knobs["hard_cap"] = _construct(poise.HardCap, hard_cap.where, **_plain(hard_cap))
    knobs.update(_plain_or_off(t))
    return _construct(poise.CircuitPolicy, t.where, **knobs)  # type: ignore[no-any-return]


_DISCOVERY_ENDS = {"last_known_good": "LAST_KNOWN_GOOD", "fail_closed": "FAIL_CLOSED"}
_CLASSIFIERS = {c.value: c for c in ClassifierName}


def _configurations(raw: object, client: Client) -> tuple[Configuration, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("configurations", "must be an array of tables ([[configurations]])")
    policies = _policies()
    out: list[Configuration] = []
    for n, item in enumerate(raw):
        t = _Table(item, f"configurations[{n}]")
        name = t.string("name", None)
        if name is None:
            raise ConfigError(t.at("name"), "is required (a non-empty string)")
        policy_name = t.string("policy", "p2c", policies)
        assert policy_name is not None  # noqa: S101 - defaulted
        policy_table = t.table("policy_options")  # the policy's knobs: { blackout_period = 2.0 }
        policy = (
            policies[policy_name]()
            if policy_table is None
            else _construct(policies[policy_name], policy_table.where, **_plain(policy_table))
        )
        circuit_table = t.table("circuit")
        circuit = poise.CircuitPolicy() if circuit_table is None else _circuit(circuit_table)
        budget_table = t.table("retry_budget")
        budget = (
            poise.RetryBudget()
            if budget_table is None
            else _construct(poise.RetryBudget, budget_table.where, **_plain(budget_table))
        )
        options: dict[str, object] = {}
        end = t.string("on_discovery_end", None, _DISCOVERY_ENDS)
        if end is not None:
            options["on_discovery_end"] = poise.DiscoveryEnd(end)
        coordination = t.boolean("coordination", False)
        classifier = t.string("classifier", None, _CLASSIFIERS)
        options.update(_load_knobs(t))
        hedge_table = t.table("hedge")
        hedge = None if hedge_table is None else _hedge(hedge_table)
        t.done()
        out.append(
            Configuration(
                name=name,
                policy=policy,
                circuit=circuit,
                retry_budget=budget,
                balancer_options=options,
                coordination=bool(coordination),
                classifier=None if classifier is None else client.build(_CLASSIFIERS[classifier]),
                hedge=hedge,
            )
        )
    return tuple(out)


def _hedge(t: _Table) -> poise.Hedge:
    """A configuration's ``hedge = { delay = 0.05 }`` or ``{ quantile = 0.99 }``, with ``poise.Hedge``'s knobs."""
    delay = t.number("delay", None)
    q = t.number("quantile", None)
    if (delay is None) == (q is None):
        raise ConfigError(t.where, "needs one of delay (seconds) or quantile (of the measured latency, in (0, 1))")
    knobs: dict[str, Any] = {}
    t.expect("max_attempts", "max_extra_load")
    if t.has("max_attempts"):
        knobs["max_attempts"] = t.integer("max_attempts", None, low=2, high=10)
    if t.has("max_extra_load"):
        knobs["max_extra_load"] = t.number("max_extra_load", None)
    if delay is not None:
        t.done()
        return _construct(poise.Hedge, t.where, delay=delay, **knobs)  # type: ignore[no-any-return]
    quantile: dict[str, Any] = {}
    t.expect("min_samples", "initial")
    if t.has("min_samples"):
        quantile["min_samples"] = t.integer("min_samples", None, low=1, high=1_000_000)
    if t.has("initial"):
        quantile["initial"] = t.number("initial", None, open_low=True)
    t.done()
    try:
        value = poise.Quantile(q=q, **quantile)
    except ConfigError as exc:
        field = exc.knob.rsplit(".", 1)[-1]
        problem = str(exc).removeprefix(f"{exc.knob}: ")
        raise ConfigError(t.at("quantile" if field == "q" else field), problem) from None
    return _construct(poise.Hedge, t.where, delay=value, **knobs)  # type: ignore[no-any-return]


_ALGORITHMS = {"gradient2": poise.Gradient2, "aimd": poise.AIMD}


def _load_knobs(t: _Table) -> dict[str, object]:
    """A configuration's load knobs: ``max_in_flight``, ``slow_start = {...}``, ``concurrency = {...}``."""
    options: dict[str, object] = {}
    cap = t.integer("max_in_flight", None, low=1, high=MAX_CAPACITY)
    if cap is not None:
        options["max_in_flight"] = cap
    slow_start = t.table("slow_start")
    if slow_start is not None:
        options["slow_start"] = _construct(poise.SlowStart, slow_start.where, **_plain(slow_start))
    concurrency = t.table("concurrency")
    if concurrency is not None:
        name = concurrency.string("algorithm", "gradient2", _ALGORITHMS)
        assert name is not None  # noqa: S101 - defaulted
        algorithm = _construct(_ALGORITHMS[name], concurrency.where, **_plain(concurrency))
        options["concurrency"] = poise.AdaptiveConcurrency(algorithm)
    return options


_PROTOCOLS = {p.value: p for p in Protocol}


def _client(t: _Table | None) -> Client:
    if t is None:
        return Client()
    protocol = t.string("protocol", "plain", _PROTOCOLS)
    classifier = t.string("classifier", None, _CLASSIFIERS)
    marker_raw = t.array("marker")
    marker = None
    if marker_raw is not None:
        if len(marker_raw) != 2 or not all(isinstance(m, str) and m for m in marker_raw):
            raise ConfigError(t.at("marker"), f"must be a [key, value] pair of strings, got {_show(marker_raw)}")
        marker = (str(marker_raw[0]), str(marker_raw[1]))
    gateway = t.string("gateway", "suspect", _FAULTS)
    t.done()
    assert protocol is not None  # noqa: S101 - defaulted
    assert gateway is not None  # noqa: S101 - defaulted
    client = Client(
        protocol=_PROTOCOLS[protocol],
        classifier=None if classifier is None else _CLASSIFIERS[classifier],
        marker=marker,
        gateway=_FAULTS[gateway],
    )
    client.check()
    return client


def parse_scenario(data: Mapping[str, Any]) -> Scenario:
    """Build a scenario from parsed TOML; raise ConfigError naming the bad table and key."""
    top = _Table(data, "")
    name = top.string("name", None)
    if name is None:
        raise ConfigError("name", "a scenario needs a name (a non-empty string)")
    description = top.raw("description")
    if description is not None and not isinstance(description, str):
        raise ConfigError("description", f"must be a string, got {_show(description)}")
    seed = top.integer("seed", 1, low=0, high=2**63 - 1)
    traffic = top.table("traffic")
    if traffic is None:
        traffic_value = Traffic()
    else:
        knobs = {key: traffic.number(key, None, open_low=True) for key in _TRAFFIC_NUMBERS}
        knobs_int = {"attempts": traffic.integer("attempts", None, low=1, high=100)}
        traffic.done()
        given = {k: v for k, v in {**knobs, **knobs_int}.items() if v is not None}
        traffic_value = _construct(Traffic, "traffic", **given)
    client = _client(top.table("client"))
    endpoints = _endpoints(top.raw("endpoints"))
    configurations = _configurations(top.raw("configurations"), client)
    discovery = top.table("discovery")
    discovery_value = None
    if discovery is not None:
        delay = discovery.number("delay", 1.0)
        dies = discovery.number("publisher_dies_at", None)
        discovery.done()
        discovery_value = DiscoverySpec(delay=delay or 0.0, publisher_dies_at=dies)
    fleet = top.table("fleet")
    fleet_value = Fleet()
    if fleet is not None:
        instances = fleet.integer("instances", 1, low=1, high=10_000)
        sync = fleet.number("sync_interval", 1.0, low=RESOLUTION)  # Coordination.sync_interval's bound
        fleet.done()
        fleet_value = _construct(Fleet, "fleet", instances=instances, sync_interval=sync)
    top.done()
    return Scenario(
        name=name,
        description=description or "",
        seed=seed if seed is not None else 1,
        traffic=traffic_value,
        endpoints=endpoints,
        configurations=configurations,
        discovery=discovery_value,
        fleet=fleet_value,
        client=client,
    )


_TRAFFIC_NUMBERS = ("rps", "duration", "timeout", "sample_interval")


def load_scenario(source: str | Path) -> Scenario:
    """A built-in scenario by name, or a TOML file by path.

    Every error is one :class:`ConfigError` naming the file, the table and the field.
    """
    path = Path(source)
    label: str
    if path.suffix == ".toml" or path.exists():
        label = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(label, f"cannot read the scenario: {exc}") from None
    else:
        name = ALIASES.get(str(source), str(source))
        label = f"{name}.toml"
        try:
            text = resources.files("poise_py.sim.scenarios").joinpath(label).read_text(encoding="utf-8")
        except (FileNotFoundError, IsADirectoryError, OSError):
            raise ConfigError("scenario", f"no built-in scenario {str(source)!r}; one of {builtin_names()}") from None
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError, ValueError) as exc:
        raise ConfigError(label, f"invalid TOML: {exc}") from None
    try:
        return parse_scenario(data)
    except ConfigError as exc:
        problem = str(exc).removeprefix(f"{exc.knob}: ")
        raise ConfigError(f"{label}: {exc.knob}", problem) from None


def builtin_names() -> list[str]:
    """The names of the built-in scenarios."""
    files = resources.files("poise_py.sim.scenarios").iterdir()
    return sorted(f.name.removesuffix(".toml") for f in files if f.name.endswith(".toml"))
