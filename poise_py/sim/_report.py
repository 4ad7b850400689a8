"""Rendering a simulation report: a terminal table, JSON, and a PNG/SVG timeline."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ._run import Report

if TYPE_CHECKING:
    from rich.console import Console

STATE_CODES = {"closed": 0, "half_open": 1, "open": 2, "blocked": 3, "retired": 4, "absent": 5}


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def _secs(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.0f} s"


def render_table(report: Report, console: Console) -> None:
    """Print one scenario's comparison as a rich table, best success rate first marked."""
    from rich.table import Table  # noqa: PLC0415 - rich is the cli extra

    scenario = report.scenario
    table = Table(
        title=f"{scenario.name}  (seed {report.seed}, {scenario.traffic.duration:.0f} s virtual)",
        caption=scenario.description.replace("\n", " "),
        caption_justify="left",
    )
    for column in (
        "configuration",
        "success",
        "p50",
        "p99",
        "capacity",
        "spurious ej.",
        "probes to dead",
        "readmit",
        "no-eligible",
    ):
        table.add_column(column, justify="left" if column == "configuration" else "right")
    best = max(r.success_rate for r in report.results)
    for r in report.results:
        success = f"{r.success_rate * 100:.3f}%"
        table.add_row(
            r.configuration,
            f"[bold green]{success}[/]" if r.success_rate == best else success,
            _ms(r.latencies_p50),
            _ms(r.latencies_p99),
            f"{r.capacity_retained * 100:.1f}%",
            f"[red]{r.spurious_ejections}[/]" if r.spurious_ejections else "0",
            str(r.probes_to_dead),
            _secs(r.mean_readmit),
            str(r.no_eligible_while_alive),
        )
    console.print(table)


def plot(reports: list[Report], path: Path) -> None:
    """Write a timeline per configuration: endpoint state bands, success rate, capacity."""
    try:
        import matplotlib as mpl  # noqa: PLC0415 - optional extra

        mpl.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
        from matplotlib.colors import ListedColormap  # noqa: PLC0415
    except ImportError as exc:
        raise SystemExit("--plot needs matplotlib: pip install 'poise_py[sim]'") from exc
    rows = [(rep, res) for rep in reports for res in rep.results]
    fig, axes = plt.subplots(len(rows), 1, figsize=(11, 2.6 * len(rows)), squeeze=False, constrained_layout=True)
    cmap = ListedColormap(["#4caf50", "#ffc107", "#e53935", "#6d4c41", "#424242", "#eeeeee"])
    for ax, (rep, res) in zip(axes[:, 0], rows, strict=True):
        times = [s.at for s in res.timeline]
        grid = [[STATE_CODES.get(state, 0) for state in s.states] for s in res.timeline]
        n = len(res.endpoint_ids)
        if times:
            extent = (times[0], times[-1], -0.5, n - 0.5)
            ax.imshow(
                list(map(list, zip(*grid, strict=True))),
                aspect="auto",
                cmap=cmap,
                vmin=0,
                vmax=5,
                extent=extent,
                origin="lower",
                interpolation="nearest",
            )
        ax.set_yticks(range(n), res.endpoint_ids, fontsize=7)
        ax.set_title(
            f"{rep.scenario.name} | {res.configuration}: success {res.success_rate * 100:.3f}%",
            fontsize=9,
            loc="left",
        )
        twin = ax.twinx()
        twin.plot(
            times,
            [s.success_rate if s.success_rate is not None else float("nan") for s in res.timeline],
            color="black",
            linewidth=0.8,
            label="success rate",
        )
        twin.plot(
            times,
            [s.capacity if s.capacity is not None else float("nan") for s in res.timeline],
            color="#1e88e5",
            linewidth=0.8,
            linestyle="--",
            label="capacity retained",
        )
        twin.set_ylim(-0.02, 1.05)
        twin.legend(loc="lower left", fontsize=7)
    axes[-1, 0].set_xlabel(
        "virtual seconds  (bands: green closed, amber half-open, red open, brown blocked, grey retired, white absent)"
    )
    fig.savefig(path)
    plt.close(fig)
