"""Every knob error names its argument: each public constructor, fuzzed with wrong-typed values.

A constructor given a value it cannot use raises :class:`poise.ConfigError` whose message
names the argument (``ConfigError("knob", ...)`` puts the knob first), never a bare
``TypeError``, ``AttributeError`` or an error blaming another argument; a misspelt
argument name is Python's own ``TypeError`` naming it. A constructor may also accept the
value (``None`` where a knob is optional, any callable where one is expected): the
property is about the errors.

The constructors are every configuration class ``poise_py`` re-exports (found by walking
``poise_py.__init__``, so a new class must be listed here) plus the contrib ones.
"""

from __future__ import annotations

import enum
import inspect
import math
import re
from typing import Any

import coredis
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import poise_py as poise
from poise_py.contrib.grpc import BalancedChannel, ChannelFactory
from poise_py.contrib.httpx import PoiseTransport


async def _probe(endpoint: poise.Endpoint) -> None:
    return None


def _answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200)


LB = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))
QUIET_TRANSPORT = httpx.MockTransport(_answer)  # so a PoiseTransport does not build an SSL context each time

REQUIRED: dict[type, dict[str, Any]] = {
    poise.LoadBalancer: {"discovery": poise.StaticDiscovery([poise.Endpoint("a")])},
    poise.Endpoint: {"id": "a"},
    poise.HardCap: {"max_ejections": 3},
    poise.HealthCheck: {"probe": _probe},
    poise.Coordination: {"storage": poise.InMemoryStorage()},
    poise.RedisStorage: {"client": coredis.Redis()},
    poise.Snapshot: {"revision": 1, "endpoints": ()},
    poise.Delta: {"revision": 1},
    poise.StaticDiscovery: {"endpoints": ()},
    poise.FileDiscovery: {"path": "pool.json"},
    poise.DnsDiscovery: {"host": "localhost", "port": 80},
    poise.Classification: {"fault": poise.Fault.SUSPECT},
    poise.FaultError: {"fault": poise.Fault.SUSPECT},
    PoiseTransport: {"lb": LB, "host": "api.internal", "transport": QUIET_TRANSPORT},
    BalancedChannel: {"lb": LB},
    poise.Hedge: {"delay": 0.05},
    poise.Quantile: {"q": 0.95},
}
"""The arguments each constructor with a required argument needs to succeed (the others take none)."""

NOT_CONFIGURATION = {
    # what the balancer hands out or reports, never built by a user
    "Attempt",
    "BalancerStatistics",
    "CallEnded",
    "Changes",
    "CoordinationChange",
    "CoordinationStatistics",
    "Decision",
    "EndpointCounters",
    "EndpointSnapshot",
    "EventStream",
    "HealthSnapshot",
    "OpenWait",
    "PendingPermit",
    "Permit",
    "PoolCounters",
    "PoolSnapshot",
    "ProbeReport",
    "Reply",
    "SharedState",
    "Subscription",
    "TierSnapshot",
}


def _configuration_classes() -> set[type]:
    found: set[type] = set()
    for name in dir(poise):
        value = getattr(poise, name)
        if not inspect.isclass(value) or name in NOT_CONFIGURATION or getattr(value, "_is_protocol", False):
            continue
        if issubclass(value, enum.Enum | poise.BalancerEvent):
            continue
        if issubclass(value, BaseException) and value is not poise.FaultError:  # errors poise_py raises
            continue
        found.add(value)
    return found


CONTRIB = [PoiseTransport, BalancedChannel, ChannelFactory]
CONSTRUCTORS = sorted({*_configuration_classes(), *CONTRIB}, key=lambda c: c.__name__)
"""Every constructor the test fuzzes: found in ``poise_py``'s namespace, plus the contrib ones."""


def _required(cls: type) -> list[str]:
    signature = inspect.signature(cls)
    return [name for name, p in signature.parameters.items() if p.default is inspect.Parameter.empty]


def test_every_public_configuration_class_is_fuzzed() -> None:
    assert {c for c in CONSTRUCTORS if _required(c)} <= set(REQUIRED)  # a new one with required arguments: list it
    assert poise.LoadBalancer in CONSTRUCTORS
    assert poise.RoundRobin in CONSTRUCTORS  # one taking no argument


WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=8),
    st.binary(max_size=4),
    st.complex_numbers(max_magnitude=10),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=3), st.floats()), max_size=3),
    st.tuples(st.one_of(st.none(), st.integers(), st.text(max_size=3))),
    st.dictionaries(st.text(max_size=3), st.one_of(st.none(), st.integers()), max_size=2),
    st.frozensets(st.integers(), max_size=2),
    st.sampled_from(
        [
            object(),
            print,
            len,
            math.nan,
            -math.inf,
            poise.Fault.SUSPECT,
            poise.Backoff.LINEAR,
            poise.AdminStatus.AUTO,
            poise.DiscoveryEnd.FAIL_CLOSED,
            poise.Endpoint("z"),
            poise.CircuitPolicy(),
            poise.RoundRobin(),
            poise.Routing(),
            poise.RetryBudget(),
            poise.StaticDiscovery([]),
            int,
            poise.RoundRobin,
        ]
    ),
)
"""Values of every kind but the right one (or, by chance, a right one: then nothing is asserted)."""


def _parameters(cls: type) -> list[str]:
    signature = inspect.signature(cls)
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [name for name, p in signature.parameters.items() if p.kind not in kinds]


FUZZED = [pytest.param(cls, name, id=f"{cls.__name__}.{name}") for cls in CONSTRUCTORS for name in _parameters(cls)]


@pytest.mark.parametrize(("cls", "argument"), FUZZED)
@settings(max_examples=25, deadline=None)
@given(value=WRONG)
def test_a_wrong_value_is_a_config_error_naming_its_argument(cls: type, argument: str, value: Any) -> None:
    try:
        cls(**{**REQUIRED.get(cls, {}), argument: value})
    except poise.ConfigError as exc:
        error = exc
    except Exception as exc:
        pytest.fail(f"{cls.__name__}({argument}={value!r}) raised {type(exc).__name__}: {exc}")
    else:
        return  # a value it can use after all
    assert re.search(rf"(?<![\w]){re.escape(argument)}(?![\w])", str(error)), (
        f"{cls.__name__}({argument}={value!r}) raised a ConfigError that does not name {argument!r}: {error}"
    )


@pytest.mark.parametrize("cls", CONSTRUCTORS, ids=lambda c: c.__name__)
@settings(max_examples=10, deadline=None)
@given(name=st.from_regex(r"[a-z][a-z_]{0,12}", fullmatch=True))
def test_a_misspelt_argument_is_a_type_error_naming_it(cls: type, name: str) -> None:
    if name in _parameters(cls):
        return
    with pytest.raises(TypeError, match=re.escape(repr(name))):
        cls(**REQUIRED.get(cls, {}), **{name: 1})


ANY_LB: dict[str, Any] = {"discovery": poise.StaticDiscovery([])}

ONCE_WRONG: list[tuple[Any, dict[str, Any], str]] = [
    (poise.Escalation, {"reset_on_success": "false"}, "Escalation.reset_on_success"),  # was True
    (poise.Escalation, {"reset_on_success": 0}, "Escalation.reset_on_success"),
    (poise.Classification, {"fault": "transient"}, "fault"),  # was accepted
    (poise.FaultError, {"fault": "transient"}, "fault"),  # was an AttributeError
    (poise.FileDiscovery, {"path": ""}, "path"),  # blamed format
    (poise.FileDiscovery, {"path": b"pool.json"}, "path"),
    (poise.StaticDiscovery, {"endpoints": None}, "endpoints"),  # a bare TypeError
    (poise.StaticDiscovery, {"endpoints": poise.Endpoint("a")}, "endpoints"),
    (poise.Delta, {"revision": 1, "added": poise.Endpoint("a")}, "added"),  # blamed endpoints
    (poise.Delta, {"revision": 1, "updated": [None]}, "updated"),
    (poise.LoadBalancer, {**ANY_LB, "seed": "7"}, "seed"),  # was accepted
    (poise.LoadBalancer, {**ANY_LB, "seed": True}, "seed"),
]
"""Values accepted before (and acting as something else), or refused by an error that blamed another knob."""


@pytest.mark.parametrize(
    ("cls", "kwargs", "knob"),
    ONCE_WRONG,
    ids=[
        f"{c.__name__}({', '.join(f'{k}={v!r}' for k, v in kw.items() if k != 'discovery')})" for c, kw, _ in ONCE_WRONG
    ],
)
def test_a_value_once_accepted_or_blamed_on_another_knob_is_a_config_error_naming_its_own(
    cls: Any, kwargs: dict[str, Any], knob: str
) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        cls(**kwargs)
    assert caught.value.knob == knob


def test_a_file_path_without_a_known_suffix_asks_for_format_and_names_the_path() -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.FileDiscovery("endpoints")
    assert caught.value.knob == "format"
    assert "path 'endpoints'" in str(caught.value)
    assert str(caught.value).endswith("pass format='json' or format='toml'")
