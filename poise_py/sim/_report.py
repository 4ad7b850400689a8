"""Rendering a simulation report: a terminal table, JSON, and a PNG/SVG timeline."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from .._internal import install_hint
from ._engine import RunResult
from ._run import Report
from ._scenario import default_configurations

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import PercentFormatter
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
MEANINGS = (
    ("success", "requests served / requests (the best in bold)"),
    ("goodput", "successes per second"),
    ("p50, p99, p99.9", "latency of every request, a failure when it failed and a timeout at its deadline"),
    ("ok p99", "the p99 of successes only"),
    ("extra", "retries and hedges per request"),
    ("hedges", "hedges sent / hedges that won"),
    ("peak queue", "the longest queue of any endpoint"),
    ("capacity", "share of the healthy endpoints in rotation, averaged over time"),
    ("spurious", "ejections of an endpoint that was healthy then"),
    ("dead probes", "half-open probes sent to an endpoint that was down"),
    ("readmit", "mean time from an endpoint's recovery to its return to rotation"),
    ("no-elig.", "selections refused NoEligibleEndpoints while one endpoint was healthy"),
)
"""Each column after ``configuration`` and what it means: the legend, and docs/simulator.md's table."""
LEGEND = "; ".join(f"{column}: {meaning}" for column, meaning in MEANINGS) + "."
"""The legend printed under every table."""


def _pct(rate: float) -> str:
    return f"{rate * 100:.3f}%"


def behind(report: Report) -> str | None:
    """Why poise_py's default trails a baseline on success, in one line; None when it does not.

    The baselines are the configurations every scenario runs beside the default
    (:func:`~poise_py.sim.default_configurations`), not the scenario's own. The reason is
    read from the two rows: the first column, in order of weight, where the default does worse
    (overload, the oracle's sight, readmission, spurious ejections, queues, no eligible endpoint).
    """
    count = len(default_configurations(load=report.scenario.loaded))
    ours, baselines = report.results[0], report.results[1:count]
    if not baselines:
        return None
    best = max(baselines, key=lambda r: r.success_rate)
    if round(best.success_rate * 100, 3) <= round(ours.success_rate * 100, 3):  # as the table prints them
        return None
    head = f"behind {best.configuration} on success ({_pct(ours.success_rate)} against {_pct(best.success_rate)}): "
    return head + _causes(report, ours, best)[0] + "."


def _causes(report: Report, ours: RunResult, best: RunResult) -> list[str]:
    causes: list[str] = []
    if report.scenario.loaded and best.success_rate < 0.5:
        own = report.results[len(default_configurations(load=report.scenario.loaded)) :]
        line = "the pool is offered more than it can serve, so every configuration without a limit fails most requests"
        winner = max(own, key=lambda r: r.success_rate, default=None)
        if winner is not None and winner.success_rate > best.success_rate:
            line += f" ({winner.configuration}, this scenario's own, serves {_pct(winner.success_rate)})"
        causes.append(line)
    if best.configuration == "shortest-queue oracle":
        causes.append("the oracle sees every endpoint's true queue and health, which no client can: it is the bound")
    readmit, their_readmit = ours.mean_readmit, best.mean_readmit
    if readmit is not None and readmit > (their_readmit or 0.0) + 1.0:
        if best.deserved_ejections + best.spurious_ejections == 0:
            them = f"where {best.configuration} never ejects it"
        else:
            them = f"where {best.configuration} takes {their_readmit or 0.0:.0f} s"
        if len(ours.endpoint_ids) == 1:
            line = (
                "with one endpoint nothing can be served while it is down, and its circuit takes the endpoint "
                f"back {readmit:.0f} s after it recovers on average (readmit) {them}"
            )
        else:
            line = (
                f"its circuits take recovered endpoints back {readmit:.0f} s after recovery on average (readmit) {them}"
            )
        if best.backend_calls > 1.5 * ours.backend_calls:
            line += (
                f", and pays with {best.backend_calls / max(ours.backend_calls, 1):.1f}x the backend calls "
                f"({best.backend_calls:,} against {ours.backend_calls:,})"
            )
        causes.append(line)
    if ours.spurious_ejections > 1.2 * best.spurious_ejections + 1:
        causes.append(
            f"it ejected healthy endpoints {ours.spurious_ejections} times (spurious), {best.configuration} "
            f"{best.spurious_ejections}"
        )
    if ours.peak_queue > 1.5 * best.peak_queue + 1 and report.scenario.loaded:
        causes.append(
            f"its longest queue grew to {ours.peak_queue} calls against {best.peak_queue}: it sent more of the load "
            "to fewer endpoints"
        )
    if ours.no_eligible_while_alive > 1.2 * best.no_eligible_while_alive + 1:
        causes.append(
            f"it found no endpoint {ours.no_eligible_while_alive:,} times while one was healthy (no-elig.), "
            f"{best.configuration} {best.no_eligible_while_alive:,}"
        )
    if not causes:
        causes.append("no column explains it; --plot draws both timelines")
    return causes


def render_table(report: Report, console: Console, *, run: str | None = None) -> None:
    """Print one scenario's comparison as a rich table, then why the default trails (if it does), then the legend.

    ``run`` says how the scenario was run (a quick run's shortening), in the title.
    """
    from rich.markup import escape  # noqa: PLC0415 - rich is the cli extra
    from rich.table import Table  # noqa: PLC0415

    scenario = report.scenario
    how = f"; {run}" if run else ""
    table = Table(  # a scenario's own text is escaped: "[/x]" in a name is text, not rich markup
        title=f"{escape(scenario.name)}  (seed {report.seed}, {scenario.traffic.duration:.0f} s virtual{how})",
        caption=escape(scenario.description.replace("\n", " ")),
        caption_justify="left",
        show_edge=False,
        pad_edge=False,
    )
    best = max(r.success_rate for r in report.results)
    rows = [
        [
            escape(r.configuration),
            _pct(r.success_rate),
            f"{r.goodput:.1f}/s",
            _ms(r.all_latencies_p50),
            _ms(r.all_latencies_p99),
            _ms(r.all_latencies_p999),
            _ms(r.latencies_p99),
            f"{r.extra_load:.3f}",
            f"{r.hedges_sent}/{r.hedges_won}" if r.hedges_sent else "-",
            str(r.peak_queue) if scenario.loaded else "-",
            f"{r.capacity_retained * 100:.1f}%",
            str(r.spurious_ejections),
            str(r.probes_to_dead),
            _secs(r.mean_readmit),
            str(r.no_eligible_while_alive),
        ]
        for r in report.results
    ]
    for n, column in enumerate(COLUMNS):
        if column == "configuration":
            table.add_column(column, min_width=min(22, max(len(row[0]) for row in rows)), overflow="fold")
        else:  # a figure never wraps; its header may
            table.add_column(column, justify="right", min_width=max(len(row[n]) for row in rows))
    for r, row in zip(report.results, rows, strict=True):
        if r.success_rate == best:
            row[1] = f"[bold green]{row[1]}[/]"
        if r.spurious_ejections:
            row[11] = f"[red]{row[11]}[/]"
        table.add_row(*row)
    console.print(table)
    reason = behind(report)
    if reason is not None:
        console.print(f"{report.results[0].configuration} is {reason}", style="yellow", markup=False, highlight=False)
    for line in learned_limits(report):
        console.print(line, markup=False, highlight=False)
    console.print(LEGEND, style="dim", markup=False, highlight=False)


def _plain(text: str) -> str:
    """``text`` as matplotlib draws it literally: a ``$`` would open its math mode."""
    return text.replace("$", r"\$")


def learned_limits(report: Report) -> list[str]:
    """A line for each configuration with adaptive limits: what each endpoint's limit learned, against its capacity.

    The limit is averaged over the timeline from :data:`~poise_py.sim.SETTLE_TIME` (30 s)
    on, the time the limits are given to learn, or over the second half of a shorter run.
    """
    capacities = {model.id: model.capacity for model in report.scenario.endpoints}
    lines: list[str] = []
    for r in report.results:
        learned = [
            f"{i} {limit:.1f}" + (f" (capacity {capacities[i]})" if capacities.get(i) is not None else "")
            for i, limit in zip(r.endpoint_ids, r.mean_limits(), strict=True)
            if limit is not None
        ]
        if learned:
            lines.append(f"{r.configuration}: limits learned, mean from {r.settled_from():.0f} s: {', '.join(learned)}")
    return lines


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


CAPACITY_COLOUR = "#90caf9"
SUCCESS_COLOUR = "black"
LATENCY_COLOUR = "#6a1b9a"
PANEL_WIDTH = 7.0
"""Inches per configuration's panel; the figure has two side by side (1,400 px wide at 100 dpi)."""
RATES_HEIGHT = 0.85
LATENCY_HEIGHT = 0.65
TITLE_HEIGHT = 0.45
"""Inches of a panel's title, and its axis labels' share."""


def _bands_height(endpoints: int) -> float:
    return max(0.45, 0.1 * endpoints + 0.15)


def figure(reports: list[Report]) -> Figure:
    """The timeline figure: per configuration, state bands, rates, then p99 latency; fault windows drawn.

    Configurations sit two to a row (each scenario starting a row). A panel's bands are each
    endpoint's circuit state over time, with that endpoint's fault windows outlined; below
    them the success rate per sample (drawn over the healthy capacity in rotation, so a
    100% success shows), and the p99 latency, both with every fault window shaded.
    """
    try:
        import matplotlib as mpl  # noqa: PLC0415 - optional extra

        mpl.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
        from matplotlib.artist import Artist  # noqa: PLC0415
        from matplotlib.colors import ListedColormap  # noqa: PLC0415
        from matplotlib.lines import Line2D  # noqa: PLC0415
        from matplotlib.patches import Patch, Rectangle  # noqa: PLC0415
        from matplotlib.ticker import PercentFormatter  # noqa: PLC0415
    except ImportError as exc:
        raise SystemExit(f"--plot needs matplotlib: {install_hint('sim')}") from exc
    rows: list[list[tuple[Report, RunResult]]] = []
    for rep in reports:
        pairs = [(rep, res) for res in rep.results]
        rows += [pairs[i : i + 2] for i in range(0, len(pairs), 2)]
    bands_heights = [max(_bands_height(len(res.endpoint_ids)) for _, res in row) for row in rows]
    heights = [b + RATES_HEIGHT + LATENCY_HEIGHT + TITLE_HEIGHT for b in bands_heights]
    fig = plt.figure(figsize=(2 * PANEL_WIDTH, sum(heights) + 0.6), layout="constrained")
    grid = fig.add_gridspec(max(len(rows), 1), 2, height_ratios=heights or [1.0])
    cmap = ListedColormap(list(STATE_COLOURS))
    for r, row in enumerate(rows):
        for c, (rep, res) in enumerate(row):
            cell = grid[r, c].subgridspec(
                3, 1, height_ratios=[bands_heights[r], RATES_HEIGHT, LATENCY_HEIGHT], hspace=0
            )
            bands = fig.add_subplot(cell[0])
            rates = fig.add_subplot(cell[1], sharex=bands)
            latency = fig.add_subplot(cell[2], sharex=bands)
            _draw(rep, res, (bands, rates, latency), cmap=cmap, rectangle=Rectangle, percent=PercentFormatter)
    handles: list[Artist] = [
        Patch(facecolor=c, edgecolor="#9e9e9e", label=label)
        for c, label in zip(STATE_COLOURS, STATE_LABELS, strict=True)
    ]
    handles += [
        Line2D([], [], color=SUCCESS_COLOUR, linewidth=1.0, label="success rate (per sample)"),
        Line2D([], [], color=CAPACITY_COLOUR, linewidth=2.4, label="healthy capacity in rotation"),
        Line2D([], [], color=LATENCY_COLOUR, linewidth=1.0, label="p99 latency of every request"),
        Patch(
            facecolor=FAULT_COLOUR, alpha=0.25, edgecolor=FAULT_COLOUR, label="fault window (failing, slowed, resized)"
        ),
    ]
    fig.legend(handles=handles, loc="outside upper center", ncols=6, fontsize=8, frameon=False)
    return fig


def _draw(
    rep: Report,
    res: RunResult,
    axes: tuple[Axes, Axes, Axes],
    *,
    cmap: Colormap,
    rectangle: type[Rectangle],
    percent: type[PercentFormatter],
) -> None:
    bands, rates, latency = axes
    scale, unit = time_unit(rep.scenario.description, rep.scenario.traffic.duration)
    times = [s.at / scale for s in res.timeline]
    ids = res.endpoint_ids
    if times:
        step = rep.scenario.traffic.sample_interval / scale
        codes = [[STATE_CODES.get(state, 0) for state in s.states] for s in res.timeline]
        bands.imshow(
            [list(column) for column in zip(*codes, strict=True)],
            aspect="auto",
            cmap=cmap,
            vmin=0,
            vmax=len(STATE_COLOURS) - 1,
            extent=(times[0], times[-1] + step, len(ids) - 0.5, -0.5),
            interpolation="nearest",
        )
    ticks = range(len(ids)) if len(ids) <= 16 else range(0, len(ids), -(-len(ids) // 16))
    bands.set_yticks(list(ticks), [ids[i] for i in ticks], fontsize=7)
    bands.tick_params(labelbottom=False, length=2)
    bands.set_title(
        _plain(f"{rep.scenario.name}: {res.configuration} (success {_pct(res.success_rate)})"), fontsize=9, loc="left"
    )
    row = {endpoint: n for n, endpoint in enumerate(ids)}
    for start, end, endpoint in rep.scenario.fault_windows():
        for axis in (rates, latency):
            axis.axvspan(start / scale, end / scale, color=FAULT_COLOUR, alpha=0.15, linewidth=0, gid="fault")
        if endpoint in row:
            bands.add_patch(
                rectangle(
                    (start / scale, row[endpoint] - 0.5),
                    (end - start) / scale,
                    1.0,
                    fill=False,
                    edgecolor=FAULT_COLOUR,
                    linewidth=1.2,
                    gid="fault",
                )
            )
    # Capacity first, broad and light; success on top, thin and black: both show when both are 100%.
    rates.plot(
        times,
        [s.capacity if s.capacity is not None else float("nan") for s in res.timeline],
        color=CAPACITY_COLOUR,
        linewidth=2.4,
        zorder=2,
        gid="capacity",
    )
    rates.plot(
        times,
        [s.success_rate if s.success_rate is not None else float("nan") for s in res.timeline],
        color=SUCCESS_COLOUR,
        linewidth=1.0,
        zorder=3,
        gid="success",
    )
    rates.set_ylim(-0.05, 1.1)
    rates.set_yticks([0.0, 0.5, 1.0])
    rates.yaxis.set_major_formatter(percent(1.0))
    rates.tick_params(labelbottom=False, labelsize=7, length=2)
    rates.grid(alpha=0.3)
    latency.plot(
        times,
        [s.latency_p99 * 1000 if s.latency_p99 is not None else float("nan") for s in res.timeline],
        color=LATENCY_COLOUR,
        linewidth=0.9,
        gid="latency",
    )
    latency.set_ylim(bottom=0)
    latency.set_ylabel("p99 ms", fontsize=7)
    latency.tick_params(labelsize=7, length=2)
    latency.grid(alpha=0.3)
    latency.set_xlabel(f"time ({unit})", fontsize=7)


def plot(reports: list[Report], path: Path) -> None:
    """Write :func:`figure` to ``path`` (PNG, SVG or PDF, by its suffix)."""
    fig = figure(reports)  # first: it says so when matplotlib is missing
    import matplotlib.pyplot as plt  # noqa: PLC0415 - optional extra

    fig.savefig(path)
    plt.close(fig)
