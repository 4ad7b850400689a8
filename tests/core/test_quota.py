"""A provider's quota in the pool: requests left cap the calls in flight; a spent quota rests the endpoint until it resets."""

from __future__ import annotations

import pytest

import poise_py as poise
from poise_py import CircuitState, IneligibleReason
from poise_py._core._limits import UNLIMITED
from poise_py._core._pool import QUOTA_REST, Pool
from tests.support.routing import make_pool


def pool_of(n: int = 2, **kwargs: object) -> Pool:
    return make_pool(poise.RoundRobin(), [poise.Endpoint(f"e{i}", **kwargs) for i in range(n)])  # type: ignore[arg-type]


def take(pool: Pool, endpoint_id: str, now: float = 0.0) -> None:
    """Select ``endpoint_id`` (excluding the others) and leave the call in flight."""
    others = [i for i in pool.members if i != endpoint_id]
    state, _, _, _ = pool.select(now, exclude=others)
    assert state.endpoint.id == endpoint_id


def pick(pool: Pool, now: float = 0.0) -> str:
    """Select and succeed at once (nothing stays in flight): the endpoint's id."""
    state, ticket, _, _ = pool.select(now)
    pool.succeed(state, ticket, now, now)
    return state.endpoint.id


def test_the_requests_left_cap_the_calls_in_flight() -> None:
    pool = pool_of()
    state = pool.members["e0"]
    pool.report_quota(state, 1.0, remaining=2, resets_in=None)
    control = pool.control(state)
    assert control is not None
    assert control.quota == 2
    assert control.limit == 2
    take(pool, "e0", 1.0)
    take(pool, "e0", 1.0)
    assert {pool.select(1.0)[0].endpoint.id for _ in range(4)} == {"e1"}  # e0 is at its quota's limit


def test_a_new_answer_sets_the_limit_again() -> None:
    pool = pool_of()
    state = pool.members["e0"]
    pool.report_quota(state, 1.0, remaining=5, resets_in=None)
    pool.report_quota(state, 2.0, remaining=3, resets_in=None)
    control = pool.control(state)
    assert control is not None
    assert control.limit == 3


def test_a_spent_quota_rests_the_endpoint_without_a_strike_until_it_resets() -> None:
    pool = pool_of()
    state = pool.members["e0"]
    pool.report_quota(state, 10.0, remaining=0, resets_in=30.0)
    assert pool.refusal(state) is IneligibleReason.QUOTA
    assert pool.resting_until(state) == 40.0
    assert state.circuit.state is CircuitState.CLOSED
    assert state.circuit.consecutive_failures == 0
    assert pool.next_deadline() == 40.0
    assert {pool.select(20.0)[0].endpoint.id for _ in range(4)} == {"e1"}
    pool.handle_timer(40.0)
    assert pool.refusal(state) is None
    assert pool.resting_until(state) is None
    assert state.circuit.state is CircuitState.CLOSED  # back without a probe
    control = pool.control(state)
    assert control is not None
    assert control.quota == UNLIMITED  # until its provider says more
    assert "e0" in {pool.select(41.0)[0].endpoint.id for _ in range(4)}


def test_a_lone_resting_endpoint_makes_the_selection_say_quota() -> None:
    pool = pool_of(1)
    pool.report_quota(pool.members["e0"], 0.0, remaining=0, resets_in=5.0)
    with pytest.raises(poise.NoEligibleEndpoints) as caught:
        pool.select(1.0)
    assert caught.value.reasons[IneligibleReason.QUOTA] == 1


def test_a_spent_quota_without_a_reset_time_rests_for_the_default() -> None:
    pool = pool_of()
    state = pool.members["e0"]
    pool.report_quota(state, 3.0, remaining=0, resets_in=None)
    assert pool.resting_until(state) == 3.0 + QUOTA_REST


def test_a_later_answer_moves_the_rest_and_the_earlier_end_does_nothing() -> None:
    pool = pool_of()
    state = pool.members["e0"]
    pool.report_quota(state, 0.0, remaining=0, resets_in=10.0)
    pool.report_quota(state, 1.0, remaining=0, resets_in=20.0)  # a late answer: the reset is later
    pool.handle_timer(10.0)
    assert pool.refusal(state) is IneligibleReason.QUOTA
    assert pool.next_deadline() == 21.0
    pool.handle_timer(21.0)
    assert pool.refusal(state) is None


def test_an_endpoint_that_leaves_takes_its_rest_with_it() -> None:
    pool = pool_of(3)
    state = pool.members["e0"]
    pool.report_quota(state, 0.0, remaining=0, resets_in=10.0)
    pool.apply(1.0, removed=["e0"])
    assert pool.resting_until(state) is None
    assert pool.next_deadline() is None
    pool.handle_timer(10.0)
    pool.report_quota(state, 11.0, remaining=0, resets_in=10.0)  # a late answer for it: dropped
    assert pool.resting_until(state) is None


def test_a_cap_and_the_quota_take_the_lesser() -> None:
    pool = pool_of(metadata={"max_in_flight": 4})
    state = pool.members["e0"]
    control = pool.control(state)
    assert control is not None
    pool.report_quota(state, 0.0, remaining=10, resets_in=None)
    assert control.limit == 4
    pool.report_quota(state, 0.0, remaining=2, resets_in=None)
    assert control.limit == 2
    control.recap(1)
    assert control.limit == 1


def test_an_endpoints_weight_falls_with_its_quotas_share() -> None:
    pool = pool_of(2)
    state = pool.members["e0"]
    pool.report_quota(state, 0.0, remaining=25, resets_in=None, share=0.25)
    assert pool.ramp_factor(state, 0.0) == 0.25
    picks = [pick(pool) for _ in range(4000)]
    share = picks.count("e0") / len(picks)
    assert share == pytest.approx(0.25 / 1.25, abs=0.03)  # round robin, e0 kept a quarter of its turns


def test_a_pick_thinned_by_its_quota_is_taken_again_in_its_own_tier_never_a_fallback_tier() -> None:
    eps = [poise.Endpoint("p", tier=0), poise.Endpoint("fallback", tier=1)]
    pool = make_pool(poise.RoundRobin(), eps)
    pool.report_quota(pool.members["p"], 0.0, remaining=50, resets_in=None, share=0.1)
    assert {pick(pool) for _ in range(200)} == {"p"}  # the last resort is itself


def test_the_quotas_share_comes_back_whole_after_a_rest() -> None:
    pool = pool_of(2)
    state = pool.members["e0"]
    pool.report_quota(state, 0.0, remaining=5, resets_in=None, share=0.05)
    pool.report_quota(state, 1.0, remaining=0, resets_in=10.0)
    pool.handle_timer(11.0)
    assert pool.ramp_factor(state, 11.0) == 1.0


def test_a_readiness_check_passing_during_a_rest_leaves_it_resting() -> None:
    pool = pool_of(2)
    state = pool.members["e0"]
    pool.report_quota(state, 0.0, remaining=0, resets_in=10.0)
    pool.set_readiness(state, IneligibleReason.QUARANTINED)
    assert pool.refusal(state) is IneligibleReason.QUARANTINED  # its own reason wins
    pool.set_readiness(state, None)
    assert pool.refusal(state) is IneligibleReason.QUOTA
    pool.handle_timer(10.0)
    assert pool.refusal(state) is None


def test_a_resting_endpoint_stays_out_of_a_panicking_tier() -> None:
    eps = [poise.Endpoint(f"e{i}") for i in range(4)]
    pool = make_pool(poise.RoundRobin(), eps, panic=poise.Panic(threshold=0.9))
    for state in list(pool.members.values())[1:]:
        pool.set_admin(state.endpoint.id, poise.AdminStatus.FORCED_UNHEALTHY)
    pool.report_quota(pool.members["e0"], 0.0, remaining=0, resets_in=10.0)
    assert "e0" not in {pick(pool) for _ in range(20)}  # panic spreads over the others, never the rested one


def test_a_tokens_only_quota_sets_its_share_and_no_limit() -> None:
    pool = pool_of(2)
    state = pool.members["e0"]
    pool.report_quota(state, 0.0, remaining=None, resets_in=None, share=0.25)
    control = pool.control(state)
    assert control is not None
    assert (control.quota, control.limit) == (UNLIMITED, UNLIMITED)
    assert pool.ramp_factor(state, 0.0) == 0.25


def test_a_rest_is_no_longer_than_the_longest_retry_after_honoured() -> None:
    pool = pool_of()
    state = pool.members["e0"]
    pool.report_quota(state, 5.0, remaining=0, resets_in=3.6e18)  # "999999999999999h"
    assert pool.resting_until(state) == 5.0 + poise.CircuitPolicy().max_retry_after


def test_an_answer_from_before_the_reset_does_not_outlive_it() -> None:
    pool = pool_of(2)
    state = pool.members["e0"]
    pool.report_quota(state, 0.0, remaining=0, resets_in=5.0)
    pool.report_quota(state, 1.0, remaining=1, resets_in=None, share=0.01)  # a call started before the rest
    pool.handle_timer(5.0)
    control = pool.control(state)
    assert control is not None
    assert (control.quota, control.limit) == (UNLIMITED, UNLIMITED)  # no cap until its provider says more
    assert pool.ramp_factor(state, 5.0) == 1.0
