"""Misuse speaks up: bad arguments are a ConfigError naming the field, at the call that made them."""

from __future__ import annotations

import functools
from typing import Any

import pytest

import poise_py as poise
from tests.helpers import static_lb

pytestmark = pytest.mark.anyio


# -- acquire(exclude=...) and Delta(removed=...) ------------------------------------------


async def test_exclude_as_one_string_is_a_config_error_not_a_set_of_characters() -> None:
    async with static_lb("node-1", "node-10") as lb:
        with pytest.raises(poise.ConfigError) as caught:
            lb.acquire(exclude="node-10")  # type: ignore[arg-type]
        assert caught.value.knob == "exclude"
        async with lb.acquire(exclude=["node-10"]) as permit:  # the right way still works
            assert permit.endpoint.id == "node-1"


@pytest.mark.parametrize("exclude", [b"node-1", 7, None, iter(["node-1"]), [1], {"node-1", None}])
async def test_exclude_that_is_not_a_collection_of_ids_is_a_config_error(exclude: Any) -> None:
    async with static_lb("node-1", "node-2") as lb:
        with pytest.raises(poise.ConfigError) as caught:
            lb.acquire(exclude=exclude)
        assert caught.value.knob == "exclude"


@pytest.mark.parametrize("exclude", [("node-1",), ["node-1"], {"node-1"}, frozenset({"node-1"}), {"node-1": 1}])
async def test_exclude_accepts_any_collection_of_ids(exclude: Any) -> None:
    async with static_lb("node-1", "node-2") as lb:
        for _ in range(10):
            async with lb.acquire(exclude=exclude) as permit:
                assert permit.endpoint.id == "node-2"


@pytest.mark.parametrize("removed", [None, 3, "a", b"a", [1], ["a", None]])
def test_a_delta_whose_removed_is_not_a_collection_of_ids_is_a_config_error(removed: Any) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.Delta(2, removed=removed)
    assert caught.value.knob == "removed"


# -- HealthCheck(probe=...) ------------------------------------------------------------------


def plain_probe(endpoint: poise.Endpoint) -> None:
    return None


async def async_probe(endpoint: poise.Endpoint, *, port: int = 80) -> None:
    return None


class AsyncCallable:
    async def __call__(self, endpoint: poise.Endpoint) -> None:
        return None


class SyncCallable:
    def __call__(self, endpoint: poise.Endpoint) -> None:
        return None


@pytest.mark.parametrize(
    "probe", [plain_probe, lambda endpoint: None, SyncCallable(), print], ids=["def", "lambda", "sync-call", "builtin"]
)
def test_a_plain_function_probe_is_refused_at_construction(probe: Any) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.HealthCheck(probe=probe)
    assert caught.value.knob == "HealthCheck.probe"
    assert "async" in str(caught.value)


@pytest.mark.parametrize(
    "probe",
    [async_probe, functools.partial(async_probe, port=8080), AsyncCallable(), poise.probes.tcp_connect()],
    ids=["async-def", "partial", "async-call", "ready-made"],
)
def test_async_probes_are_accepted(probe: Any) -> None:
    assert poise.HealthCheck(probe=probe).probe is probe
