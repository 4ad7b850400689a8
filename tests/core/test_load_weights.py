"""WeightedByLoad: gRFC A58's weight formula, blackout, expiry and the earliest-deadline-first schedule."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

import poise_py as poise
from poise_py._core._load_signals import LoadSignal, fill_weights, load_weight
from poise_py._core._pickers import LoadWeightedPicker
from poise_py._core._pool import Pool
from tests.support.routing import make_pool

KNOBS = {"error_utilization_penalty": 1.0, "weight_expiration_period": 180.0}


# -- the formula (gRFC A58) -----------------------------------------------------------------


def test_the_weight_is_qps_over_utilization() -> None:
    assert load_weight(qps=100.0, eps=0.0, utilization=0.5, error_utilization_penalty=1.0) == 200.0


def test_errors_count_as_utilization_scaled_by_the_penalty() -> None:
    # 100 qps, 10 eps: eps / qps = 0.1 added to the utilization, times the penalty.
    assert load_weight(100.0, 10.0, 0.5, 1.0) == pytest.approx(100.0 / 0.6)
    assert load_weight(100.0, 10.0, 0.5, 2.0) == pytest.approx(100.0 / 0.7)
    assert load_weight(100.0, 10.0, 0.5, 0.0) == pytest.approx(200.0)


@pytest.mark.parametrize(("qps", "utilization"), [(0.0, 0.5), (100.0, 0.0), (0.0, 0.0)])
def test_a_report_without_qps_or_utilization_has_no_weight(qps: float, utilization: float) -> None:
    assert load_weight(qps, 1.0, utilization, 1.0) == 0.0


@given(
    qps=st.floats(0.001, 1e6),
    eps=st.floats(0.0, 1e6),
    utilization=st.floats(0.001, 100.0),
    penalty=st.floats(0.0, 100.0),
)
def test_the_weight_matches_the_published_formula(qps: float, eps: float, utilization: float, penalty: float) -> None:
    expected = qps / (utilization + (eps / qps) * penalty)
    assert load_weight(qps, eps, utilization, penalty) == pytest.approx(expected, rel=1e-9)


def test_unknown_weights_take_the_mean_of_the_known() -> None:
    assert fill_weights([2.0, 4.0, 0.0]) == [2.0, 4.0, 3.0]


@pytest.mark.parametrize("weights", [[0.0, 0.0, 0.0], [5.0, 0.0, 0.0], []])
def test_with_fewer_than_two_known_weights_every_endpoint_weighs_the_same(weights: list[float]) -> None:
    assert fill_weights(weights) == [1.0] * len(weights)


# -- blackout and expiry --------------------------------------------------------------------


def report(signal: LoadSignal, now: float, qps: float = 100.0, utilization: float = 0.5) -> None:
    signal.update(None, now, utilization=utilization, qps=qps, eps=0.0, **KNOBS)


def weight(signal: LoadSignal, now: float, blackout: float = 10.0) -> float:
    return signal.weight_at(now, blackout_period=blackout, weight_expiration_period=180.0)


def test_a_weight_is_used_only_after_the_blackout_period() -> None:
    signal = LoadSignal()
    report(signal, 0.0)
    report(signal, 5.0)
    assert weight(signal, 9.9) == 0.0
    assert weight(signal, 10.0) == 200.0
    assert weight(signal, 10.0, blackout=0.0) == 200.0


def test_a_weight_not_refreshed_for_the_expiration_period_is_dropped_and_the_next_blackout_starts_over() -> None:
    signal = LoadSignal()
    report(signal, 0.0)
    assert weight(signal, 179.0) == 200.0
    assert weight(signal, 180.0) == 0.0
    report(signal, 300.0, qps=50.0)
    assert weight(signal, 305.0) == 0.0  # a new blackout from 300
    assert weight(signal, 310.0) == 100.0


def test_a_report_without_a_weight_keeps_the_last_one_and_its_age() -> None:
    signal = LoadSignal()
    report(signal, 0.0)
    report(signal, 50.0, qps=0.0)
    assert signal.qps == 0.0  # what it said is kept (the snapshot shows it)
    assert weight(signal, 60.0) == 200.0
    assert weight(signal, 180.0) == 0.0  # expired from the last weight, at 0


# -- the schedule ---------------------------------------------------------------------------


def pool_of(n: int, **knobs: float) -> Pool:
    return make_pool(poise.WeightedByLoad(**knobs), [poise.Endpoint(f"e{i}") for i in range(n)])


def pick(pool: Pool, now: float) -> str:
    state, ticket, _, _ = pool.select(now)
    pool.succeed(state, ticket, now, now)
    return state.endpoint.id


def feed(pool: Pool, weights: dict[str, float], now: float) -> None:
    for endpoint_id, w in weights.items():
        pool.report_load(pool.members[endpoint_id], None, now, utilization=1.0, qps=w, eps=0.0)


def test_the_policy_makes_the_balancer_read_the_clock_on_every_pick() -> None:
    assert pool_of(2).times_calls


def test_before_any_weight_it_is_round_robin() -> None:
    pool = pool_of(3)
    counts = Counter(pick(pool, 1.0) for _ in range(300))
    assert counts == {"e0": 100, "e1": 100, "e2": 100}


def test_shares_follow_the_reported_weights_once_the_blackout_has_passed() -> None:
    pool = pool_of(3, blackout_period=10.0)
    feed(pool, {"e0": 100.0, "e1": 200.0, "e2": 700.0}, 0.0)
    counts = Counter(pick(pool, 11.0) for _ in range(1000))
    assert counts["e0"] == pytest.approx(100, abs=2)
    assert counts["e1"] == pytest.approx(200, abs=2)
    assert counts["e2"] == pytest.approx(700, abs=2)


def test_the_schedule_is_rebuilt_only_every_update_period() -> None:
    pool = pool_of(2, blackout_period=0.0, weight_update_period=1.0)
    feed(pool, {"e0": 100.0, "e1": 100.0}, 0.0)
    pick(pool, 0.0)  # built at 0 with equal weights
    feed(pool, {"e0": 900.0, "e1": 100.0}, 0.5)
    before = Counter(pick(pool, 0.5) for _ in range(100))
    after = Counter(pick(pool, 1.0) for _ in range(100))
    assert before["e0"] == pytest.approx(50, abs=1)
    assert after["e0"] == pytest.approx(90, abs=1)


def test_an_endpoint_without_a_usable_weight_gets_the_mean_of_the_others() -> None:
    pool = pool_of(3, blackout_period=0.0)
    feed(pool, {"e0": 100.0, "e1": 300.0}, 0.0)
    counts = Counter(pick(pool, 1.0) for _ in range(600))
    assert counts["e2"] == pytest.approx(200, abs=2)


def test_an_endpoint_that_stops_being_a_candidate_is_skipped_and_one_that_joins_is_scheduled() -> None:
    pool = pool_of(3, blackout_period=0.0)
    feed(pool, {"e0": 100.0, "e1": 100.0, "e2": 100.0}, 0.0)
    pick(pool, 1.0)
    pool.set_admin("e1", poise.AdminStatus.DISABLED)
    assert "e1" not in {pick(pool, 1.0) for _ in range(50)}
    pool.set_admin("e1", poise.AdminStatus.AUTO)
    pool.apply(1.0, added=[poise.Endpoint("e3")])
    counts = Counter(pick(pool, 1.0) for _ in range(400))
    assert set(counts) == {"e0", "e1", "e2", "e3"}
    assert min(counts.values()) >= 80


def test_a_pick_is_logarithmic_in_the_pool_size() -> None:
    # The schedule holds one entry per candidate (plus stale ones until the next rebuild):
    # a pick is one heap step, not a scan.
    pool = pool_of(1000, blackout_period=0.0)
    feed(pool, {f"e{i}": float(1 + i % 7) for i in range(1000)}, 0.0)
    pick(pool, 1.0)
    scope = pool.router.fast
    assert scope is not None
    picker = scope.picker
    assert isinstance(picker, LoadWeightedPicker)
    assert len(picker._heap) == 1000


def test_a_report_for_an_endpoint_that_left_is_dropped() -> None:
    pool = pool_of(2)
    state = pool.members["e0"]
    pool.apply(1.0, removed=["e0"])
    pool.report_load(state, None, 2.0, utilization=0.5, qps=10.0, eps=0.0)
    assert pool.signal(state) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("blackout_period", -1.0),
        ("weight_expiration_period", 0.0),
        ("weight_update_period", 0.01),
        ("error_utilization_penalty", math.nan),
        ("blackout_period", "10"),
    ],
)
def test_a_bad_knob_is_refused_naming_it(field: str, value: object) -> None:
    with pytest.raises(poise.ConfigError, match=f"WeightedByLoad.{field}"):
        poise.WeightedByLoad(**{field: value})  # type: ignore[arg-type]
