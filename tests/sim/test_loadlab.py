"""The simulator against reality: heterogeneous-pool in the load lab (``bench/loadlab.py``) and simulated.

The lab serves the scenario's queueing model on real HTTP backends in a child process and
drives them with a real ``httpx`` client balanced by poise_py, on the same seeded traffic
the simulator draws (same arrivals, same service times). Both must rank the
configurations alike wherever the simulator sees a clear difference, and put each
configuration's p99 latency (over every request) within a factor of two of each other.

Four seconds of traffic per configuration keeps the test under 30 s of wall clock (four
configurations, each with its queues drained and its backend process stopped). The
margins hold on a loaded machine: the clear differences are a p99 near 0.2 s against one
at the 1 s deadline, and a lab slowed by its client's CPU adds milliseconds, not the
hundreds a factor of two allows. Only a machine so starved that the load generator cannot
keep to its schedule measures itself instead of the pool, and the lab says so
(``LabResult.generator_bound``): a configuration that disagrees after such a run is run
again (at most twice); one that disagrees after a run on schedule fails at once. A plain
test function: ``run_lab`` runs its own event loop (``anyio.run``), so no backend
parametrization or clock marker applies.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import anyio
import attrs
import pytest

import poise_py as poise
from bench._lab_backends import Board, Station
from bench.loadlab import CONFIGURATIONS as LAB_CONFIGURATIONS
from bench.loadlab import EVERY_POLICY, LabResult, parse_names, run_lab
from poise_py import sim

DURATION = 4.0
CONFIGURATIONS = ("poise_py default", "naive round-robin", "uniform random", "shortest-queue oracle")
APART = 1.5
"""Simulated p99s further apart than this factor must come out in the same order in the lab."""
WITHIN = 2.0
"""Each configuration's lab p99 is within this factor of the simulated one."""
RETAKES = 2
"""Times a configuration whose generator fell behind (``LabResult.generator_bound``) is run again."""


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def _side_by_side(lab: dict[str, LabResult], simulated: dict[str, sim.RunResult]) -> str:
    lines = ["configuration: lab p99 / simulated p99 (lab success / simulated success; lab peak queues)"]
    for name in CONFIGURATIONS:
        a, b = lab[name], simulated[name]
        lines.append(
            f"  {name}: {_ms(a.all_latencies_p99)} / {_ms(b.all_latencies_p99)} "
            f"({a.success_rate:.2%} / {b.success_rate:.2%}; {a.peak_queues}; "
            f"generator lag p99 {_ms(a.lag_p99)}, {a.on_time:.1%} on time)"
        )
    return "\n".join(lines)


def _disagreements(lab: dict[str, LabResult], simulated: dict[str, sim.RunResult]) -> list[tuple[str, set[str]]]:
    """Each way the lab and the simulator disagree, with the configurations it involves."""
    found: list[tuple[str, set[str]]] = []
    measured = {name: lab[name].all_latencies_p99 for name in CONFIGURATIONS}
    expected = {name: simulated[name].all_latencies_p99 for name in CONFIGURATIONS}
    for name in CONFIGURATIONS:
        got, want = measured[name], expected[name]
        assert want is not None
        if got is None or not want / WITHIN <= got <= want * WITHIN:
            found.append((f"{name}: the lab's p99 is not within a factor of {WITHIN:g} of the simulator's", {name}))
    for a, b in itertools.permutations(CONFIGURATIONS, 2):
        fast, slow = expected[a], expected[b]
        assert fast is not None
        assert slow is not None
        lab_fast, lab_slow = measured[a], measured[b]
        if fast * APART < slow and (lab_fast is None or lab_slow is None or lab_fast >= lab_slow):
            found.append((f"the simulator ranks {a} well ahead of {b} (p99), the lab does not", {a, b}))
    return found


def test_the_lab_agrees_with_the_simulator() -> None:
    scenario = sim.load_scenario("heterogeneous-pool")
    short = attrs.evolve(scenario, traffic=attrs.evolve(scenario.traffic, duration=DURATION))
    simulated = {r.configuration: r for r in sim.run(short).results}
    # The comparisons this test is about are there: a policy that sees load keeps p99 far
    # below the deadline, an even split does not.
    for fast, slow in (("poise_py default", "naive round-robin"), ("shortest-queue oracle", "uniform random")):
        fast_p99, slow_p99 = simulated[fast].all_latencies_p99, simulated[slow].all_latencies_p99
        assert fast_p99 is not None
        assert slow_p99 is not None
        assert fast_p99 * APART < slow_p99

    lab = {r.configuration: r for r in run_lab(scenario, duration=DURATION, configurations=CONFIGURATIONS)}
    for name in CONFIGURATIONS:
        assert lab[name].requests == simulated[name].requests, f"{name}: not the simulator's traffic"
    disagreements = _disagreements(lab, simulated)
    for _ in range(RETAKES):
        # A run whose load generator could not keep to its schedule measured the machine,
        # not the pool (the lab says so itself): take it again. A valid run never is.
        starved = sorted({n for _, names in disagreements for n in names if lab[n].generator_bound})
        if not starved:
            break
        lab |= {r.configuration: r for r in run_lab(scenario, duration=DURATION, configurations=starved)}
        disagreements = _disagreements(lab, simulated)
    assert not disagreements, "\n".join([*(what for what, _ in disagreements), _side_by_side(lab, simulated)])


def test_the_labs_extra_load_counts_retries_as_the_simulators_does() -> None:
    # Ten requests: four shed before any attempt (Overloaded), six attempted, one retried.
    shed = LabResult(
        configuration="x",
        duration=1.0,
        requests=10,
        successes=6,
        all_latencies_p50=None,
        all_latencies_p99=None,
        all_latencies_p999=None,
        latencies_p99=None,
        backend_calls=7,
        attempted=6,
        endpoint_ids=("a",),
        endpoint_calls=(7,),
        peak_queues=(0,),
        cpu_seconds=0.0,
        lag_p99=None,
        on_time=1.0,
        offered_rps=10.0,
        achieved_rps=10.0,
    )
    assert shed.extra_load == 0.1  # (7 - 6) / 10; attempts per request - 1 read -0.3


def test_configs_circuit_names_every_policy_with_and_without_the_circuit() -> None:
    names = parse_names("poise_py default,circuit")
    assert names[0] == "poise_py default"
    family = names[1:]
    assert len(family) == 3 * len(EVERY_POLICY) == len(set(family))
    for policy in EVERY_POLICY:
        default, never, nothing = (
            LAB_CONFIGURATIONS[f"{policy}: {way}"] for way in ("default circuit", "never ejects", "reporting nothing")
        )
        assert {default.name, never.name, nothing.name} <= set(family)
        assert default.health
        assert never.health
        assert not nothing.health
        assert default.circuit() == poise.CircuitPolicy()
        assert never.circuit().consecutive_failures == never.circuit().consecutive_transient_failures == 1_000_000
        assert type(default.policy()) is type(never.policy()) is type(nothing.policy())


@pytest.mark.anyio
@pytest.mark.virtual_asyncio
async def test_a_lab_backend_serves_a_failed_call_for_its_phases_error_latency(tmp_path: Path) -> None:
    # As the simulator's model does: a failure holds its slot for error_latency, not for a
    # success's drawn service time (a backend that fails fast).
    scenario = sim.parse_scenario(
        {
            "name": "fails-fast",
            "endpoints": [
                {
                    "id": "f",
                    "capacity": 1,
                    "latency": {"median": 0.1, "p99": 0.2},
                    "phases": [{"start": 0, "error_rate": 0.5, "http": 503, "error_latency": 0.001}],
                }
            ],
        }
    )
    board = Board(tmp_path / "board", count=1)
    try:
        station = Station(0, scenario.endpoints[0], board, random.Random(0))
        start = anyio.current_time()
        failed, _ = await station.call((0.5, 0.0))  # an error draw under error_rate
        failed_took = anyio.current_time() - start
        ok, _ = await station.call((0.5, 0.9))
        ok_took = anyio.current_time() - start - failed_took
    finally:
        board.close()
    assert failed == 503
    assert failed_took == pytest.approx(0.001, abs=1e-6)
    assert ok == 200
    assert ok_took == pytest.approx(0.1, rel=0.01)  # the median, drawn at u = 0.5
