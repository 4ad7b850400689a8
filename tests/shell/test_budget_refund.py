"""A retry or hedge the budget granted but that found no endpoint gives its withdrawal back."""

from __future__ import annotations

import anyio
import pytest

import poise_py as poise
from poise_py._core._budget import Budget

pytestmark = pytest.mark.anyio

ONE_RETRY = poise.RetryBudget(percent=0.0, min_per_second=0.1, ttl=10.0)  # a floor of one retry in 10 s


def test_a_refund_gives_back_one_withdrawal_of_its_slice_only() -> None:
    budget = Budget(ONE_RETRY)
    assert budget.try_withdraw(1.0)
    assert not budget.try_withdraw(1.5)
    budget.refund(1.0)
    assert budget.try_withdraw(2.0)
    budget.refund(-50.0)  # a slice long gone: nothing to give back
    assert not budget.try_withdraw(2.5)


def capped_pair() -> poise.LoadBalancer:
    """Endpoints a and b, one call in flight each, and a budget of one retry."""
    return poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint("a"), poise.Endpoint("b")]),
        policy=poise.RoundRobin(),
        max_in_flight=1,
        retry_budget=ONE_RETRY,
    )


def failing_on(*ids: str) -> object:
    async def call(endpoint: poise.Endpoint) -> str:
        if endpoint.id in ids:
            raise ConnectionRefusedError(endpoint.id)
        return endpoint.id

    return call


async def test_a_retry_that_finds_no_endpoint_leaves_the_budget_as_it_was() -> None:
    lb = capped_pair()
    async with lb:
        held = lb.acquire(exclude=["a"])  # b is full: a retry can go nowhere
        with pytest.raises(ConnectionRefusedError):
            await lb.call(failing_on("a"))  # type: ignore[arg-type]
        held.succeed()
        assert lb.retries_denied == 0
        with pytest.raises(ConnectionRefusedError):  # the one retry the budget allows is still there
            await lb.call(failing_on("a", "b"))  # type: ignore[arg-type]
        assert lb.retries_denied == 0


async def test_a_hedge_that_cannot_go_leaves_the_budget_as_it_was() -> None:
    lb = capped_pair()

    async def slow(endpoint: poise.Endpoint) -> str:
        await anyio.sleep(0.2)
        return endpoint.id

    async with lb:
        async with lb.acquire():  # one endpoint full: the hedge finds nothing
            await lb.call(slow, hedge=poise.Hedge(delay=0.05, max_extra_load=1.0))
        assert lb.statistics().pool.hedges_sent == 0
        with pytest.raises(ConnectionRefusedError):
            await lb.call(failing_on("a", "b"))  # type: ignore[arg-type]
        assert lb.retries_denied == 0  # its retry went out: the budget still had it
