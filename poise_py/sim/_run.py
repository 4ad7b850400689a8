"""Run every configuration of a scenario and gather the results; several scenarios over processes."""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs
from anyio.streams.text import TextReceiveStream

from ._engine import Configuration, Engine, RunResult
from ._quick import Shortening, quick
from ._scenario import Scenario, load_scenario


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
        each endpoint's calls, share of calls, peak queue and ``limit``, its adaptive
        concurrency limit averaged from :data:`~poise_py.sim.SETTLE_TIME` on (None without one).
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
                        {
                            "id": i,
                            "calls": calls,
                            "share": round(share, 6),
                            "peak_queue": peak,
                            "limit": None if limit is None else round(limit, 3),
                        }
                        for i, calls, share, peak, limit in zip(
                            r.endpoint_ids, r.endpoint_calls, r.shares, r.peak_queues, r.mean_limits(), strict=True
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


def prepare(source: str | Path, *, full: bool) -> tuple[Scenario, Shortening]:
    """The scenario ``source`` names as a run simulates it: whole with ``full``, else its quick version."""
    scenario = load_scenario(source)
    if full:
        traffic = scenario.traffic
        return scenario, Shortening(factor=1.0, thinned=False, full_rps=traffic.rps, full_duration=traffic.duration)
    return quick(scenario)


@attrs.frozen(kw_only=True)
class Job:
    """One scenario for :func:`run_in_processes`: its source (a built-in name or a TOML path), seed and length."""

    source: str
    seed: int | None = None
    full: bool = False


class WorkerError(RuntimeError):
    """Raised by :func:`run_in_processes` when a scenario's process fails; carries the process's stderr."""


async def run_in_processes(
    jobs: Sequence[Job],
    *,
    processes: int,
    progress: Callable[[int, int, float], None] | None = None,
) -> list[tuple[RunResult, ...]]:
    """Run each job's scenario in a new process of its own, at most ``processes`` at once; results in job order.

    Every scenario runs in a process that has run nothing else, exactly as ``poise
    simulate NAME`` runs it, so its figures do not depend on how many processes run, in
    which order, or beside which other scenarios. ``progress(job, configuration,
    virtual_seconds_done)`` is called as each run advances. Jobs start in the order given
    (put the longest first).
    """
    if processes < 1:
        raise ValueError(f"processes: at least 1, got {processes}")
    results: list[tuple[RunResult, ...] | None] = [None] * len(jobs)
    pending = iter(range(len(jobs)))

    async def worker(directory: Path) -> None:
        for index in pending:
            results[index] = await _run_job(index, jobs[index], directory, progress)

    with tempfile.TemporaryDirectory(prefix="poise-simulate-") as directory:
        async with anyio.create_task_group() as group:
            for _ in range(min(processes, len(jobs))):
                group.start_soon(worker, Path(directory))
    done = [r for r in results if r is not None]
    assert len(done) == len(jobs)  # noqa: S101 - every worker ran to the end or raised
    return done


_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
"""The directory holding this copy of ``poise_py``, for the children's ``PYTHONPATH``."""


async def _run_job(
    index: int, job: Job, directory: Path, progress: Callable[[int, int, float], None] | None
) -> tuple[RunResult, ...]:
    out = directory / f"{index}.pickle"
    env = dict(os.environ)
    # The child imports this very copy of poise_py, whatever its working directory holds.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    command = [
        sys.executable,
        "-m",
        "poise_py.sim._worker",
        job.source,
        "-" if job.seed is None else str(job.seed),
        "full" if job.full else "quick",
        str(out),
    ]
    errors: list[str] = []
    async with await anyio.open_process(command, stdin=None, env=env) as process:
        assert process.stdout is not None  # noqa: S101 - piped above
        assert process.stderr is not None  # noqa: S101

        async def drain_stderr() -> None:
            errors.extend([text async for text in TextReceiveStream(process.stderr)])  # type: ignore[arg-type]

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(drain_stderr)
                buffer = ""
                async for text in TextReceiveStream(process.stdout):
                    buffer += text
                    *lines, buffer = buffer.split("\n")
                    for line in lines:
                        configuration, done = line.split()
                        if progress is not None:
                            progress(index, int(configuration), float(done))
            status = await process.wait()
        except BaseException:
            process.kill()
            raise
    if status != 0:
        raise WorkerError(f"simulating {job.source} failed (exit status {status}):\n{''.join(errors)}")
    results: tuple[RunResult, ...] = pickle.loads(out.read_bytes())  # noqa: S301 - written by our own child
    return results
