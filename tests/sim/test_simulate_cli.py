"""``poise simulate``: quick and full runs, processes, progress, the legend, the reason line, the plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from matplotlib.patches import Rectangle
from rich.console import Console

from poise_py import sim
from poise_py.cli import main
from poise_py.sim import _quick
from poise_py.sim._report import COLUMNS, LEGEND, MEANINGS, behind, figure, render_table
from poise_py.sim._run import Job, prepare, run_in_processes

ONE_DEPENDENCY = """
name = "one-dependency"
description = "One dependency, down from t=60 s to t=360 s, then healthy again."
seed = 3

[client]
protocol = "http"
classifier = "http"

[traffic]
rps = 10
duration = 600
timeout = 0.5
attempts = 1

[[endpoints]]
id = "dependency"
phases = [{ start = 0 }, { start = 60, http = 500 }, { start = 360 }]
"""
"""One endpoint that dies and recovers: the default's circuit keeps it out after it recovers,
naive round-robin never ejects it, so naive round-robin serves more (as in the fleet's shared breaker)."""

POOL = """
name = "pool"
description = "three healthy endpoints and one that dies at t=20 s and recovers at t=60 s"
seed = 5

[traffic]
rps = 40
duration = 120
timeout = 0.5
attempts = 2

[[endpoints]]
id = "ok"
count = 3

[[endpoints]]
id = "dies"
phases = [{ start = 0 }, { start = 20, error_rate = 1.0, fault = "suspect" }, { start = 60 }]
"""


@pytest.fixture
def one(tmp_path: Path) -> Path:
    path = tmp_path / "one.toml"
    path.write_text(ONE_DEPENDENCY)
    return path


@pytest.fixture
def pool(tmp_path: Path) -> Path:
    path = tmp_path / "pool.toml"
    path.write_text(POOL)
    return path


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_every_column_is_in_the_legend_and_the_legend_is_printed_under_each_table(
    one: Path, pool: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    explained = {name.strip() for column, _ in MEANINGS for name in column.split(",")}
    assert explained == set(COLUMNS) - {"configuration"}
    assert main(["simulate", str(one)]) == 0
    out = _flat(capsys.readouterr().out)
    assert out.endswith(_flat(LEGEND))
    for column, meaning in MEANINGS:
        assert f"{column}: {meaning}" in out


def test_the_default_behind_a_baseline_gets_a_one_line_reason(one: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = sim.run(sim.load_scenario(one))
    ours, naive = report.results[0], report.results[1]
    assert ours.success_rate < naive.success_rate
    reason = behind(report)
    assert reason is not None
    assert reason.startswith(f"behind naive round-robin on success ({ours.success_rate * 100:.3f}% against")
    assert "with one endpoint nothing can be served while it is down" in reason
    assert f"back {ours.mean_readmit:.0f} s after it recovers" in reason
    assert "\n" not in reason
    assert main(["simulate", str(one)]) == 0
    out = capsys.readouterr().out
    assert _flat(f"poise_py default is {reason} {LEGEND}") in _flat(out)  # under the table, above the legend
    assert out.count(" is behind ") == 1
    assert main(["simulate", str(one), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["behind"] == reason


def test_a_default_that_wins_gets_no_reason_line(pool: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = sim.run(sim.load_scenario(pool))
    ours = report.results[0]
    assert all(ours.success_rate >= r.success_rate for r in report.results[1:])
    assert behind(report) is None
    assert main(["simulate", str(pool)]) == 0
    assert " is behind " not in capsys.readouterr().out


def test_fleet_shared_breaker_gets_its_reason() -> None:
    """The fleet's local default trails naive round-robin (a single dependency): the line says why."""
    scenario, _ = _quick.quick(sim.load_scenario("fleet-shared-breaker"), requests=4000)
    ours, naive = sim.default_configurations()[:2]
    results = tuple(sim.run_configuration(scenario, c) for c in (ours, naive))
    reason = behind(sim.Report(scenario=scenario, seed=scenario.seed, results=results))
    assert reason is not None
    assert reason.startswith("behind naive round-robin on success")
    assert "with one endpoint nothing can be served while it is down" in reason
    assert "(readmit)" in reason


def test_full_runs_the_scenario_as_written_and_quick_shortens_it_to_the_cap() -> None:
    grpc = sim.load_scenario("grpc-worker-pool")
    full, how = prepare("grpc-worker-pool", full=True)
    assert full.traffic == grpc.traffic
    assert not how.shortened
    thinned, how = prepare("grpc-worker-pool", full=False)
    k = grpc.traffic.rps * grpc.traffic.duration / _quick.QUICK_REQUESTS
    assert how.shortened
    assert how.thinned
    assert how.factor == pytest.approx(k)
    assert thinned.traffic.duration == grpc.traffic.duration  # faults keep their times and lengths
    assert thinned.traffic.rps == pytest.approx(grpc.traffic.rps / k)
    assert thinned.traffic.sample_interval == pytest.approx(grpc.traffic.sample_interval * k)
    assert thinned.fault_windows() == grpc.fault_windows()
    assert "quick run" in how.describe(thinned)

    loaded = sim.load_scenario("gray-failure")
    compressed, how = prepare("gray-failure", full=False)
    k = loaded.traffic.rps * loaded.traffic.duration / _quick.QUICK_REQUESTS
    assert how.shortened
    assert not how.thinned
    assert compressed.traffic.rps == loaded.traffic.rps  # queues depend on the rate: it stays
    assert compressed.traffic.duration == pytest.approx(loaded.traffic.duration / k)
    assert compressed.fault_windows() == pytest.approx([(a / k, b / k, i) for a, b, i in loaded.fault_windows()])
    for before, after in zip(loaded.endpoints, compressed.endpoints, strict=True):
        assert after.change_points() == pytest.approx([p / k for p in before.change_points()])

    short, how = prepare("llm-rate-limits", full=False)  # under the cap: runs whole
    assert not how.shortened
    assert short.traffic == sim.load_scenario("llm-rate-limits").traffic


def test_cli_quick_by_default_full_with_the_flag_gives_the_unshortened_figures(
    pool: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_quick, "QUICK_REQUESTS", 1200)  # the pool's 4,800 requests: shortened 4x
    assert main(["simulate", str(pool), "--json"]) == 0
    quick = json.loads(capsys.readouterr().out)[0]
    assert quick["run"] == "quick"
    assert quick["duration"] == 120.0  # no capacities: the traffic is thinned on the same timeline
    assert quick["rps"] == pytest.approx(10.0)
    assert quick["full_rps"] == 40.0
    assert quick["shortened_by"] == pytest.approx(4.0)
    assert main(["simulate", str(pool), "--json", "--full"]) == 0
    full = json.loads(capsys.readouterr().out)[0]
    assert full["run"] == "full"
    assert full["duration"] == 120.0
    assert full["results"] == sim.run(sim.load_scenario(pool)).to_json()["results"]
    assert main(["simulate", str(pool)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Quick runs: 1 of 1 scenarios shortened")
    assert "quick run: 10 requests/s instead of 40 on the same 120 s timeline" in _flat(out)


def test_results_do_not_depend_on_the_number_of_processes(
    one: Path, pool: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs: list[Any] = []
    for jobs in ("1", "2"):
        assert main(["simulate", str(one), str(pool), "--json", "--jobs", jobs]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1]
    assert [d["scenario"] for d in outputs[0]] == ["one-dependency", "pool"]  # in the order asked
    for path, data in zip((one, pool), outputs[0], strict=True):
        assert data["results"] == sim.run(sim.load_scenario(path)).to_json()["results"]


def test_progress_moves_through_each_configuration_of_a_run_in_another_process(pool: Path) -> None:
    seen: list[tuple[int, int, float]] = []
    results = anyio.run(
        lambda: run_in_processes(
            [Job(source=str(pool), full=True)], processes=1, progress=lambda j, c, t: seen.append((j, c, t))
        )
    )
    configurations = len(sim.load_scenario(pool).all_configurations())
    assert len(results[0]) == configurations
    for c in range(configurations):
        times = [t for j, k, t in seen if j == 0 and k == c]
        assert len(times) > 50, c  # every 1% of the run, not once at the end
        assert times == sorted(times)
        assert times[-1] == 120.0


def test_the_timeline_shades_fault_windows_and_keeps_a_full_success_line_visible(pool: Path) -> None:
    scenario = sim.load_scenario(pool)
    report = sim.run(scenario)
    four = attrs.evolve(report, results=report.results[:4])
    fig = figure([four])
    width, height = fig.get_size_inches() * fig.dpi
    assert height <= 1000
    assert width <= 1400
    assert scenario.fault_windows() == [(20.0, 60.0, "dies")]
    panels = [ax for ax in fig.axes if any(line.get_gid() == "success" for line in ax.get_lines())]
    assert len(panels) == 4
    for ax in panels:
        shaded = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_gid() == "fault"]
        assert len(shaded) == 1
        assert (shaded[0].get_x(), shaded[0].get_width()) == (20.0, 40.0)
        lines = {line.get_gid(): line for line in ax.get_lines()}
        assert lines["success"].get_zorder() > lines["capacity"].get_zorder()  # drawn over it
        assert lines["success"].get_linewidth() < lines["capacity"].get_linewidth()  # and inside it
        assert ax.get_ylim()[1] > 1.05  # a 100% line is not on the frame
    bands = [ax for ax in fig.axes if ax.images]
    assert len(bands) == 4
    for ax in bands:
        outlined = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_gid() == "fault"]
        assert len(outlined) == 1
        assert outlined[0].get_x() == 20.0
        assert outlined[0].get_width() == 40.0
        assert outlined[0].get_y() == 3 - 0.5  # the row of "dies", the fourth endpoint


def test_render_table_prints_the_run_in_the_title(pool: Path) -> None:
    console = Console(width=200, record=True)
    render_table(sim.run(sim.load_scenario(pool)), console, run="quick run: something")
    assert "quick run: something" in console.export_text().splitlines()[0]


TINY = """
name = "NAME"
seed = 1

[traffic]
rps = 20
duration = 20

[[endpoints]]
id = "a"
capacity = 4

[[configurations]]
name = "CONF"
concurrency = { algorithm = "aimd" }
"""


def test_a_scenarios_own_text_is_printed_as_text_not_rich_markup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "markup.toml"
    path.write_text(TINY.replace("NAME", "[red]mine").replace("CONF", "[/x] conf"))
    assert main(["simulate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "[red]mine" in out
    assert "[/x] conf" in out


def test_a_short_run_still_says_what_its_adaptive_limits_learned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "short.toml"
    path.write_text(TINY.replace("NAME", "short").replace("CONF", "aimd"))
    assert main(["simulate", str(path), "--json"]) == 0
    (scenario,) = json.loads(capsys.readouterr().out)
    aimd = next(r for r in scenario["results"] if r["configuration"] == "aimd")
    assert aimd["endpoints"][0]["limit"] is not None  # learned over the second half of a 20 s run
    assert main(["simulate", str(path)]) == 0
    assert "aimd: limits learned, mean from 10 s" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("[fleet]\ninstances = 2\nsync_interval = 0.0005\n", "fleet.sync_interval"),
        ("", "endpoints[0].quota.per"),
    ],
)
def test_a_value_that_would_fail_mid_run_is_refused_at_load_naming_its_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, field: str
) -> None:
    text = TINY.replace("NAME", "bad").replace("CONF", "c") + "\n" + extra
    if not extra:
        text = text.replace("capacity = 4", "capacity = 4\nquota = { requests = 1, per = 1e-20 }")
    path = tmp_path / "bad.toml"
    path.write_text(text)
    other = tmp_path / "other.toml"
    other.write_text(TINY.replace("NAME", "other").replace("CONF", "c"))
    assert main(["simulate", str(path), str(other), "--jobs", "2"]) == 2
    err = capsys.readouterr().err
    assert field in err
    assert err.count("\n") == 1  # one line, no traceback


@pytest.mark.parametrize("seed", ["-5", str(2**63)])
def test_a_seed_out_of_a_scenarios_range_is_refused(seed: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "--seed", seed])
    assert exited.value.code == 2
    assert "a seed is 0.." in capsys.readouterr().err


@pytest.mark.parametrize(
    ("setting", "field", "known"),
    [
        (
            "circuit = { consecutive_failure = 3 }",
            "configurations[0].circuit.consecutive_failure",
            "consecutive_failures",
        ),
        ("retry_budget = { percnt = 0.1 }", "configurations[0].retry_budget.percnt", "percent"),
    ],
)
def test_a_misspelt_key_of_a_knob_table_is_named_with_the_keys_it_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str, field: str, known: str
) -> None:
    path = tmp_path / "misspelt.toml"
    path.write_text(TINY.replace("NAME", "misspelt").replace('concurrency = { algorithm = "aimd" }', setting))
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{field}: unknown key; known here:" in err
    assert known in err


def test_an_unknown_key_lists_every_key_the_table_takes_not_only_the_ones_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "phase.toml"
    text = TINY.replace("NAME", "phase").replace('concurrency = { algorithm = "aimd" }', "hedge = { quantile = 0.9 }")
    path.write_text(text.replace("capacity = 4", "capacity = 4\nphases = [{ start = 0 }, { start = 2, htp = 503 }]"))
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "endpoints[0].phases[1].htp: unknown key" in err
    assert all(f"'{key}'" in err for key in ("http", "grpc", "timeout", "refused", "fault"))


def test_off_turns_off_the_hard_cap_and_the_escalations_decay_interval(tmp_path: Path) -> None:
    path = tmp_path / "off.toml"
    setting = 'circuit = { hard_cap = "off", escalation = { decay_interval = "off" } }'
    path.write_text(TINY.replace("NAME", "off").replace('concurrency = { algorithm = "aimd" }', setting))
    assert main(["simulate", str(path), "--json"]) == 0
