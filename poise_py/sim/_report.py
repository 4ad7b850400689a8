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


COLUMNS = (
    "configuration",
    "success",
    "goodput",
    "p50",
    "p99",
    "p99.9",
    "ok p99",
    "extra",
    "hedges",
    "peak queue",
    "capacity",
    "spurious",
    "dead probes",
    "readmit",
    "no-elig.",
)
LEGEND = (
    "success: requests served / requests; goodput: successes per second; p50, p99, p99.9: latency of every "
    "request, a failure when it failed and a timeout at its deadline; ok p99: of successes; extra: retries and "
    "hedges per request; hedges: hedges sent / hedges that won; peak queue: longest queue of any endpoint; "
    "capacity: healthy endpoints in rotation; spurious: healthy endpoints ejected; dead probes: half-open probes to "
    "a dead endpoint; readmit: mean time from recovery to rotation; no-elig.: selections that found nothing while "
    "an endpoint was healthy."
)
"""The one-line legend printed under every table."""


def render_table(report: Report, console: Console) -> None:
    """Print one scenario's comparison as a rich table (best success rate in bold), then its legend."""
    from rich.table import Table  # noqa: PLC0415 - rich is the cli extra

    scenario = report.scenario
    table = Table(
        title=f"{scenario.name}  (seed {report.seed}, {scenario.traffic.duration:.0f} s virtual)",
        caption=scenario.description.replace("\n", " "),
        caption_justify="left",
    )
    for column in COLUMNS:
        if column == "configuration":
            table.add_column(column, no_wrap=True)
        else:
            table.add_column(column, justify="right")
    best = max(r.success_rate for r in report.results)
    for r in report.results:
        success = f"{r.success_rate * 100:.3f}%"
        table.add_row(
            r.configuration,
            f"[bold green]{success}[/]" if r.success_rate == best else success,
            f"{r.goodput:.1f}/s",
            _ms(r.all_latencies_p50),
            _ms(r.all_latencies_p99),
            _ms(r.all_latencies_p999),
            _ms(r.latencies_p99),
            f"{r.extra_load:.3f}",
            f"{r.hedges_sent}/{r.hedges_won}" if r.hedges_sent else "-",
            str(r.peak_queue) if scenario.loaded else "-",
            f"{r.capacity_retained * 100:.1f}%",
            f"[red]{r.spurious_ejections}[/]" if r.spurious_ejections else "0",
            str(r.probes_to_dead),
            _secs(r.mean_readmit),
            str(r.no_eligible_while_alive),
        )
    console.print(table)
    console.print(LEGEND, style="dim", soft_wrap=True)


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


FAULT_COLOUR = "#ff7043"


def plot(reports: list[Report], path: Path) -> None:
    """Write a timeline per configuration: state bands, rates, then p99 latency; fault windows shaded."""
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
        heights += [max(1.2, 0.28 * len(res.endpoint_ids) + 0.4), 1.3, 1.1]
    fig = plt.figure(figsize=(12, sum(heights) + 0.7 * len(rows) + 1.2), layout="constrained")
    grid = fig.add_gridspec(len(heights), 1, height_ratios=heights)
    cmap = ListedColormap(list(STATE_COLOURS))
    for n, (rep, res) in enumerate(rows):
        scale, unit = time_unit(rep.scenario.description, rep.scenario.traffic.duration)
        bands = fig.add_subplot(grid[3 * n])
        rates = fig.add_subplot(grid[3 * n + 1], sharex=bands)
        latency = fig.add_subplot(grid[3 * n + 2], sharex=bands)
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
        for start, end, _ in rep.scenario.fault_windows():
            for axis in (rates, latency):
                axis.axvspan(start / scale, end / scale, color=FAULT_COLOUR, alpha=0.12, linewidth=0)
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
        rates.tick_params(labelbottom=False)
        latency.plot(
            times,
            [s.latency_p99 * 1000 if s.latency_p99 is not None else float("nan") for s in res.timeline],
            color="#6a1b9a",
            linewidth=0.9,
        )
        latency.set_ylim(bottom=0)
        latency.set_ylabel("p99 (ms)", fontsize=9)
        latency.grid(alpha=0.3)
        latency.set_xlabel(f"time ({unit})", fontsize=9)
    handles: list[Artist] = [
        Patch(facecolor=c, edgecolor="#9e9e9e", label=label)
        for c, label in zip(STATE_COLOURS, STATE_LABELS, strict=True)
    ]
    handles += [
        Line2D([], [], color="black", linewidth=1.2, label="success rate (per sample)"),
        Line2D([], [], color="#1e88e5", linewidth=1.2, linestyle="--", label="healthy capacity in rotation"),
        Line2D([], [], color="#6a1b9a", linewidth=1.2, label="p99 latency of every request (per sample)"),
        Patch(facecolor=FAULT_COLOUR, alpha=0.25, label="fault window (an endpoint failing, slowed or resized)"),
    ]
    fig.legend(handles=handles, loc="outside upper center", ncols=4, fontsize=9, frameon=False)
    fig.savefig(path)
    plt.close(fig)
