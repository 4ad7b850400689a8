"""Rendering a simulation report: a terminal table, JSON, and a PNG/SVG timeline."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from ._run import Report

if TYPE_CHECKING:
    from rich.console import Console

STATE_CODES = {"closed": 0, "half_open": 1, "open": 2, "blocked": 3, "retired": 4, "absent": 5, "degraded": 6}


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


STATE_LABELS = ("closed", "half-open", "open", "blocked", "retired", "absent", "degraded (reserve)")
STATE_COLOURS = ("#4caf50", "#ffc107", "#e53935", "#6d4c41", "#424242", "#eeeeee", "#8e24aa")


def time_unit(text: str, duration: float) -> tuple[float, str]:
    """The time axis unit: minutes when the scenario's text speaks in minutes, else seconds."""
    del duration  # the text decides, not the length
    if re.search(r"\bminutes?\b", text, flags=re.IGNORECASE):
        return 60.0, "minutes"
    return 1.0, "seconds"


def check_plot_path(path: Path) -> None:
    """Raise OSError or ValueError now if a timeline cannot be written to ``path``."""
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in {"png", "svg", "pdf"}:
        raise ValueError(f"{path}: the timeline is written as .png, .svg or .pdf, not {path.suffix or 'no suffix'!r}")
    existed = path.exists()
    with path.open("ab"):
        pass
    if not existed:
        path.unlink()


def plot(reports: list[Report], path: Path) -> None:
    """Write a timeline per configuration: endpoint state bands above, rates below, one legend."""
    try:
        import matplotlib as mpl  # noqa: PLC0415 - optional extra

        mpl.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
        from matplotlib.artist import Artist  # noqa: PLC0415
        from matplotlib.colors import ListedColormap  # noqa: PLC0415
        from matplotlib.lines import Line2D  # noqa: PLC0415
        from matplotlib.patches import Patch  # noqa: PLC0415
        from matplotlib.ticker import PercentFormatter  # noqa: PLC0415
    except ImportError as exc:
        raise SystemExit("--plot needs matplotlib: pip install 'poise_py[sim]'") from exc
    rows = [(rep, res) for rep in reports for res in rep.results]
    heights: list[float] = []
    for _, res in rows:
        heights += [max(1.2, 0.28 * len(res.endpoint_ids) + 0.4), 1.3]
    fig = plt.figure(figsize=(12, sum(heights) + 0.7 * len(rows) + 1.2), layout="constrained")
    grid = fig.add_gridspec(len(heights), 1, height_ratios=heights)
    cmap = ListedColormap(list(STATE_COLOURS))
    for n, (rep, res) in enumerate(rows):
        scale, unit = time_unit(rep.scenario.description, rep.scenario.traffic.duration)
        bands = fig.add_subplot(grid[2 * n])
        rates = fig.add_subplot(grid[2 * n + 1], sharex=bands)
        times = [s.at / scale for s in res.timeline]
        codes = [[STATE_CODES.get(state, 0) for state in s.states] for s in res.timeline]
        ids = res.endpoint_ids
        if times:
            step = rep.scenario.traffic.sample_interval / scale
            bands.imshow(
                [list(column) for column in zip(*codes, strict=True)],
                aspect="auto",
                cmap=cmap,
                vmin=0,
                vmax=len(STATE_COLOURS) - 1,
                extent=(times[0], times[-1] + step, len(ids) - 0.5, -0.5),
                interpolation="nearest",
            )
        bands.set_yticks(range(len(ids)), ids, fontsize=9)
        bands.set_ylabel("endpoint", fontsize=9)
        bands.tick_params(labelbottom=False)
        bands.set_title(
            f"{rep.scenario.name}: {res.configuration} (success {res.success_rate * 100:.3f}%)",
            fontsize=11,
            loc="left",
        )
        rates.plot(
            times,
            [s.success_rate if s.success_rate is not None else float("nan") for s in res.timeline],
            color="black",
            linewidth=0.9,
        )
        rates.plot(
            times,
            [s.capacity if s.capacity is not None else float("nan") for s in res.timeline],
            color="#1e88e5",
            linewidth=0.9,
            linestyle="--",
        )
        rates.set_ylim(-0.03, 1.05)
        rates.yaxis.set_major_formatter(PercentFormatter(1.0))
        rates.set_ylabel("rate", fontsize=9)
        rates.grid(alpha=0.3)
        rates.set_xlabel(f"time ({unit})", fontsize=9)
    handles: list[Artist] = [
        Patch(facecolor=c, edgecolor="#9e9e9e", label=label)
        for c, label in zip(STATE_COLOURS, STATE_LABELS, strict=True)
    ]
    handles += [
        Line2D([], [], color="black", linewidth=1.2, label="success rate (per sample)"),
        Line2D([], [], color="#1e88e5", linewidth=1.2, linestyle="--", label="healthy capacity in rotation"),
    ]
    fig.legend(handles=handles, loc="outside upper center", ncols=4, fontsize=9, frameon=False)
    fig.savefig(path)
    plt.close(fig)
