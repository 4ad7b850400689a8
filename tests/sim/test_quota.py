"""Quota awareness in the simulator: providers say what is left on every answer, and the balancer listens.

The goal (issue 40), on ``llm-rate-limits``: after the first reset window no call reaches an
exhausted provider (zero 429s), the calls the providers take are at least 99% of their combined
quota, and no provider is ejected for answering a quota.
"""

from __future__ import annotations

import functools
import math

import pytest

from poise_py import sim
from poise_py.sim import _engine

DEFAULT = "poise_py default"
NAIVE = "naive round-robin"
PROVIDERS = ("provider-a", "provider-b")


@functools.cache
def llm(configuration: str, *, listening: bool = True) -> sim.RunResult:
    scenario = sim.load_scenario("llm-rate-limits")
    chosen = next(c for c in scenario.all_configurations() if c.name == configuration)
    if listening:
        return sim.run_configuration(scenario, chosen)
    with pytest.MonkeyPatch.context() as patch:  # the balancer before it read rate-limit headers
        patch.setattr(_engine.Engine, "_report_quota", lambda *args: None)
        return sim.run_configuration(scenario, chosen)


def quota_per_run() -> int:
    scenario = sim.load_scenario("llm-rate-limits")
    windows = 0
    total = 0
    for model in scenario.endpoints:
        if model.quota is not None:
            windows = math.floor(scenario.traffic.duration / model.quota.per)
            total += model.quota.requests * windows
    return total


def test_after_the_first_reset_no_call_reaches_an_exhausted_provider() -> None:
    result = llm(DEFAULT)
    first_reset = 60.0
    assert [t for t in result.throttled if t >= first_reset] == []
    assert result.throttled == ()  # every answer says what is left, so not even before it


def test_the_providers_take_at_least_99_percent_of_their_combined_quota() -> None:
    result = llm(DEFAULT)
    taken = dict(zip(result.endpoint_ids, result.endpoint_calls, strict=True))
    assert sum(taken[p] for p in PROVIDERS) >= 0.99 * quota_per_run()


def test_no_provider_is_ejected_for_answering_a_quota() -> None:
    result = llm(DEFAULT)
    assert not set(result.ejected) & set(PROVIDERS)


def test_before_the_balancer_listened_providers_answered_429s_and_were_ejected() -> None:
    deaf = llm(DEFAULT, listening=False)
    assert len([t for t in deaf.throttled if t >= 60.0]) > 0
    assert set(deaf.ejected) & set(PROVIDERS)
    assert llm(DEFAULT).success_rate > deaf.success_rate


def test_a_baseline_that_does_not_listen_keeps_hitting_the_spent_quota() -> None:
    assert len(llm(NAIVE).throttled) > 1000
