"""Hedged requests in the simulator: stragglers, the stragglers scenario's goals, and the race's bookkeeping."""

from __future__ import annotations

import functools
import json
from typing import Any

import attrs
import pytest

import poise_py as poise
from poise_py import sim

DEFAULT = "poise_py default"
HEDGED = "poise_py default + hedge"
ORACLE = "shortest-queue oracle"
HEDGE = poise.Hedge.quantile(0.99)
"""The goal's hedge: after the call site's measured p99 of successful attempts, which is about
one call's p98 (a straggler that was hedged is measured by its hedge, a normal call)."""


@functools.cache
def stragglers(configuration: str, *, straggler_rate: float | None = None) -> sim.RunResult:
    """One configuration of the built-in ``stragglers`` scenario, once per session (it is deterministic)."""
    scenario = sim.load_scenario("stragglers")
    if straggler_rate is not None:
        endpoints = tuple(
            attrs.evolve(m, latency=attrs.evolve(m.latency, straggler_rate=straggler_rate)) for m in scenario.endpoints
        )
        scenario = attrs.evolve(scenario, endpoints=endpoints)
    chosen = next(c for c in scenario.all_configurations() if c.name == configuration)
    return sim.run_configuration(scenario, chosen)


def pool(
    *,
    straggler_rate: float,
    hedge: poise.Hedge | None,
    rps: float = 200,
    duration: float = 30,
    capacity: int | None = 8,
    count: int = 4,
    attempts: int = 2,
    phases: list[dict[str, Any]] | None = None,
) -> tuple[sim.Scenario, sim.Configuration]:
    """A small pool of ``count`` alike endpoints whose calls straggle, and the default configuration, hedged."""
    endpoint: dict[str, Any] = {
        "id": "e",
        "count": count,
        "latency": {"median": 0.02, "p99": 0.08, "straggler_rate": straggler_rate, "straggler_scale": 100},
    }
    if capacity is not None:
        endpoint["capacity"] = capacity
    if phases is not None:
        endpoint["phases"] = phases
    scenario = sim.parse_scenario(
        {
            "name": "pool",
            "seed": 17,
            "client": {"protocol": "http"},
            "traffic": {"rps": rps, "duration": duration, "timeout": 5.0, "attempts": attempts},
            "endpoints": [endpoint],
        }
    )
    default = scenario.all_configurations()[0]
    return scenario, attrs.evolve(default, name="hedged", hedge=hedge)


# -- stragglers in the latency model -------------------------------------------------------


def test_the_slowest_straggler_rate_of_draws_take_the_median_times_the_straggler_scale() -> None:
    latency = sim.Latency(median=0.02, p99=0.08, straggler_rate=0.01, straggler_scale=100)
    plain = sim.Latency(median=0.02, p99=0.08)
    assert latency.draw(0.99) == latency.draw(0.999999) == pytest.approx(2.0)
    assert latency.draw(0.989) == plain.draw(0.989) < 0.08
    assert latency.draw(0.5) == pytest.approx(0.02)
    assert plain.draw(0.999999) < 1.0  # no stragglers by default


@pytest.mark.parametrize(
    ("knobs", "field"),
    [
        ({"straggler_rate": 1.0}, "latency.straggler_rate"),
        ({"straggler_rate": -0.01}, "latency.straggler_rate"),
        ({"straggler_rate": float("nan")}, "latency.straggler_rate"),
        ({"straggler_scale": 0.5}, "latency.straggler_scale"),
        ({"straggler_scale": float("inf")}, "latency.straggler_scale"),
    ],
)
def test_a_bad_straggler_knob_is_a_config_error_naming_it(knobs: dict[str, float], field: str) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        sim.Latency(**knobs)
    assert caught.value.knob == field


def test_scenario_files_read_the_straggler_knobs_and_name_a_bad_one() -> None:
    scenario = sim.load_scenario("stragglers")
    assert {m.latency.straggler_rate for m in scenario.endpoints} == {0.01}
    assert {m.latency.straggler_scale for m in scenario.endpoints} == {100.0}
    bad = {
        "name": "t",
        "endpoints": [{"id": "a", "latency": {"median": 0.02, "p99": 0.08, "straggler_rate": 2}}],
    }
    with pytest.raises(poise.ConfigError, match=r"^endpoints\[0\]\.latency\.straggler_rate: "):
        sim.parse_scenario(bad)


@pytest.mark.parametrize(
    ("hedge", "message"),
    [
        ({"quantile": 0.99, "delay": 0.05}, r"^configurations\[0\]\.hedge: needs one of delay"),
        ({"max_attempts": 3}, r"^configurations\[0\]\.hedge: needs one of delay"),
        ({"quantile": 1.0}, r"^configurations\[0\]\.hedge\.quantile: "),
        ({"delay": 0.05, "max_attempts": 1}, r"^configurations\[0\]\.hedge\.max_attempts: "),
        ({"delay": 0.05, "max_extra_load": 0}, r"^configurations\[0\]\.hedge\.max_extra_load: "),
        ({"quantile": 0.9, "min_samples": 0}, r"^configurations\[0\]\.hedge\.min_samples: "),
        ({"delay": 0.05, "min_samples": 10}, r"^configurations\[0\]\.hedge\.min_samples: unknown key"),
    ],
)
def test_a_bad_hedge_table_is_a_config_error_naming_the_field(hedge: dict[str, Any], message: str) -> None:
    doc = {"name": "t", "endpoints": [{"id": "a"}], "configurations": [{"name": "c", "hedge": hedge}]}
    with pytest.raises(poise.ConfigError, match=message):
        sim.parse_scenario(doc)


def test_a_configurations_hedge_table_is_a_poise_hedge() -> None:
    doc: dict[str, Any] = {
        "name": "t",
        "endpoints": [{"id": "a"}],
        "configurations": [
            {"name": "q", "hedge": {"quantile": 0.95, "min_samples": 20, "initial": 0.1, "max_extra_load": 0.05}},
            {"name": "d", "hedge": {"delay": 0.05, "max_attempts": 3}},
        ],
    }
    q, d = sim.parse_scenario(doc).configurations
    assert q.hedge == poise.Hedge.quantile(0.95, min_samples=20, initial=0.1, max_extra_load=0.05)
    assert d.hedge == poise.Hedge(delay=0.05, max_attempts=3)
    scenario = sim.load_scenario("stragglers")
    assert [c.hedge for c in scenario.configurations if c.name == HEDGED] == [HEDGE]


# -- the stragglers scenario's goals (issue 39) ----------------------------------------------


def test_without_hedging_the_stragglers_p999_is_the_stragglers_latency() -> None:
    straggler = 0.9 * 0.02 * 100
    for name in (DEFAULT, ORACLE):
        result = stragglers(name)
        assert result.success_rate == 1.0, name
        assert result.all_latencies_p999 is not None
        assert result.all_latencies_p999 >= straggler, name
        assert result.hedges_sent == 0


def test_with_a_hedge_at_about_the_p98_the_stragglers_p999_is_at_most_twice_the_p99_of_a_pool_without_them() -> None:
    hedged = stragglers(HEDGED)
    clean = stragglers(DEFAULT, straggler_rate=0.0)
    assert hedged.requests >= 50_000  # 50 requests in the p99.9 tail at least
    assert hedged.success_rate == 1.0
    assert clean.all_latencies_p99 is not None
    assert hedged.all_latencies_p999 is not None
    assert hedged.all_latencies_p999 <= 2 * clean.all_latencies_p99
    # The load the hedges added: at most 2% of requests (nothing fails, so every extra call is a hedge).
    assert hedged.hedges_sent <= 0.02 * hedged.requests
    assert hedged.extra_load <= 0.02
    assert hedged.backend_calls == hedged.requests + hedged.hedges_sent
    # Most of the hedges that won cut a straggler short: about 1% of requests straggle.
    assert 0.009 * hedged.requests <= hedged.hedges_won <= hedged.hedges_sent


@pytest.mark.parametrize("max_extra_load", [0.01, 0.1, 0.5])
def test_hedging_never_sends_more_than_max_extra_load_times_the_requests(max_extra_load: float) -> None:
    # Two calls in five straggle and a hedge is due at once, and the retry budget is ample:
    # the allowance is all that holds the hedges back.
    scenario, hedged = pool(
        straggler_rate=0.4,
        capacity=None,
        hedge=poise.Hedge(delay=0.0, max_attempts=4, max_extra_load=max_extra_load),
    )
    hedged = attrs.evolve(hedged, retry_budget=poise.RetryBudget(percent=2.0))
    result = sim.run_configuration(scenario, hedged)
    bound = max_extra_load * result.requests
    # The allowance starts with one hedge (a quiet call site may hedge its first slow call).
    assert 0 < result.hedges_sent <= 1 + bound
    assert result.hedges_sent >= 0.99 * bound  # the allowance, not the budget, binds
    assert result.extra_load == pytest.approx(result.hedges_sent / result.requests)


# -- the race's bookkeeping -------------------------------------------------------------------


@pytest.mark.parametrize("capacity", [64, None])
def test_a_superseded_loser_leaves_its_endpoints_successes_faults_and_cancellations_untouched(
    capacity: int | None,
) -> None:
    scenario, hedged = pool(straggler_rate=0.2, capacity=capacity, hedge=poise.Hedge(delay=0.05, max_extra_load=1.0))
    result, lb = run_engine(scenario, hedged)
    assert result.success_rate == 1.0
    losers = result.hedges_sent  # two attempts at most, and every request won: one loser per hedge
    assert result.hedges_sent > result.hedges_won > 0  # both first attempts and hedges lost races
    assert result.backend_calls == result.requests + losers
    stats = lb.statistics()
    counters = stats.endpoints.values()
    # Every endpoint counts only the winners it served, as if no loser had been sent.
    assert sum(c.successes for c in counters) == stats.pool.successes == result.requests
    assert sum(c.cancellations for c in counters) == stats.pool.cancellations == 0
    assert all(n == 0 for c in counters for n in c.faults.values())
    for endpoint_id, calls in zip(result.endpoint_ids, result.endpoint_calls, strict=True):
        assert stats.endpoints[endpoint_id].successes < calls  # each endpoint served losers too
    assert stats.pool.hedges_sent == result.hedges_sent
    assert stats.pool.hedges_won == result.hedges_won
    assert stats.inflight == 0


def test_a_cancelled_loser_keeps_its_servers_slot_until_its_service_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    # A real server keeps working on a request its client dropped: the loser is served in full.
    served: list[tuple[bool, float]] = []
    serve = sim.Engine._served

    def watched(engine: sim.Engine, call: Any) -> None:
        served.append((call.done, call.service))  # done already: nobody waits for this answer
        serve(engine, call)

    monkeypatch.setattr(sim.Engine, "_served", watched)
    scenario, hedged = pool(
        straggler_rate=0.05, capacity=1, rps=2, count=6, duration=120, hedge=poise.Hedge(delay=0.1, max_extra_load=1.0)
    )
    result = sim.run_configuration(scenario, hedged)
    assert result.success_rate == 1.0
    assert len(served) == result.backend_calls  # every call was served, losers included
    losers = [service for done, service in served if done]
    assert len(losers) == result.hedges_sent  # two attempts at most: one loser per hedge
    assert sum(service == pytest.approx(2.0) for service in losers) > 0  # stragglers, served to the end
    assert result.peak_queue > 0  # calls waited behind a straggling loser


def test_a_hedged_run_is_the_same_twice_for_a_seed() -> None:
    scenario, hedged = pool(straggler_rate=0.05, hedge=poise.Hedge.quantile(0.9, min_samples=20))
    scenario = attrs.evolve(scenario, configurations=(hedged,))
    first = json.dumps(sim.run(scenario).to_json(), sort_keys=True)
    assert first == json.dumps(sim.run(scenario).to_json(), sort_keys=True)
    row = sim.run(scenario).to_json()["results"][-1]
    assert row["configuration"] == "hedged"
    assert row["hedges_sent"] > 0
    assert row["hedges_won"] > 0


def test_hedges_past_the_traffics_attempts_leave_the_traffic_as_every_configuration_sees_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Four attempts where the traffic draws for two: the hedges' draws come from a stream of
    # their own, so every request arrives when it does in an unhedged run.
    arrivals: list[float] = []
    finish = sim.Engine._finish

    def watched(engine: sim.Engine, request: Any, *, ok: bool) -> None:
        arrivals.append(request.arrival)
        finish(engine, request, ok=ok)

    monkeypatch.setattr(sim.Engine, "_finish", watched)
    scenario, hedged = pool(straggler_rate=0.3, hedge=poise.Hedge(delay=0.0, max_attempts=4, max_extra_load=1.0))
    result = sim.run_configuration(scenario, attrs.evolve(hedged, retry_budget=poise.RetryBudget(percent=5.0)))
    assert result.backend_calls > 2.5 * result.requests  # third and fourth attempts drew their own numbers
    seen = sorted(arrivals)
    arrivals.clear()
    sim.run_configuration(scenario, scenario.all_configurations()[0])
    assert sorted(arrivals) == seen


FAILING = [{"start": 0, "error_rate": 0.2, "http": 503, "healthy": True}]
"""Every endpoint answers 503 to a fifth of its calls (retryable, and too few to eject it)."""


def run_engine(scenario: sim.Scenario, configuration: sim.Configuration) -> tuple[sim.RunResult, poise.LoadBalancer]:
    engine = sim.Engine(
        [m.fresh() for m in scenario.endpoints],
        scenario.traffic,
        configuration,
        seed=scenario.seed,
        client=scenario.client,
    )
    result = engine.run()
    (lb,) = engine.balancers
    return result, lb


def test_a_hedged_requests_failed_attempt_is_replaced_at_once_on_another_endpoint() -> None:
    scenario, hedged = pool(straggler_rate=0.0, phases=FAILING, hedge=poise.Hedge(delay=0.05, max_extra_load=0.5))
    unhedged, _ = run_engine(scenario, scenario.all_configurations()[0])
    result, _ = run_engine(scenario, hedged)
    retries = result.backend_calls - result.requests - result.hedges_sent
    assert retries > 0.15 * result.requests  # a fifth fail, and most are retried
    assert result.success_rate >= unhedged.success_rate - 0.005
    assert result.success_rate > 0.95  # both attempts fail for about 4% of requests


def test_hedges_and_retries_draw_from_one_budget() -> None:
    # A hedge at once for half the requests spends the retry budget the failed attempts need.
    scenario, hedged = pool(straggler_rate=0.0, phases=FAILING, hedge=poise.Hedge(delay=0.0, max_extra_load=0.5))
    unhedged, plain_lb = run_engine(scenario, scenario.all_configurations()[0])
    result, lb = run_engine(scenario, hedged)
    assert plain_lb.statistics().pool.retries_denied == 0
    assert lb.statistics().pool.retries_denied > 0
    assert result.success_rate < unhedged.success_rate


def test_in_the_gray_failure_a_hedge_at_the_healthy_p99_cuts_p999_for_under_one_percent_more_calls() -> None:
    scenario = sim.load_scenario("gray-failure")
    configurations = {c.name: c for c in scenario.all_configurations()}
    default = sim.run_configuration(scenario, configurations["poise_py default"])
    hedged = sim.run_configuration(scenario, configurations["poise_py default + hedge at 150 ms"])
    assert default.all_latencies_p999 is not None
    assert hedged.all_latencies_p999 is not None
    assert hedged.success_rate >= default.success_rate
    assert hedged.all_latencies_p999 <= 0.35 * default.all_latencies_p999  # 1063 -> 298 ms at seed 777
    assert hedged.extra_load - default.extra_load <= 0.01
    assert 0 < hedged.hedges_sent <= 1 + 0.02 * hedged.requests
