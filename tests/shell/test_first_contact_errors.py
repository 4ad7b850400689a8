"""First contact: the mistakes a new user makes first end in one line that says what to do.

Each error's message is one line, and its end is the fix: the code to write instead.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

import poise_py as poise
from tests.support.clocks import endpoints, static_lb

pytestmark = pytest.mark.anyio


def one_line_ending(error: BaseException, fix: str) -> None:
    text = str(error)
    assert "\n" not in text
    assert text.endswith(fix), text


async def test_await_acquire_says_to_use_async_with_and_counts_a_cancellation() -> None:
    async with static_lb("a") as lb:
        with pytest.raises(poise.PermitError) as caught:
            await lb.acquire()  # type: ignore[misc]  # the mistake: a type checker catches it too
        one_line_ending(caught.value, "write `async with lb.acquire() as permit:`")
        gc.collect()  # filterwarnings=error: the permit was reported, so no ResourceWarning
        assert lb.snapshot()["a"].counters.cancellations == 1
        assert lb.snapshot()["a"].inflight == 0
        async with lb.acquire() as permit:  # the right way still works
            assert permit.endpoint.id == "a"


@pytest.mark.parametrize(
    "discovery", [endpoints("a", "b"), tuple(endpoints("a")), poise.Endpoint("a")], ids=["list", "tuple", "one"]
)
def test_endpoints_given_as_discovery_say_to_wrap_them_in_static_discovery(discovery: Any) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.LoadBalancer(discovery)
    assert caught.value.knob == "discovery"
    one_line_ending(caught.value, "wrap them, discovery=poise.StaticDiscovery([...])")


def test_a_snapshot_given_as_discovery_says_to_use_static_discovery() -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.LoadBalancer(poise.Snapshot(1, endpoints("a")))  # type: ignore[arg-type]
    one_line_ending(caught.value, "write discovery=poise.StaticDiscovery(snapshot.endpoints)")


def test_anything_else_given_as_discovery_names_the_sources() -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.LoadBalancer("10.0.0.1:80,10.0.0.2:80")  # type: ignore[arg-type]
    one_line_ending(caught.value, "a DiscoveryPublisher().subscribe(), DnsDiscovery(...) or FileDiscovery(...)")


@pytest.mark.parametrize(
    ("policy", "fix"),
    [
        ("p2c", "policy=poise.PowerOfTwoChoices()"),
        ("least_request", "policy=poise.PowerOfTwoChoices()"),
        ("round-robin", "policy=poise.RoundRobin()"),
        ("RoundRobin", "policy=poise.RoundRobin()"),
        ("random", "policy=poise.Random()"),
        ("wrr", "policy=poise.WeightedRoundRobin()"),
        ("ewma", "policy=poise.PeakEwma()"),
        ("ring_hash", "policy=poise.ConsistentHash()"),
        ("fastest", "poise.PeakEwma(), poise.ConsistentHash()"),
        (42, "poise.PeakEwma(), poise.ConsistentHash()"),
    ],
)
def test_a_policy_that_is_not_one_suggests_the_policy_to_write(policy: object, fix: str) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.LoadBalancer(poise.StaticDiscovery(endpoints("a")), policy=policy)  # type: ignore[arg-type]
    assert caught.value.knob == "policy"
    one_line_ending(caught.value, fix)


@pytest.mark.parametrize(
    ("classifier", "fix"),
    [
        ("http", "write classifier=poise.classify.http()"),
        ("grpc", "write classifier=poise.classify.grpc()"),
        ("default", "poise.classify.http(), poise.classify.grpc() or your own function"),
        (None, "poise.classify.http(), poise.classify.grpc() or your own function"),
    ],
)
def test_a_classifier_that_is_not_one_suggests_the_classifier_to_write(classifier: object, fix: str) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.LoadBalancer(poise.StaticDiscovery(endpoints("a")), classifier=classifier)  # type: ignore[arg-type]
    assert caught.value.knob == "classifier"
    one_line_ending(caught.value, fix)


async def test_iterating_a_snapshot_says_to_iterate_its_endpoints() -> None:
    async with static_lb("a", "b") as lb:
        snapshot = lb.snapshot()
        with pytest.raises(TypeError) as caught:
            list(snapshot)  # type: ignore[call-overload]
        one_line_ending(caught.value, "iterate snapshot.endpoints")
        with pytest.raises(TypeError):
            snapshot[0]  # type: ignore[index]
        assert "a" in snapshot
        assert "z" not in snapshot
        assert [e.endpoint.id for e in snapshot.endpoints] == ["a", "b"]
        with pytest.raises(KeyError):
            snapshot["z"]
