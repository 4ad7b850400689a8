"""Run every configuration of a scenario and gather the results."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ._engine import Configuration, Engine, RunResult
from ._scenario import Scenario


@attrs.frozen(kw_only=True)
class Report:
    """The results of one scenario, one per configuration, in order."""

    scenario: Scenario
    seed: int
    results: tuple[RunResult, ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (no timelines).

        ``latency_*`` are of successful requests, ``all_latency_*`` of every request (a
        failure when it failed, a timeout at its deadline); ``goodput`` is successes per
        second; ``extra_load`` attempts per request minus one (retries and hedges);
        ``hedges_sent`` and ``hedges_won`` a hedged configuration's hedges; ``endpoints``
        each endpoint's calls, share of calls and peak queue.
        """
        return {
            "scenario": self.scenario.name,
            "seed": self.seed,
            "duration": self.scenario.traffic.duration,
            "loaded": self.scenario.loaded,
            "results": [
                {
                    "configuration": r.configuration,
                    "requests": r.requests,
                    "successes": r.successes,
                    "success_rate": round(r.success_rate, 6),
                    "goodput": round(r.goodput, 6),
                    "latency_p50": r.latencies_p50,
                    "latency_p99": r.latencies_p99,
                    "latency_p999": r.latencies_p999,
                    "all_latency_p50": r.all_latencies_p50,
                    "all_latency_p99": r.all_latencies_p99,
                    "all_latency_p999": r.all_latencies_p999,
                    "extra_load": round(r.extra_load, 6),
                    "hedges_sent": r.hedges_sent,
                    "hedges_won": r.hedges_won,
                    "peak_queue": r.peak_queue,
                    "capacity_retained": round(r.capacity_retained, 6),
                    "spurious_ejections": r.spurious_ejections,
                    "deserved_ejections": r.deserved_ejections,
                    "probes_to_dead": r.probes_to_dead,
                    "mean_readmit_seconds": r.mean_readmit,
                    "no_eligible_while_alive": r.no_eligible_while_alive,
                    "backend_calls": r.backend_calls,
                    "ejected": list(r.ejected),
                    "endpoints": [
                        {"id": i, "calls": calls, "share": round(share, 6), "peak_queue": peak}
                        for i, calls, share, peak in zip(
                            r.endpoint_ids, r.endpoint_calls, r.shares, r.peak_queues, strict=True
                        )
                    ],
                    "return_peak_queues": r.return_peak_queues,
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
        results.append(run_configuration(scenario, config, seed=seed, progress=report))
    return Report(scenario=scenario, seed=seed, results=tuple(results))


def run_configuration(
    scenario: Scenario,
    configuration: Configuration,
    *,
    seed: int | None = None,
    progress: Callable[[float], None] | None = None,
) -> RunResult:
    """Run one ``configuration`` (from the scenario or not) on ``scenario``'s traffic, as :func:`run` does.

    ``progress(virtual_seconds_done)`` is called as the run advances.
    """
    engine = Engine(
        [model.fresh() for model in scenario.endpoints],
        scenario.traffic,
        configuration,
        seed=scenario.seed if seed is None else seed,
        progress=progress,
        discovery=scenario.discovery,
        fleet=scenario.fleet,
        client=scenario.client,
    )
    return engine.run()
