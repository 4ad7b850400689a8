"""The simulator: deterministic per seed, the built-in scenarios' headlines, the CLI."""

from __future__ import annotations

import copy
import functools
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import poise_py as poise
from poise_py import sim
from poise_py.cli import main
from poise_py.sim._observe import GrpcStatus, HttpStatus, Observation, Protocol, Refused, Stated, Timeout, exception_for
from poise_py.sim._report import time_unit

SMALL = """
name = "small"
description = "two healthy endpoints and one that dies at t=20 and recovers at t=60"
seed = 5

[traffic]
rps = 50
duration = 120
timeout = 0.5
attempts = 2

[[endpoints]]
id = "ok"
count = 2

[[endpoints]]
id = "dies"
phases = [
    { start = 0, error_rate = 0.0 },
    { start = 20, error_rate = 1.0, fault = "suspect" },
    { start = 60, error_rate = 0.0 },
]

[[configurations]]
name = "fast breaker"
policy = "round_robin"
circuit = { consecutive_failures = 2, minimum_volume = 1, escalation = { base = 5, maximum = 10, jitter = 0 } }
"""


@functools.cache
def builtin_report(name: str) -> sim.Report:
    """One run of a built-in scenario per test session (the simulator is deterministic)."""
    return sim.run(sim.load_scenario(name))


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    return path


def test_same_seed_same_json_twice(small: Path) -> None:
    scenario = sim.load_scenario(small)
    first = json.dumps(sim.run(scenario).to_json(), sort_keys=True)
    second = json.dumps(sim.run(scenario).to_json(), sort_keys=True)
    assert first == second
    other = json.dumps(sim.run(scenario, seed=6).to_json(), sort_keys=True)
    assert other != first


def test_every_configuration_sees_the_same_traffic(small: Path) -> None:
    report = sim.run(sim.load_scenario(small))
    assert [r.configuration for r in report.results] == [
        "poise_py default",
        "naive round-robin",
        "first-strike eviction",
        "constant-window breaker",
        "fast breaker",
    ]
    assert len({r.requests for r in report.results}) == 1


def test_a_breaker_ejects_the_dead_endpoint_and_readmits_it_after_recovery(small: Path) -> None:
    report = sim.run(sim.load_scenario(small))
    fast = report.results[-1]
    assert fast.deserved_ejections >= 1
    assert fast.spurious_ejections == 0
    assert fast.readmit_times
    assert max(fast.readmit_times) <= 11.0
    naive = report.results[1]
    assert naive.deserved_ejections == 0
    assert naive.success_rate < fast.success_rate


def test_grpc_worker_pool_default_beats_every_baseline_without_spurious_ejections() -> None:
    report = builtin_report("grpc-worker-pool")
    ours, *baselines = report.results
    assert ours.configuration == "poise_py default"
    for other in baselines:
        assert ours.success_rate > other.success_rate, other.configuration
    assert ours.spurious_ejections == 0
    assert ours.no_eligible_while_alive == 0
    first_strike = next(r for r in baselines if r.configuration == "first-strike eviction")
    assert first_strike.spurious_ejections > 0
    assert first_strike.no_eligible_while_alive > 0  # it drains the pool
    constant = next(r for r in baselines if r.configuration == "constant-window breaker")
    assert ours.probes_to_dead < constant.probes_to_dead


def test_scenario_errors_name_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[[endpoints]]\nid = "a"\nphases = [{ start = 0, fault = "sometimes" }]\n')
    with pytest.raises(poise.ConfigError) as info:
        sim.load_scenario(bad)
    assert info.value.knob == f"{bad}: endpoints[0].phases[0].fault"
    with pytest.raises(poise.ConfigError):
        sim.load_scenario("no-such-scenario")
    bad.write_text("name = ")
    with pytest.raises(poise.ConfigError):
        sim.load_scenario(bad)


def test_cli_simulate_json_and_plot(small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "timeline.png"
    assert main(["simulate", str(small), "--json", "--plot", str(plot)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data[0]["scenario"] == "small"
    assert len(data[0]["results"]) == 5
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_cli_simulate_table_and_list(small: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(small)]) == 0
    out = capsys.readouterr().out
    assert "poise_py default" in out
    assert "naive round-robin" in out
    assert main(["simulate", "--list"]) == 0
    assert "grpc-worker-pool" in capsys.readouterr().out
    assert main(["simulate", "nope"]) == 2


def test_fleet_coordinated_backoff_probes_a_dead_dependency_far_less() -> None:
    report = builtin_report("fleet-shared-breaker")
    by_name = {r.configuration: r for r in report.results}
    local = by_name["poise_py default"]
    coordinated = by_name["poise_py coordinated"]
    constant = by_name["constant-window breaker"]
    assert coordinated.probes_to_dead * 5 < local.probes_to_dead  # one probe per 30 s fleet-wide
    assert local.probes_to_dead * 5 < constant.probes_to_dead
    assert all(r.spurious_ejections == 0 for r in report.results)


def test_discovery_churn_last_known_good_outlives_a_dead_publisher() -> None:
    report = builtin_report("discovery-churn")
    by_name = {r.configuration: r for r in report.results}
    last_known_good = by_name["poise_py default"]
    fail_closed = by_name["poise_py fail-closed"]
    unguarded = by_name["poise_py, max_ejection_percent = 1.0"]
    assert fail_closed.success_rate < last_known_good.success_rate
    assert last_known_good.success_rate > by_name["naive round-robin"].success_rate
    # The live member answers, so the guard lets every departed member go: the default
    # does as well as no guard at all.
    assert last_known_good.success_rate == unguarded.success_rate > 0.999
    assert last_known_good.probes_to_dead <= unguarded.probes_to_dead
    assert all(r.spurious_ejections == 0 for r in report.results)


def test_llm_gateway_tier_waterfall_keeps_serving_through_rate_limits_and_a_revoked_key() -> None:
    report = builtin_report("llm-gateway")
    ours, naive, first_strike, _constant = report.results
    assert ours.success_rate > 0.999
    assert ours.success_rate > naive.success_rate
    assert ours.success_rate > first_strike.success_rate
    assert ours.spurious_ejections == 0
    assert ours.no_eligible_while_alive == 0


FLEET = """
name = "small-fleet"
seed = 9

[fleet]
instances = 5

[traffic]
rps = 10
duration = 300
attempts = 1

[[endpoints]]
id = "dep"
phases = [{ start = 0 }, { start = 30, error_rate = 1.0 }, { start = 200 }]

[[configurations]]
name = "coordinated"
coordination = true
"""


def test_a_coordinated_fleet_run_is_deterministic_too(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(FLEET)
    scenario = sim.load_scenario(path)
    first = json.dumps(sim.run(scenario).to_json(), sort_keys=True)
    assert first == json.dumps(sim.run(scenario).to_json(), sort_keys=True)
    coordinated = sim.run(scenario).results[-1]
    local = sim.run(scenario).results[0]
    assert coordinated.probes_to_dead < local.probes_to_dead


# -- what the client observes -------------------------------------------------------------

GRPC_CLASSIFY = poise.classify.grpc(marker=("wool-fault", "worker-internal"))


@pytest.mark.parametrize(
    ("protocol", "observation", "classifier", "expected"),
    [
        # A gRPC client's deadline is DEADLINE_EXCEEDED: TRANSIENT, as classify.grpc() says (not SUSPECT).
        (Protocol.GRPC, Timeout(), GRPC_CLASSIFY, poise.Fault.TRANSIENT),
        (Protocol.GRPC, Refused(), GRPC_CLASSIFY, poise.Fault.TRANSIENT),
        (Protocol.GRPC, GrpcStatus(code="INTERNAL"), GRPC_CLASSIFY, poise.Fault.SUSPECT),
        (
            Protocol.GRPC,
            GrpcStatus(code="INTERNAL", trailing=(("wool-fault", "worker-internal"),)),
            GRPC_CLASSIFY,
            poise.Fault.FATAL,
        ),
        (Protocol.HTTP, Timeout(), poise.classify.http(), poise.Fault.SUSPECT),
        (Protocol.HTTP, Refused(), poise.classify.http(), poise.Fault.SUSPECT),
        (Protocol.HTTP, HttpStatus(status=401), poise.classify.http(), poise.Fault.PERMANENT),
        (Protocol.PLAIN, Timeout(), poise.default_classifier, poise.Fault.SUSPECT),
        (Protocol.PLAIN, Refused(), poise.default_classifier, poise.Fault.SUSPECT),
        (Protocol.PLAIN, Stated(fault=poise.Fault.FATAL), poise.default_classifier, poise.Fault.FATAL),
        (Protocol.GRPC, Stated(fault=poise.Fault.FATAL), GRPC_CLASSIFY, poise.Fault.FATAL),
    ],
)
def test_an_observation_is_classified_as_the_real_preset_classifies_it(
    protocol: Protocol, observation: Observation, classifier: poise.classify.Classifier, expected: poise.Fault
) -> None:
    verdict = classifier(exception_for(observation, protocol))
    fault = verdict.fault if isinstance(verdict, poise.Classification) else verdict
    assert fault is expected


def test_observations_are_the_client_libraries_own_exceptions() -> None:
    import grpc.aio
    import httpx

    deadline = exception_for(Timeout(), Protocol.GRPC)
    assert isinstance(deadline, grpc.aio.AioRpcError)
    assert deadline.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    throttled = exception_for(HttpStatus(status=429, retry_after=60), Protocol.HTTP)
    assert isinstance(throttled, httpx.HTTPStatusError)
    assert poise.classify.http()(throttled) == poise.Classification(poise.Fault.TRANSIENT, retry_after=60.0)
    assert isinstance(exception_for(Refused(), Protocol.HTTP), httpx.ConnectError)
    assert isinstance(exception_for(Refused(), Protocol.PLAIN), ConnectionRefusedError)


def test_the_grpc_pool_scenario_judges_its_workers_with_classify_grpc() -> None:
    scenario = sim.load_scenario("grpc-worker-pool")
    assert scenario.client.protocol is Protocol.GRPC
    ids = {m.id for m in scenario.endpoints}
    assert {"w6", "w7"} <= ids  # a worker that dies (refused) and one that black-holes
    assert isinstance(next(m for m in scenario.endpoints if m.id == "w6").phase_at(1000).error, Refused)
    assert isinstance(next(m for m in scenario.endpoints if m.id == "w7").phase_at(1000).error, Timeout)


def test_former_builtin_names_are_accepted_as_aliases() -> None:
    assert sim.load_scenario("seed-000-grpc-pool").name == "grpc-worker-pool"
    assert sim.load_scenario("seed-001-llm-tiers").name == "llm-gateway"
    assert sim.load_scenario("seed-002-fleet").name == "fleet-shared-breaker"


def test_builtin_scenarios_speak_to_users_without_internal_labels() -> None:
    for name in sim.builtin_names():
        scenario = sim.load_scenario(name)
        assert not re.search(r"seed[ -]?\d{3}|design [AB]|Poise's own", scenario.name + scenario.description), name


# -- validation ---------------------------------------------------------------------------

GOOD = {
    "name": "t",
    "traffic": {"rps": 10, "duration": 5, "attempts": 2},
    "endpoints": [{"id": "a", "count": 2, "phases": [{"start": 0}, {"start": 2, "http": 503}]}],
    "configurations": [{"name": "c", "circuit": {"window": {"kind": "time", "duration": 5.0}}}],
}


def mutated(path: tuple[object, ...], value: object) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "knob"),
    [
        (("traffic", "rps"), -5, "traffic.rps"),
        (("traffic", "rps"), 0, "traffic.rps"),
        (("traffic", "rps"), float("nan"), "traffic.rps"),
        (("traffic", "attempts"), 0, "traffic.attempts"),
        (("traffic", "attempts"), 2.5, "traffic.attempts"),
        (("traffic", "duration"), 10**400, "traffic.duration"),
        (("traffic", "burst"), 3, "traffic.burst"),
        (("endpoints", 0, "count"), 10**12, "endpoints[0].count"),
        (("endpoints", 0, "count"), "4", "endpoints[0].count"),
        (("endpoints", 0, "colour"), "red", "endpoints[0].colour"),
        (("endpoints", 0, "phases", 1, "http"), 200, "endpoints[0].phases[1].http"),
        (("endpoints", 0, "phases", 1, "grpc"), "INTERNAL", "endpoints[0].phases[1]."),
        (("endpoints", 0, "phases", 1, "error_rate"), 2, "endpoints[0].phases[1].error_rate"),
        (("configurations", 0, "circuit", "window", "kind"), "sliding", "configurations[0].circuit.window.kind"),
        (
            ("configurations", 0, "circuit", "escalation"),
            {"backoff": "cubic"},
            "configurations[0].circuit.escalation.backoff",
        ),
        (("configurations", 0, "circuit", "consecutive_failures"), "five", "configurations[0].circuit"),
        (("configurations", 0, "policy"), "fastest", "configurations[0].policy"),
        (("configurations", 0, "classifier"), "soap", "configurations[0].classifier"),
        (("client",), {"protocol": "smtp"}, "client.protocol"),
        (("seed",), "x", "seed"),
    ],
)
def test_every_scenario_field_is_validated_up_front_naming_table_and_field(
    path: tuple[object, ...], value: object, knob: str
) -> None:
    with pytest.raises(poise.ConfigError) as info:
        sim.parse_scenario(mutated(path, value))
    assert info.value.knob.startswith(knob), info.value.knob


def test_a_bad_scenario_file_is_one_line_naming_the_file_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    for body in (
        "[traffic]\nrps = -5\n",
        "[traffic]\nattempts = 0\n",
        '[traffic]\nrps = 10\n[[endpoints]]\nid = "a"\ncount = 100000000\n',
        '[[endpoints]]\nid = "a"\ncount = "lots"\n',
        '[[configurations]]\nname = "c"\ncircuit = { escalation = { backoff = "cubic" } }\n',
        '[[configurations]]\nname = "c"\ncircuit = { window = { kind = "sliding" } }\n',
    ):
        bad.write_text('name = "bad"\n' + body + ("" if "[[endpoints]]" in body else '[[endpoints]]\nid = "a"\n'))
        assert main(["simulate", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert str(bad) in err
        assert "Traceback" not in err


def test_plot_to_an_unwritable_path_fails_before_simulating(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the simulation ran")

    monkeypatch.setattr(sim, "run", no_run)
    assert main(["simulate", str(small), "--plot", str(tmp_path / "missing" / "t.png")]) == 2
    assert main(["simulate", str(small), "--plot", str(tmp_path / "t.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2
    assert not (tmp_path / "t.txt").exists()


def test_json_into_a_closed_pipe_exits_quietly(small: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(  # noqa: S603 - our own CLI
        [sys.executable, "-m", "poise_py.cli", "simulate", str(small), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=root,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before anything is written, like `| head -0`
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err
    assert b"BrokenPipe" not in err
    assert proc.returncode == 0


def test_list_prints_whole_first_sentences(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(sim.builtin_names())
    for line in lines:
        name, summary = line.split(": ", 1)
        assert summary.endswith("."), line
        assert summary == sim.first_sentence(sim.load_scenario(name).description)
    assert sim.first_sentence("Dies at t=20 s, e.g. classify.grpc() says so. Then more.") == (
        "Dies at t=20 s, e.g. classify.grpc() says so."
    )


def test_the_time_axis_follows_the_scenario_text() -> None:
    assert time_unit("w2 fails from minute 5 to minute 20", 1800) == (60.0, "minutes")
    assert time_unit("dies at t=20 s and recovers at t=60 s", 120) == (1.0, "seconds")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    doc=st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.integers(min_value=-(10**400), max_value=10**400)
        | st.floats()
        | st.text(max_size=20),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "name",
                        "traffic",
                        "endpoints",
                        "id",
                        "count",
                        "phases",
                        "rps",
                        "attempts",
                        "grpc",
                        "http",
                        "client",
                        "configurations",
                        "circuit",
                        "window",
                        "kind",
                        "fleet",
                        "discovery",
                        "error_rate",
                        "capacity",
                        "max_queue",
                        "warmup",
                        "quota",
                        "overload",
                        "é\u200b",
                    ]
                )
                | st.text(max_size=8),
                children,
                max_size=5,
            )
        ),
        max_leaves=25,
    )
)
def test_any_toml_like_document_is_one_config_error_or_a_valid_scenario(doc: object) -> None:
    try:
        scenario = sim.parse_scenario(doc)  # type: ignore[arg-type]
    except poise.ConfigError:
        return
    assert scenario.endpoints
    assert scenario.traffic.rps > 0


# -- the goal: the default wins every multi-endpoint scenario ------------------------------

DEFAULT = "poise_py default"
BASELINES = ("naive round-robin", "first-strike eviction", "constant-window breaker")
GOAL_SCENARIOS = [
    pytest.param("grpc-worker-pool", id="grpc-worker-pool"),
    pytest.param("llm-gateway", id="llm-gateway"),
    pytest.param("discovery-churn", id="discovery-churn"),
]


def test_the_goal_covers_every_builtin_scenario_with_more_than_one_endpoint() -> None:
    scenarios = [sim.load_scenario(n) for n in sim.builtin_names()]
    multi = {s.name for s in scenarios if len(s.endpoints) > 1 and not s.loaded}
    # The fleet's shared breaker (one dependency) is the coordination work's goal; the load
    # scenarios (endpoints with a capacity) have goals of their own, in test_load.py.
    assert multi == {p.values[0] for p in GOAL_SCENARIOS}


@pytest.mark.parametrize("name", GOAL_SCENARIOS)
def test_the_default_succeeds_at_least_as_often_as_every_baseline_and_probes_the_dead_no_more_than_the_constant_window_breaker(
    name: str,
) -> None:
    by_name = {r.configuration: r for r in builtin_report(name).results}
    ours = by_name[DEFAULT]
    for baseline in BASELINES:
        assert ours.successes >= by_name[baseline].successes, baseline
    assert ours.probes_to_dead <= by_name["constant-window breaker"].probes_to_dead


@settings(max_examples=150, deadline=None)
@given(
    text=st.one_of(
        st.text(max_size=200),
        st.builds(
            lambda depth, number, key: (
                f'name = "x"\n[traffic]\nrps = {number}\n[[endpoints]]\nid = "{key}"\nphases = '
                + "[" * depth
                + "]" * depth
                + "\n"
            ),
            st.integers(min_value=0, max_value=3000),
            st.integers(min_value=-(10**30), max_value=10**30) | st.sampled_from(["inf", "nan", '"9"', "1e999"]),
            st.text(
                alphabet=st.characters(blacklist_categories=["Cs", "Cc"], blacklist_characters='"\\'),
                min_size=1,
                max_size=10,
            ),
        ),
    )
)
def test_any_scenario_file_is_one_config_error_or_a_valid_scenario(text: str) -> None:
    path = FUZZ_DIR / "fuzz.toml"
    path.write_text(text, encoding="utf-8")
    try:
        sim.load_scenario(path)
    except poise.ConfigError as exc:
        error: poise.ConfigError | None = exc
    else:
        error = None
    assert error is None or str(path) in str(error)


FUZZ_DIR = Path(tempfile.mkdtemp(prefix="poise-sim-fuzz-"))
