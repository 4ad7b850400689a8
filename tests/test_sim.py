"""The simulator: deterministic per seed, the built-in scenarios' headlines, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import poise_py as poise
from poise_py import sim
from poise_py.cli import main

SMALL = """
name = "small"
description = "two healthy endpoints and one that dies at t=20 and recovers at t=60"
seed = 5

[traffic]
rps = 50
duration = 120
timeout = 0.5
attempts = 2

[[endpoints]]
id = "ok"
count = 2

[[endpoints]]
id = "dies"
phases = [
    { start = 0, error_rate = 0.0 },
    { start = 20, error_rate = 1.0, fault = "suspect" },
    { start = 60, error_rate = 0.0 },
]

[[configurations]]
name = "fast breaker"
policy = "round_robin"
circuit = { consecutive_failures = 2, minimum_volume = 1, escalation = { base = 5, maximum = 10, jitter = 0 } }
"""


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    return path


def test_same_seed_same_json_twice(small: Path) -> None:
    scenario = sim.load_scenario(small)
    first = json.dumps(sim.run(scenario).to_json(), sort_keys=True)
    second = json.dumps(sim.run(scenario).to_json(), sort_keys=True)
    assert first == second
    other = json.dumps(sim.run(scenario, seed=6).to_json(), sort_keys=True)
    assert other != first


def test_every_configuration_sees_the_same_traffic(small: Path) -> None:
    report = sim.run(sim.load_scenario(small))
    assert [r.configuration for r in report.results] == [
        "poise_py default",
        "naive round-robin",
        "first-strike eviction",
        "constant-window breaker",
        "fast breaker",
    ]
    assert len({r.requests for r in report.results}) == 1


def test_a_breaker_ejects_the_dead_endpoint_and_readmits_it_after_recovery(small: Path) -> None:
    report = sim.run(sim.load_scenario(small))
    fast = report.results[-1]
    assert fast.deserved_ejections >= 1
    assert fast.spurious_ejections == 0
    assert fast.readmit_times
    assert max(fast.readmit_times) <= 11.0
    naive = report.results[1]
    assert naive.deserved_ejections == 0
    assert naive.success_rate < fast.success_rate


def test_seed_000_headlines() -> None:
    report = sim.run(sim.load_scenario("grpc-worker-pool"))
    ours, *baselines = report.results
    assert ours.configuration == "poise_py default"
    for other in baselines:
        assert ours.success_rate > other.success_rate, other.configuration
    assert ours.spurious_ejections == 0
    assert ours.no_eligible_while_alive == 0
    first_strike = next(r for r in baselines if r.configuration == "first-strike eviction")
    assert first_strike.spurious_ejections > 0
    assert first_strike.no_eligible_while_alive > 0  # it drains the pool, as seed 000 reported
    constant = next(r for r in baselines if r.configuration == "constant-window breaker")
    assert ours.probes_to_dead < constant.probes_to_dead


def test_scenario_errors_name_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[[endpoints]]\nid = "a"\nphases = [{ start = 0, fault = "sometimes" }]\n')
    with pytest.raises(poise.ConfigError) as info:
        sim.load_scenario(bad)
    assert info.value.knob == "endpoints[0].phases[0].fault"
    with pytest.raises(poise.ConfigError):
        sim.load_scenario("no-such-scenario")
    bad.write_text("name = ")
    with pytest.raises(poise.ConfigError):
        sim.load_scenario(bad)


def test_cli_simulate_json_and_plot(small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "timeline.png"
    assert main(["simulate", str(small), "--json", "--plot", str(plot)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data[0]["scenario"] == "small"
    assert len(data[0]["results"]) == 5
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_cli_simulate_table_and_list(small: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(small)]) == 0
    out = capsys.readouterr().out
    assert "poise_py default" in out
    assert "naive round-robin" in out
    assert main(["simulate", "--list"]) == 0
    assert "grpc-worker-pool" in capsys.readouterr().out
    assert main(["simulate", "nope"]) == 2


def test_seed_002_coordinated_backoff_probes_a_dead_dependency_far_less() -> None:
    report = sim.run(sim.load_scenario("fleet-shared-breaker"))
    by_name = {r.configuration: r for r in report.results}
    local = by_name["poise_py default"]
    coordinated = by_name["poise_py coordinated"]
    constant = by_name["constant-window breaker"]
    assert coordinated.probes_to_dead * 10 < local.probes_to_dead
    assert local.probes_to_dead * 5 < constant.probes_to_dead
    assert all(r.spurious_ejections == 0 for r in report.results)


def test_discovery_churn_last_known_good_outlives_a_dead_publisher() -> None:
    report = sim.run(sim.load_scenario("discovery-churn"))
    by_name = {r.configuration: r for r in report.results}
    last_known_good = by_name["poise_py default"]
    fail_closed = by_name["poise_py fail-closed"]
    unguarded = by_name["poise_py, max_ejection_percent = 100"]
    assert fail_closed.success_rate < last_known_good.success_rate < unguarded.success_rate
    assert last_known_good.success_rate > by_name["naive round-robin"].success_rate
    assert unguarded.success_rate > 0.999
    assert all(r.spurious_ejections == 0 for r in report.results)


def test_seed_001_tier_waterfall_keeps_serving_through_rate_limits_and_a_revoked_key() -> None:
    report = sim.run(sim.load_scenario("llm-gateway"))
    ours, naive, first_strike, _constant = report.results
    assert ours.success_rate > 0.999
    assert ours.success_rate > naive.success_rate
    assert ours.success_rate > first_strike.success_rate
    assert ours.spurious_ejections == 0
    assert ours.no_eligible_while_alive == 0


FLEET = """
name = "small-fleet"
seed = 9

[fleet]
instances = 5

[traffic]
rps = 10
duration = 300
attempts = 1

[[endpoints]]
id = "dep"
phases = [{ start = 0 }, { start = 30, error_rate = 1.0 }, { start = 200 }]

[[configurations]]
name = "coordinated"
coordination = true
"""


def test_a_coordinated_fleet_run_is_deterministic_too(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(FLEET)
    scenario = sim.load_scenario(path)
    first = json.dumps(sim.run(scenario).to_json(), sort_keys=True)
    assert first == json.dumps(sim.run(scenario).to_json(), sort_keys=True)
    coordinated = sim.run(scenario).results[-1]
    local = sim.run(scenario).results[0]
    assert coordinated.probes_to_dead < local.probes_to_dead
