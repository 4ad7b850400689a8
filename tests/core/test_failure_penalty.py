"""Failure penalties: a failed call costs PowerOfTwoChoices load and PeakEwma latency (Linkerd's load biaser)."""

from __future__ import annotations

import pytest

import poise_py as poise
from poise_py import Fault
from poise_py._core._pool import Pool
from tests.support.routing import make_pool

NO_EJECTION = poise.CircuitPolicy(consecutive_failures=1_000_000, consecutive_transient_failures=None)


def pool_of(policy: poise.Policy, n: int = 2) -> Pool:
    return make_pool(policy, [poise.Endpoint(f"e{i}") for i in range(n)], circuit=NO_EJECTION)


def fail_on(
    pool: Pool, endpoint_id: str, now: float, fault: Fault = Fault.TRANSIENT, started: float | None = None
) -> None:
    """A call to ``endpoint_id`` that fails at ``now``, started at ``started`` (default: 1 ms earlier)."""
    started = now - 0.001 if started is None else started
    others = [i for i in pool.members if i != endpoint_id]
    state, ticket, _, _ = pool.select(started, exclude=others)
    assert state.endpoint.id == endpoint_id
    pool.complete(state, ticket, fault, now, latency=now - started)


def pick(pool: Pool, now: float) -> str:
    """Select and succeed at once (nothing stays in flight): the endpoint's id."""
    state, ticket, _, _ = pool.select(now)
    pool.succeed(state, ticket, now, now)
    return state.endpoint.id


def test_a_failed_call_stays_counted_in_its_endpoints_load_for_the_penalty() -> None:
    pool = pool_of(poise.PowerOfTwoChoices(failure_penalty=2.001))
    fail_on(pool, "e0", now=10.0)  # started at 9.999: held until 12.0
    state = pool.members["e0"]
    assert state.inflight == 0
    assert pool.held(state, 10.0) == 1
    assert pool.next_deadline() is None  # the timer has nothing to do: the next selection ends it
    assert pool.needs_now  # selections read the clock while a hold runs
    # Two candidates: P2C compares both, and the held failure makes e0 the busier one.
    assert {pick(pool, 11.0) for _ in range(20)} == {"e1"}
    assert pool.held(state, 12.0) == 0
    assert "e0" in {pick(pool, 12.0) for _ in range(20)}  # the selection at its end ended it


def test_held_failures_add_up_and_end_one_by_one() -> None:
    pool = pool_of(poise.PowerOfTwoChoices(failure_penalty=1.0))
    fail_on(pool, "e0", now=1.0, started=1.0)
    fail_on(pool, "e0", now=1.5, fault=Fault.SUSPECT, started=1.5)
    state = pool.members["e0"]
    assert pool.held(state, 1.5) == 2
    assert pool.held(state, 2.0) == 1
    assert pool.held(state, 2.5) == 0
    pick(pool, 2.0)
    assert pool.held(state, 2.0) == 1
    pick(pool, 2.5)
    assert pool.held(state, 2.5) == 0


def test_a_failure_slower_than_the_penalty_is_not_held() -> None:
    pool = pool_of(poise.PowerOfTwoChoices(failure_penalty=1.0))
    fail_on(pool, "e0", now=3.0, started=1.5)  # a timeout: it already cost more than the penalty
    assert pool.held(pool.members["e0"], 3.0) == 0


def test_a_failure_is_held_until_the_penalty_after_it_started() -> None:
    pool = pool_of(poise.PowerOfTwoChoices(failure_penalty=1.0))
    fail_on(pool, "e0", now=1.75, started=1.0)
    state = pool.members["e0"]
    assert pool.held(state, 1.99) == 1
    assert pool.held(state, 2.0) == 0


def test_the_penalty_is_off_by_default_and_on_it_times_every_call() -> None:
    assert poise.PowerOfTwoChoices().failure_penalty == 0.0
    assert not pool_of(poise.PowerOfTwoChoices()).times_calls
    assert pool_of(poise.PowerOfTwoChoices(failure_penalty=1.0)).times_calls
    assert poise.PeakEwma().failure_penalty == 1.0


@pytest.mark.parametrize("fault", [Fault.CALLER, Fault.FATAL, Fault.PERMANENT])
def test_only_failures_of_the_endpoints_work_are_held(fault: Fault) -> None:
    pool = pool_of(poise.PowerOfTwoChoices(failure_penalty=1.0))
    fail_on(pool, "e0", now=1.0, fault=fault)
    assert pool.held(pool.members["e0"], 1.0) == 0


def test_successes_and_cancellations_are_never_held() -> None:
    pool = pool_of(poise.PowerOfTwoChoices(failure_penalty=1.0))
    state, ticket, _, _ = pool.select(0.0)
    pool.succeed(state, ticket, 1.0, 0.0)
    state, ticket, _, _ = pool.select(0.0)
    pool.cancel(state, ticket)
    assert all(pool.held(s, 1.0) == 0 for s in pool.members.values())


def test_a_zero_penalty_holds_nothing() -> None:
    pool = pool_of(poise.PowerOfTwoChoices(failure_penalty=0.0))
    fail_on(pool, "e0", now=1.0)
    assert pool.held(pool.members["e0"], 1.0) == 0
    assert not pool.needs_now  # nor does it time the calls


def test_an_endpoint_that_leaves_takes_its_holds_with_it() -> None:
    pool = pool_of(poise.PowerOfTwoChoices(failure_penalty=5.0), n=3)
    fail_on(pool, "e0", now=1.0)
    state = pool.members["e0"]
    pool.apply(2.0, removed=["e0"])
    assert pool.held(state, 2.0) == 0
    pick(pool, 6.0)  # its hold's end passes harmlessly
    assert pool.held(state, 6.0) == 0


def test_the_weighted_least_request_rotation_counts_held_failures() -> None:
    eps = [poise.Endpoint("e0", weight=2), poise.Endpoint("e1", weight=2), poise.Endpoint("e2", weight=1)]
    pool = make_pool(poise.PowerOfTwoChoices(failure_penalty=60.0), eps, circuit=NO_EJECTION)
    for _ in range(5):
        fail_on(pool, "e0", now=1.0)
    picks = [pool.select(2.0)[0].endpoint.id for _ in range(30)]
    for state in pool.members.values():  # nothing completes: release what the picks took
        state.inflight = 0
    assert picks.count("e0") < picks.count("e1")


def test_peak_ewma_measures_a_fast_failure_as_the_penalty() -> None:
    pool = pool_of(poise.PeakEwma(failure_penalty=0.5))
    fail_on(pool, "e0", now=1.001, started=1.0)
    state = pool.members["e0"]
    assert state.ewma == pytest.approx(0.5)
    assert pool.held(state, 1.001) == 0  # a latency policy pays in latency, not in load


def test_peak_ewma_keeps_a_slow_failures_own_latency() -> None:
    pool = pool_of(poise.PeakEwma(failure_penalty=0.5))
    fail_on(pool, "e0", now=3.0, started=1.0)
    assert pool.members["e0"].ewma == pytest.approx(2.0)


def test_peak_ewma_without_a_penalty_measures_the_failure_as_it_was() -> None:
    pool = pool_of(poise.PeakEwma(failure_penalty=0.0))
    fail_on(pool, "e0", now=1.001, started=1.0)
    assert pool.members["e0"].ewma == pytest.approx(0.001)


def test_a_callers_fault_is_measured_as_it_was() -> None:
    pool = pool_of(poise.PeakEwma(failure_penalty=0.5))
    fail_on(pool, "e0", now=1.001, started=1.0, fault=Fault.CALLER)
    assert pool.members["e0"].ewma == pytest.approx(0.001)


@pytest.mark.parametrize("policy", [poise.PowerOfTwoChoices, poise.PeakEwma])
@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), 3601.0, "1"])
def test_a_bad_penalty_is_refused_naming_the_field(policy: type, value: object) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        policy(failure_penalty=value)
    assert f"{policy.__name__}.failure_penalty" in str(caught.value)
