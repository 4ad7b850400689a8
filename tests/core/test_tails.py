"""The pure tail-cutting core: gRPC's backoff formula, the hedge state's quantile and allowance, ``may_hedge``."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import poise_py as poise
from poise_py._core._budget import Budget
from poise_py._core._retry import RetryLoop
from poise_py._core._tails import BURST, RESORT_EVERY, SAMPLES, HedgeState, quantile


@pytest.mark.parametrize(
    ("retry", "ceiling"),
    [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (60, 1.0), (10_000, 1.0)],
)
def test_the_backoff_ceiling_is_grpcs_formula(retry: int, ceiling: float) -> None:
    # gRFC A6: random(0, min(initial_backoff * backoff_multiplier ** (n - 1), max_backoff))
    backoff = poise.RetryBackoff(initial=0.1, multiplier=2.0, maximum=1.0)
    assert backoff.ceiling(retry) == pytest.approx(ceiling)


@given(st.integers(1, 200), st.floats(0.0, 1.0, exclude_max=True))
def test_a_jittered_delay_is_a_uniform_share_of_the_ceiling(retry: int, unit: float) -> None:
    backoff = poise.RetryBackoff(initial=0.05, multiplier=1.6, maximum=2.0)
    delay = backoff.delay(retry, unit)
    assert delay == pytest.approx(unit * min(0.05 * 1.6 ** (retry - 1), 2.0))
    assert 0.0 <= delay < 2.0 or math.isclose(delay, 2.0)


def test_a_pushback_replaces_the_jittered_delay() -> None:
    backoff = poise.RetryBackoff(initial=0.05, maximum=0.1)
    assert backoff.delay(1, 0.5, pushback=7.0) == 7.0
    assert backoff.delay(3, 0.9, pushback=0.0) == 0.0
    with pytest.raises(ValueError, match="from 1"):
        backoff.ceiling(0)


def test_a_multiplier_of_one_keeps_the_ceiling_at_initial() -> None:
    assert poise.RetryBackoff(initial=0.3, multiplier=1.0, maximum=5.0).ceiling(50) == pytest.approx(0.3)


def test_quantile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert quantile(values, 0.95) == 95.0
    assert quantile(values, 0.951) == 96.0
    assert quantile(values, 0.001) == 1.0
    assert quantile([3.0], 0.5) == 3.0
    with pytest.raises(ValueError, match="no values"):
        quantile([], 0.5)


def test_a_fixed_delay_is_the_delay_and_takes_no_samples() -> None:
    state = HedgeState(poise.Hedge(delay=0.25))
    state.observe(9.0)
    assert state.delay() == 0.25
    assert state.measured() == 0


def test_a_quantile_delay_is_initial_until_min_samples_then_measured_and_refreshed() -> None:
    state = HedgeState(poise.Hedge.quantile(0.5, min_samples=10, initial=0.7))
    for v in range(9):
        state.observe(float(v))
    assert state.delay() == 0.7
    state.observe(9.0)  # the tenth: the quantile is read at once
    assert state.delay() == 4.0  # nearest rank 5 of 0..9
    for _ in range(RESORT_EVERY - 1):
        state.observe(100.0)
    assert state.delay() == 4.0  # read again only every RESORT_EVERY samples
    state.observe(100.0)
    assert state.delay() == 100.0


def test_the_samples_are_the_most_recent_ones() -> None:
    state = HedgeState(poise.Hedge.quantile(0.5, min_samples=10))
    for _ in range(SAMPLES):
        state.observe(50.0)
    for _ in range(SAMPLES):
        state.observe(1.0)
    assert state.measured() == SAMPLES
    assert state.delay() == 1.0


def test_bad_latencies_are_not_samples() -> None:
    state = HedgeState(poise.Hedge.quantile(0.5, min_samples=1))
    for bad in (-1.0, math.nan, math.inf):
        state.observe(bad)
    assert state.measured() == 0
    assert state.delay() is None


@given(st.lists(st.booleans(), max_size=400), st.sampled_from([0.01, 0.02, 0.1, 0.5]))
def test_hedges_never_exceed_one_plus_max_extra_load_of_requests(wants: list[bool], ratio: float) -> None:
    state = HedgeState(poise.Hedge(delay=0.01, max_extra_load=ratio))
    for want in wants:
        state.started()
        if want and state.may_hedge():
            state.spend()
    assert state.sent <= 1 + ratio * state.requests + 1e-9


def test_an_idle_call_site_saves_at_most_a_burst() -> None:
    state = HedgeState(poise.Hedge(delay=0.01, max_extra_load=1.0))
    for _ in range(1000):
        state.started()
    sent = 0
    while state.may_hedge():
        state.spend()
        sent += 1
    assert sent == BURST


def test_may_hedge_needs_an_attempt_left_an_untried_endpoint_and_the_budget() -> None:
    budget = Budget(poise.RetryBudget(percent=0.0, min_per_second=0.1, ttl=10.0))  # one withdrawal
    loop = RetryLoop(budget, 3)
    assert not loop.may_hedge(0.0)  # no attempt in flight yet
    loop.start(0.0)
    loop.attempt("a")
    assert not loop.may_hedge(0.0, pool_size=1)  # every endpoint tried
    assert loop.may_hedge(0.0, pool_size=3)
    loop.attempt("b")
    assert not loop.may_hedge(0.0, pool_size=3)  # the budget is spent
    assert budget.denied == 1
    loop.attempt("c")
    assert not loop.may_hedge(0.0, pool_size=9)  # no attempt left


def test_a_quantiles_initial_delay_may_be_zero_as_a_fixed_delay_may() -> None:
    assert poise.Quantile(q=0.9, initial=0).initial == 0
    assert poise.Hedge(delay=0).delay == 0.0
    with pytest.raises(poise.ConfigError) as info:
        poise.Quantile(q=0.9, initial=-1)
    assert info.value.knob == "Quantile.initial"
