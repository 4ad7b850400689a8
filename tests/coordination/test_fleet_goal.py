"""The fleet's shared breaker against local circuits and naive round robin, in the simulator.

The fleet scenario: 50 instances, 25 requests a second, a dependency dead for an hour. The
coordinated defaults (demand-following leases, the shared open wait capped at
``Coordination.max_open_wait``) must serve as well as naive round robin (within one
percentage point), probe the dead dependency less than local circuits do, and readmit it no
later than local circuits do.
"""

from __future__ import annotations

from poise_py import sim
from poise_py.sim._engine import RunResult


def run(name: str) -> RunResult:
    scenario = sim.load_scenario("fleet-shared-breaker")
    (config,) = [c for c in scenario.all_configurations() if c.name == name]
    return sim.run_configuration(scenario, config)


def test_the_coordinated_fleet_serves_like_naive_probes_less_and_readmits_no_later_than_local() -> None:
    naive = run("naive round-robin")
    local = run("poise_py default")
    coordinated = run("poise_py coordinated")
    assert abs(coordinated.success_rate - naive.success_rate) <= 0.01, (coordinated.success_rate, naive.success_rate)
    assert 0 < coordinated.probes_to_dead < local.probes_to_dead
    assert coordinated.mean_readmit is not None
    assert local.mean_readmit is not None
    assert coordinated.mean_readmit <= local.mean_readmit
    assert coordinated.spurious_ejections == 0
