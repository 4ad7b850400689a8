"""A balancer's lifecycle at its edges: two entries at once, a start cancelled, a stream that cannot start, a stop."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

import poise_py as poise
from poise_py import Fault

pytestmark = pytest.mark.anyio


def one() -> poise.LoadBalancer:
    return poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))


async def test_a_second_task_entering_while_the_first_starts_is_refused() -> None:
    lb = one()
    outcomes: list[str] = []

    async def enter() -> None:
        try:
            async with lb:
                outcomes.append("entered")
                await anyio.sleep(0.01)
        except poise.AlreadyRunning:
            outcomes.append("refused")

    async with anyio.create_task_group() as tg:
        tg.start_soon(enter)
        tg.start_soon(enter)
    assert sorted(outcomes) == ["entered", "refused"]
    async with lb:  # and it runs again afterwards
        assert lb.running


class SlowStorage(poise.InMemoryStorage):
    async def read(self, keys: Sequence[str]) -> list[poise.SharedState]:
        await anyio.sleep(0.3)
        return await super().read(keys)


async def test_a_start_cancelled_while_coordination_starts_leaves_it_stopped_and_startable() -> None:
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint("a")]), coordination=poise.Coordination(SlowStorage())
    )
    with anyio.move_on_after(0.1):
        async with lb:
            pytest.fail("the start was cancelled: the body must not run")
    assert not lb.running
    with anyio.fail_after(10):
        async with lb:
            assert lb.running


async def test_a_discovery_stream_that_cannot_start_has_failed_as_one_that_fails_later() -> None:
    class CannotStart:
        def __aiter__(self) -> object:
            raise OSError("cannot open the stream")

    lb = poise.LoadBalancer(CannotStart(), on_discovery_end=poise.DiscoveryEnd.FAIL_CLOSED)  # type: ignore[arg-type]
    async with lb:
        await anyio.sleep(0.1)
        with pytest.raises(poise.DiscoveryClosed):
            lb.acquire()


def test_a_discovery_class_instead_of_a_source_is_named() -> None:
    with pytest.raises(poise.ConfigError) as info:
        poise.LoadBalancer(poise.StaticDiscovery)  # type: ignore[arg-type]
    assert info.value.knob == "discovery"
    assert "StaticDiscovery(...)" in str(info.value)


async def test_a_pending_permit_entered_after_the_stop_raises_not_running_at_once() -> None:
    lb = one()
    async with lb:
        async with lb.acquire() as permit:
            permit.fail(Fault.TRANSIENT, retry_after=60.0)
        pending = lb.acquire(wait=5.0)
    with anyio.fail_after(1), pytest.raises(poise.NotRunning):
        async with pending:
            pass


async def test_an_endpoint_id_that_is_not_a_string_is_a_config_error() -> None:
    async with one() as lb:
        with pytest.raises(poise.ConfigError) as info:
            lb.set_status(["a"], poise.AdminStatus.AUTO)  # type: ignore[arg-type]
        assert info.value.knob == "endpoint_id"
        with pytest.raises(poise.ConfigError):
            await lb.drained(["a"])  # type: ignore[arg-type]


def test_constructor_errors_come_in_the_order_of_the_signature() -> None:
    discovery = poise.StaticDiscovery([poise.Endpoint("a")])
    with pytest.raises(poise.ConfigError) as info:
        poise.LoadBalancer(discovery, clock=1, retry_budget=1)  # type: ignore[arg-type]
    assert info.value.knob == "clock"
