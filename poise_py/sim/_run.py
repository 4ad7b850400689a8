"""Run every configuration of a scenario and gather the results."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ._engine import Engine, RunResult
from ._scenario import Scenario


@attrs.frozen(kw_only=True)
class Report:
    """The results of one scenario, one per configuration, in order."""

    scenario: Scenario
    seed: int
    results: tuple[RunResult, ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (no timelines)."""
        return {
            "scenario": self.scenario.name,
            "seed": self.seed,
            "results": [
                {
                    "configuration": r.configuration,
                    "requests": r.requests,
                    "successes": r.successes,
                    "success_rate": round(r.success_rate, 6),
                    "latency_p50": r.latencies_p50,
                    "latency_p99": r.latencies_p99,
                    "capacity_retained": round(r.capacity_retained, 6),
                    "spurious_ejections": r.spurious_ejections,
                    "deserved_ejections": r.deserved_ejections,
                    "probes_to_dead": r.probes_to_dead,
                    "mean_readmit_seconds": r.mean_readmit,
                    "no_eligible_while_alive": r.no_eligible_while_alive,
                    "backend_calls": r.backend_calls,
                    "ejected": list(r.ejected),
                }
                for r in self.results
            ],
        }


def run(
    scenario: Scenario,
    *,
    seed: int | None = None,
    progress: Callable[[str, float], None] | None = None,
) -> Report:
    """Run every configuration of ``scenario`` on the same seeded traffic.

    ``progress(configuration_name, virtual_seconds_done)`` is called as each run advances.
    """
    seed = scenario.seed if seed is None else seed
    results = []
    for config in scenario.all_configurations():
        report = None if progress is None else (lambda t, name=config.name: progress(name, t))
        engine = Engine(
            [model.fresh() for model in scenario.endpoints],
            scenario.traffic,
            config,
            seed=seed,
            progress=report,
            discovery=scenario.discovery,
            fleet=scenario.fleet,
            client=scenario.client,
        )
        results.append(engine.run())
    return Report(scenario=scenario, seed=seed, results=tuple(results))
