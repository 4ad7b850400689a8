"""``poise simulate``: run the scenarios (quick or full, over processes), show the progress, print the report."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from . import _quick
from ._engine import RunResult
from ._quick import Shortening
from ._report import behind, check_plot_path, plot, render_table
from ._run import Job, Report, prepare, run, run_in_processes
from ._scenario import Scenario

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


def default_processes() -> int:
    """``--jobs``' default: twice the cores this process may use.

    Twice, because not every run keeps its core busy: a scenario with discovery (the
    publisher in discovery-churn) waits on the event loop's real clock after each
    announcement, and a second process fills that wait.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return 2 * max(1, cores)


def cost(scenario: Scenario) -> float:
    """A run's rough cost, to start the longest first: its requests, and a coordinated fleet's polls."""
    traffic, fleet = scenario.traffic, scenario.fleet
    polls = fleet.instances * traffic.duration / fleet.sync_interval
    return sum(
        traffic.rps * traffic.duration + (polls if c.coordination else 0.0) for c in scenario.all_configurations()
    )


def simulate(
    sources: Sequence[str],
    *,
    seed: int | None,
    full: bool,
    processes: int,
    as_json: bool,
    plot_path: str | None,
) -> int:
    """Run ``sources`` (built-in names or TOML paths) and print tables or JSON; 0 when done.

    One scenario runs in this process; several run one per process, ``processes`` at a
    time. Raises ConfigError for a bad scenario (before anything runs).
    """
    from rich.console import Console  # noqa: PLC0415 - the cli extra
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    prepared = [prepare(source, full=full) for source in sources]
    if plot_path:
        try:
            check_plot_path(Path(plot_path))
        except (OSError, ValueError) as exc:
            print(f"poise simulate: --plot: cannot write {plot_path}: {exc}", file=sys.stderr)
            return 2
    console = Console(width=None if sys.stdout.isatty() else 180)  # a file: wide enough for every column
    errors = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[configurations]}"),
        TimeElapsedColumn(),
        console=errors,
        refresh_per_second=5,
        transient=True,
        disable=as_json or not errors.is_terminal,
    ) as progress:
        results = _run_all(sources, prepared, seed=seed, full=full, processes=processes, progress=progress)
    reports = [
        Report(scenario=scenario, seed=scenario.seed if seed is None else seed, results=outcome)
        for (scenario, _), outcome in zip(prepared, results, strict=True)
    ]
    if plot_path:
        plot(reports, Path(plot_path))
    if as_json:
        print(json.dumps([_json(r, how) for r, (_, how) in zip(reports, prepared, strict=True)], indent=2))
    else:
        shortened = sum(how.shortened for _, how in prepared)
        if shortened:
            console.print(
                f"Quick runs: {shortened} of {len(prepared)} scenarios shortened to at most "
                f"{_quick.QUICK_REQUESTS:,} requests per configuration (each table says how); --full runs them "
                "whole, as docs/simulator.md quotes them.",
                style="bold",
                highlight=False,
            )
        for report, (scenario, how) in zip(reports, prepared, strict=True):
            render_table(report, console, run=how.describe(scenario) if how.shortened else None)
        if plot_path:
            console.print(f"timeline written to {plot_path}")
    sys.stdout.flush()
    return 0


def _run_all(
    sources: Sequence[str],
    prepared: list[tuple[Scenario, Shortening]],
    *,
    seed: int | None,
    full: bool,
    processes: int,
    progress: Progress,
) -> list[tuple[RunResult, ...]]:
    tasks: list[TaskID] = []
    done: list[list[float]] = []
    for scenario, _ in prepared:
        configurations = len(scenario.all_configurations())
        tasks.append(
            progress.add_task(
                scenario.name,
                total=configurations * scenario.traffic.duration,
                configurations=f"0/{configurations} configurations",
            )
        )
        done.append([0.0] * configurations)

    def advance(job: int, configuration: int, virtual: float) -> None:
        seconds = done[job]
        seconds[configuration] = virtual
        duration = prepared[job][0].traffic.duration
        finished = sum(s >= duration for s in seconds)
        progress.update(tasks[job], completed=sum(seconds), configurations=f"{finished}/{len(seconds)} configurations")

    if len(prepared) == 1:
        scenario = prepared[0][0]
        index = {c.name: i for i, c in enumerate(scenario.all_configurations())}
        report = run(scenario, seed=seed, progress=lambda name, t: advance(0, index[name], t))
        return [report.results]
    # Discovery first (its runs wait on the real clock, so they take longest), then the costliest.
    order = sorted(range(len(prepared)), key=lambda i: (prepared[i][0].discovery is None, -cost(prepared[i][0])))
    jobs = [Job(source=str(sources[i]), seed=seed, full=full) for i in order]

    def advance_job(position: int, configuration: int, virtual: float) -> None:
        advance(order[position], configuration, virtual)

    outcome = anyio.run(lambda: run_in_processes(jobs, processes=processes, progress=advance_job))
    results: list[tuple[RunResult, ...]] = [()] * len(prepared)
    for position, i in enumerate(order):
        results[i] = outcome[position]
    return results


def _json(report: Report, how: Shortening) -> dict[str, Any]:
    data = report.to_json()
    data["run"] = "quick" if how.shortened else "full"
    data["rps"] = report.scenario.traffic.rps
    data["full_duration"] = how.full_duration
    data["full_rps"] = how.full_rps
    data["shortened_by"] = round(how.factor, 6)
    data["behind"] = behind(report)
    return data
