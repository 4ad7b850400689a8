"""Load reports in the simulator: backends report ORCA load, WeightedByLoad turns it into shares.

The goal (issue 40): in ``heterogeneous-pool`` with load reports, each endpoint's share of calls
converges to its share of capacity within 5% within three weight updates, and p99 is no worse
than PowerOfTwoChoices'.
"""

from __future__ import annotations

import functools
import math

import attrs
import pytest

import poise_py as poise
from poise_py import sim
from poise_py.sim._meter import LoadMeter

LOAD_REPORTS = "poise_py + load reports"
DEFAULT = "poise_py default"


@functools.cache
def heterogeneous(configuration: str, *, seed: int | None = None, unweighted: bool = False) -> sim.RunResult:
    scenario = sim.load_scenario("heterogeneous-pool")
    if seed is not None:
        scenario = attrs.evolve(scenario, seed=seed)
    if unweighted:  # the operator does not know the sizes
        scenario = attrs.evolve(scenario, endpoints=tuple(attrs.evolve(m, weight=1) for m in scenario.endpoints))
    chosen = next(c for c in scenario.all_configurations() if c.name == configuration)
    return sim.run_configuration(scenario, chosen)


def capacity_shares() -> list[float]:
    models = sim.load_scenario("heterogeneous-pool").endpoints
    total = sum(m.capacity or 0 for m in models)
    return [(m.capacity or 0) / total for m in models]


def shares_from(result: sim.RunResult, start: float) -> list[float]:
    """Each endpoint's share of the calls made from ``start`` to the end of the run."""
    first = next(s for s in result.timeline if s.at >= start)
    calls = [end - begin for begin, end in zip(first.calls, result.timeline[-1].calls, strict=True)]
    return [c / sum(calls) for c in calls]


def test_the_scenarios_backends_report_load_and_the_configuration_weighs_by_it() -> None:
    scenario = sim.load_scenario("heterogeneous-pool")
    assert all(m.reports_load for m in scenario.endpoints)
    chosen = next(c for c in scenario.all_configurations() if c.name == LOAD_REPORTS)
    assert chosen.policy == poise.WeightedByLoad(blackout_period=0.5)


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_each_endpoints_share_converges_to_its_share_of_capacity_within_three_weight_updates(seed: int | None) -> None:
    result = heterogeneous(LOAD_REPORTS, seed=seed)
    policy = poise.WeightedByLoad(blackout_period=0.5)
    converged = policy.blackout_period + 3 * policy.weight_update_period
    for share, capacity in zip(shares_from(result, converged), capacity_shares(), strict=True):
        assert share == pytest.approx(capacity, rel=0.05)


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_its_p99_is_no_worse_than_power_of_two_choices_and_it_serves_as_much(seed: int | None) -> None:
    reports = heterogeneous(LOAD_REPORTS, seed=seed)
    default = heterogeneous(DEFAULT, seed=seed)
    assert reports.all_latencies_p99 is not None
    assert default.all_latencies_p99 is not None
    assert reports.all_latencies_p99 <= default.all_latencies_p99  # of every request, timeouts included
    assert reports.success_rate >= default.success_rate


def test_without_the_operators_weights_load_reports_still_find_the_sizes() -> None:
    # PowerOfTwoChoices unweighted sends the small backends more than they can serve in time.
    reports = heterogeneous(LOAD_REPORTS, unweighted=True)
    default = heterogeneous(DEFAULT, unweighted=True)
    assert reports.all_latencies_p99 is not None
    assert default.all_latencies_p99 is not None
    assert reports.all_latencies_p99 < 0.7 * default.all_latencies_p99


def test_grpcs_default_blackout_costs_this_pool_its_first_seconds() -> None:
    # Said plainly: with gRPC's 10 s blackout the pool is round robin while every backend is
    # new, and the small backends queue past the client's deadline.
    scenario = sim.load_scenario("heterogeneous-pool")
    chosen = next(c for c in scenario.all_configurations() if c.name == LOAD_REPORTS)
    grpc_default = sim.run_configuration(scenario, attrs.evolve(chosen, policy=poise.WeightedByLoad()))
    assert grpc_default.success_rate < 0.97 < heterogeneous(LOAD_REPORTS).success_rate


# -- the meter --------------------------------------------------------------------------------


def test_the_meter_averages_utilization_over_time() -> None:
    meter = LoadMeter(window=1.0)
    meter.busy(0.0, 4)
    report = meter.report(1.0, capacity=8)
    assert report.cpu_utilization == pytest.approx(0.5 * (1 - math.exp(-1.0)))
    assert meter.report(50.0, capacity=8).cpu_utilization == pytest.approx(0.5)


def test_the_meter_measures_answers_and_errors_per_second() -> None:
    meter = LoadMeter(window=1.0)
    for i in range(2000):  # 100 answers a second for 20 s, one in ten an error
        meter.answered(i * 0.01, error=i % 10 == 0)
    report = meter.report(20.0, capacity=1)
    assert report.qps == pytest.approx(100, rel=0.02)
    assert report.eps == pytest.approx(10, rel=0.1)


def test_an_endpoint_without_a_capacity_cannot_report_load() -> None:
    with pytest.raises(poise.ConfigError, match="reports_load"):
        sim.parse_scenario({"name": "x", "endpoints": [{"id": "a", "reports_load": True}]})


def test_a_configurations_policy_takes_its_knobs_and_refuses_a_bad_one() -> None:
    data = {
        "name": "x",
        "endpoints": [{"id": "a", "capacity": 2, "reports_load": True}],
        "configurations": [
            {"name": "w", "policy": "weighted_by_load", "policy_options": {"weight_update_period": 0.5}}
        ],
    }
    chosen = sim.parse_scenario(data).configurations[0]
    assert chosen.policy == poise.WeightedByLoad(weight_update_period=0.5)
    data["configurations"][0]["policy_options"] = {"weight_update_period": 0}  # type: ignore[index]
    with pytest.raises(poise.ConfigError, match="weight_update_period"):
        sim.parse_scenario(data)
