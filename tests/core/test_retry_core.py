"""The pure retry decision shared by ``LoadBalancer.call``, the httpx and gRPC transports and the simulator."""

from __future__ import annotations

import pytest

import poise_py as poise
from poise_py._core._budget import Budget
from poise_py._core._retry import AfterFault, RetryLoop


def budget(percent: float = 0.0, min_per_second: float = 0.0) -> Budget:
    return Budget(poise.RetryBudget(percent=percent, min_per_second=min_per_second, ttl=10.0))


def test_a_caller_fault_ends_the_request_without_asking_the_budget() -> None:
    shared = budget(min_per_second=0.1)  # one retry in 10 s
    loop = RetryLoop(shared, 3)
    loop.start(0.0)
    loop.attempt("a")
    assert loop.after_fault(poise.Fault.CALLER, 0.0) is AfterFault.NOT_RETRYABLE
    assert shared.balance(0.0) == pytest.approx(1.0)


def test_the_last_attempt_never_spends_budget() -> None:
    shared = budget(min_per_second=1.0)
    loop = RetryLoop(shared, 2)
    loop.start(0.0)
    loop.attempt("a")
    assert loop.after_fault(poise.Fault.SUSPECT, 0.0) is AfterFault.RETRY
    loop.attempt("b")
    before = shared.balance(0.0)
    assert loop.after_fault(poise.Fault.TRANSIENT, 0.0) is AfterFault.ATTEMPTS_SPENT
    assert shared.balance(0.0) == before
    assert loop.exclude == ["a", "b"]


def test_a_spent_budget_denies_the_retry() -> None:
    loop = RetryLoop(budget(), 3)
    loop.start(0.0)
    loop.attempt("a")
    assert loop.after_fault(poise.Fault.FATAL, 0.0) is AfterFault.BUDGET_SPENT


def test_attempts_below_one_are_a_config_error() -> None:
    with pytest.raises(poise.ConfigError, match="attempts"):
        RetryLoop(budget(), 0)
    with pytest.raises(poise.ConfigError, match="attempts"):
        RetryLoop(budget(), True)


def test_a_refused_retry_is_counted_by_the_budget_and_a_granted_one_is_not() -> None:
    shared = budget(min_per_second=0.1)  # one retry in 10 s
    first = RetryLoop(shared, 3)
    first.start(0.0)
    first.attempt("a")
    assert first.after_fault(poise.Fault.SUSPECT, 0.0) is AfterFault.RETRY
    assert shared.denied == 0
    second = RetryLoop(shared, 3)
    second.start(0.0)
    second.attempt("a")
    assert second.after_fault(poise.Fault.SUSPECT, 0.0) is AfterFault.BUDGET_SPENT
    assert shared.denied == 1


def test_a_passed_deadline_ends_the_request_without_asking_the_budget() -> None:
    shared = budget(min_per_second=1.0)
    loop = RetryLoop(shared, 3)
    loop.start(0.0)
    loop.attempt("a")
    before = shared.balance(0.0)
    assert loop.after_fault(poise.Fault.TRANSIENT, 0.0, time_left=0.0) is AfterFault.DEADLINE_PASSED
    assert shared.balance(0.0) == before
    assert loop.after_fault(poise.Fault.TRANSIENT, 0.0, time_left=0.5) is AfterFault.RETRY
    assert shared.balance(0.0) == before - 1


def test_a_pool_whose_every_endpoint_was_tried_ends_the_request_without_asking_the_budget() -> None:
    shared = budget()  # spent: a denial would be counted
    loop = RetryLoop(shared, 3)
    loop.start(0.0)
    loop.attempt("a")
    loop.attempt("b")
    assert loop.after_fault(poise.Fault.SUSPECT, 0.0, pool_size=2) is AfterFault.POOL_SPENT
    assert shared.denied == 0
    assert loop.after_fault(poise.Fault.SUSPECT, 0.0, pool_size=3) is AfterFault.BUDGET_SPENT
    assert shared.denied == 1


def test_the_checks_come_in_the_documented_order() -> None:
    # A CALLER fault wins over every other end; then attempts, deadline, pool, budget.
    loop = RetryLoop(budget(), 1)
    loop.start(0.0)
    loop.attempt("a")
    assert loop.after_fault(poise.Fault.CALLER, 0.0, pool_size=1, time_left=0.0) is AfterFault.NOT_RETRYABLE
    assert loop.after_fault(poise.Fault.FATAL, 0.0, pool_size=1, time_left=0.0) is AfterFault.ATTEMPTS_SPENT
    loop = RetryLoop(budget(), 3)
    loop.start(0.0)
    loop.attempt("a")
    assert loop.after_fault(poise.Fault.FATAL, 0.0, pool_size=1, time_left=-1.0) is AfterFault.DEADLINE_PASSED
    assert loop.after_fault(poise.Fault.FATAL, 0.0, pool_size=1) is AfterFault.POOL_SPENT
    assert loop.after_fault(poise.Fault.FATAL, 0.0, pool_size=2) is AfterFault.BUDGET_SPENT
