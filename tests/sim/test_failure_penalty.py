"""The failure penalty's goal in the simulator: an endpoint failing fast no longer attracts traffic.

Six alike HTTP backends (8 calls at once, about 100 ms each) at 240 requests a second; one of
them answers 503 in a millisecond to half its calls for the whole run. The circuit is set never
to eject, so the shares are the policy's own. Its healthy share is one sixth. Without a penalty,
PowerOfTwoChoices sees it as the emptiest endpoint and PeakEwma as the fastest, and its share
rises above that; with a one-second penalty (PeakEwma's default; PowerOfTwoChoices' is off) it
falls below it.
"""

from __future__ import annotations

import functools

import pytest

import poise_py as poise
from poise_py import sim

HEALTHY_SHARE = 1 / 6
NEVER_EJECT = poise.CircuitPolicy(consecutive_failures=1_000_000, consecutive_transient_failures=None)
POLICIES = {
    "PowerOfTwoChoices": poise.PowerOfTwoChoices,
    "PeakEwma": poise.PeakEwma,
}


def fast_failures() -> sim.Scenario:
    return sim.parse_scenario(
        {
            "name": "fast-failures",
            "seed": 5151,
            "client": {"protocol": "http", "classifier": "http"},
            "traffic": {"rps": 240, "duration": 60, "timeout": 1.0, "attempts": 2},
            "endpoints": [
                {"id": "e", "count": 5, "capacity": 8, "latency": {"median": 0.1, "p99": 0.2}},
                {
                    "id": "f",
                    "capacity": 8,
                    "latency": {"median": 0.1, "p99": 0.2},
                    "phases": [{"start": 0, "error_rate": 0.5, "http": 503, "error_latency": 0.001}],
                },
            ],
        }
    )


@functools.cache
def share_of_the_failing_endpoint(policy: str, penalty: float) -> tuple[float, float]:
    """The failing endpoint's share of all calls, and the share of requests that succeeded."""
    configuration = sim.Configuration(
        name=policy, policy=POLICIES[policy](failure_penalty=penalty), circuit=NEVER_EJECT
    )
    result = sim.run_configuration(fast_failures(), configuration)
    calls = dict(zip(result.endpoint_ids, result.endpoint_calls, strict=True))
    return calls["f"] / sum(calls.values()), result.successes / result.requests


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_without_a_penalty_an_endpoint_failing_fast_draws_more_than_its_healthy_share(policy: str) -> None:
    share, _ = share_of_the_failing_endpoint(policy, 0.0)
    assert share > HEALTHY_SHARE * 1.15


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_with_a_one_second_penalty_its_share_falls_to_at_most_its_healthy_share(policy: str) -> None:
    share, success = share_of_the_failing_endpoint(policy, 1.0)
    assert share <= HEALTHY_SHARE
    assert share > 0  # steered away, not shut out: it still serves half its calls
    assert success >= share_of_the_failing_endpoint(policy, 0.0)[1]


def test_the_simulator_answers_a_phases_errors_in_their_own_latency() -> None:
    phase = fast_failures().endpoints[-1].phases[0]
    assert phase.error_latency == 0.001
    with pytest.raises(poise.ConfigError, match="error_latency"):
        sim.parse_scenario(
            {
                "name": "bad",
                "endpoints": [{"id": "x", "phases": [{"error_rate": 0.5, "http": 503, "error_latency": 0}]}],
            }
        )


def test_peak_ewmas_default_penalty_is_the_one_second_the_goal_is_measured_with() -> None:
    assert poise.PeakEwma().failure_penalty == 1.0
