"""``poise demo`` against real loopback HTTP servers: both balancers on the same traffic at once."""

from __future__ import annotations

import io
import random
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import attrs
import httpx
import pytest

import poise_py as poise
from poise_py.cli import main


def test_demo_runs_and_poise_is_ahead_of_naive_round_robin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--requests", "300", "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "poise_py" in out
    assert "naive round-robin" in out
    summary = out[out.index("poise_py served") :]
    ours, theirs = (float(part.split("%")[0].split()[-1]) for part in summary.split(" vs ")[:2])
    assert ours > theirs
    assert "steady-1 and steady-2: " in out  # what the steady backends went through, said either way


def _demo(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(  # noqa: S603 - this interpreter, the demo, the test's own arguments
        [sys.executable, "-m", "poise_py.cli", "demo", "--no-live", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _interrupt(proc: subprocess.Popen[str]) -> str:
    """Ctrl-C the demo; its stderr once it has exited."""
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return err


def _lines_until(proc: subprocess.Popen[str], pattern: str) -> re.Match[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    while len(lines) < 40:
        line = proc.stdout.readline()
        assert line, lines  # the demo ended before printing it
        lines.append(line)
        match = re.search(pattern, line)
        if match is not None:
            return match
    raise AssertionError(lines)


@pytest.fixture
def reaped() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes the test started, killed and reaped whatever happened (no ResourceWarning later)."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_ctrl_c_ends_the_demo_cleanly(reaped: list[subprocess.Popen[str]]) -> None:
    import time

    proc = _demo("--requests", "1000000")
    reaped.append(proc)
    _lines_until(proc, "poise demo")  # the backends are being started
    # Let the run get inside its task groups, so the interrupt crosses them (this waits
    # for a process to get going; nothing here measures time).
    time.sleep(1.0)
    err = _interrupt(proc)
    assert proc.returncode == 130
    assert "Traceback" not in err
    assert "interrupted" in err


HEADLINE = ["traffic", "success", "calls to the broken backend", "p50 / p99", "steady backends"]


def test_demo_web_shows_both_balancers_taking_the_same_traffic_at_once(reaped: list[subprocess.Popen[str]]) -> None:
    proc = _demo("--requests", "1000000", "--web", "--no-browser")
    reaped.append(proc)
    url = _lines_until(proc, r"status page: (http://127\.0\.0\.1:\d+/)$").group(1)
    page = httpx.get(url, timeout=10)
    with httpx.Client(base_url=url, timeout=10) as client:
        for _ in range(1000):  # until the first requests have gone out (the run is endless)
            data = client.get("status.json").json()
            if all(b["pool"]["issued"] for b in data["balancers"]):
                break
    err = _interrupt(proc)
    assert page.status_code == 200
    balancers = data["balancers"]
    assert [b["name"] for b in balancers] == ["poise_py", "naive round-robin"]
    assert all(b["running"] for b in balancers)
    assert [len(b["endpoints"]) for b in balancers] == [6, 6]
    assert all(b["pool"]["issued"] > 0 for b in balancers)
    assert [row["label"] for row in data["headline"]] == HEADLINE
    assert data["headline"][0]["text"].endswith("requests to each balancer, 200 a second, the same schedule")
    assert proc.returncode == 130  # Ctrl-C stops the server with everything else
    assert "Traceback" not in err


def test_demo_web_keeps_serving_the_final_figures_after_the_run_until_ctrl_c(
    reaped: list[subprocess.Popen[str]],
) -> None:
    proc = _demo("--requests", "20", "--web", "--no-browser")
    reaped.append(proc)
    url = _lines_until(proc, r"status page: (http://127\.0\.0\.1:\d+/)$").group(1)
    _lines_until(proc, "poise_py served")  # the summary: the traffic has ended
    _lines_until(proc, "the run has ended; the status page keeps serving the final figures at")
    page = httpx.get(url, timeout=10)
    first = httpx.get(url + "status.json", timeout=10).json()
    again = httpx.get(url + "status.json", timeout=10).json()
    assert proc.poll() is None  # still serving
    err = _interrupt(proc)
    assert page.status_code == 200
    assert first["headline"][0]["label"] == "run ended"
    assert first["headline"][0]["text"].startswith("20 requests to each balancer in ")
    assert first["headline"] == again["headline"]  # frozen
    for before, after in zip(first["balancers"], again["balancers"], strict=True):
        assert before["running"] is False
        assert [(e["id"], e["state"], e["counters"]) for e in before["endpoints"]] == [
            (e["id"], e["state"], e["counters"]) for e in after["endpoints"]
        ]
        assert before["pool"]["issued"] >= 20
    assert proc.returncode == 130
    assert "Traceback" not in err
    assert "interrupted" in err


def _console() -> Any:
    from rich.console import Console

    return Console(file=io.StringIO(), width=100, color_system=None)


@pytest.mark.anyio
@pytest.mark.real_clock
async def test_the_page_shows_both_balancers_with_their_endpoints_before_the_traffic_and_frozen_after() -> None:
    from poise_py._demo import STEADY, _main

    seen: dict[str, Any] = {}

    async def browse(url: str) -> str:
        seen["url"] = url
        async with httpx.AsyncClient(base_url=url) as client:
            seen["before"] = (await client.get("status.json")).json()
        return "a test opened it"

    async def linger() -> None:
        async with httpx.AsyncClient(base_url=seen["url"]) as client:
            seen["page"] = await client.get("")
            seen["after"] = [(await client.get("status.json")).json() for _ in range(2)]

    console = _console()
    with anyio.fail_after(120):  # a safety net for a hang, not a measurement
        runs = await _main(100, 7, console, live=False, web=0, browse=browse, linger=linger)
    out = console.file.getvalue()
    assert f"status page: {seen['url']} (a test opened it)" in out
    before = seen["before"]
    assert [b["name"] for b in before["balancers"]] == ["poise_py", "naive round-robin"]
    assert all(b["running"] for b in before["balancers"])
    assert [len(b["endpoints"]) for b in before["balancers"]] == [6, 6]
    assert [row["label"] for row in before["headline"]] == HEADLINE
    assert before["headline"][0]["text"].startswith("0/100 requests to each balancer")

    assert seen["page"].status_code == 200
    first, again = seen["after"]
    assert first["headline"] == again["headline"]
    assert first["headline"][0] == {
        "label": "run ended",
        "text": first["headline"][0]["text"],
    }
    assert first["headline"][0]["text"].startswith("100 requests to each balancer in ")
    assert [r.requests for r in runs] == [100, 100]
    assert first["headline"][1]["text"] == (
        f"poise_py {_percent_of(runs[0])} · naive round-robin {_percent_of(runs[1])}"
    )
    # The steady backends are never taken out of rotation, and the page says what they went
    # through: no faults, or how far this process fell behind when its own timeouts hit them.
    steady_row = first["headline"][-1]["text"]
    for balancer in first["balancers"]:
        assert balancer["running"] is False
        for endpoint in balancer["endpoints"]:
            if endpoint["id"] in STEADY:
                assert (endpoint["state"], endpoint["degraded"], endpoint["counters"]["ejections"]) == (
                    "closed",
                    False,
                    0,
                )
    faults = sum(
        sum(e["counters"]["faults"].values()) for b in first["balancers"] for e in b["endpoints"] if e["id"] in STEADY
    )
    if faults:
        assert "event loop fell up to" in steady_row
    else:
        assert steady_row == "no faults with either balancer (each answers in 2-6 ms)"


def _percent_of(run: Any) -> str:
    from poise_py._demo import _percent

    return _percent(run.success_rate)


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The addresses the demo asked the browser to open (never a real browser), on a display."""
    import webbrowser

    opened: list[str] = []

    def record(url: str, *args: object, **kwargs: object) -> bool:
        opened.append(url)
        return True

    async def no_wait() -> None:
        return None  # instead of waiting for Ctrl-C once the run has ended

    monkeypatch.setattr(webbrowser, "open", record)
    monkeypatch.setattr("poise_py._demo._has_display", lambda: True)
    monkeypatch.setattr("poise_py._demo._until_ctrl_c", no_wait)
    return opened


def _address(out: str) -> str:
    match = re.search(r"status page: (http://127\.0\.0\.1:\d+/)", out)
    assert match is not None, out
    return match.group(1)


def test_demo_web_opens_the_page_in_the_browser(browser: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--web", "--requests", "20", "--no-live"]) == 0
    out = capsys.readouterr().out
    assert browser == [_address(out)]
    assert f"status page: {browser[0]} (opened in your browser)" in out


def test_demo_web_no_browser_only_prints_the_address(browser: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--web", "--no-browser", "--requests", "20", "--no-live"]) == 0
    out = capsys.readouterr().out
    assert browser == []
    assert re.search(r"status page: http://127\.0\.0\.1:\d+/\n", out)


def test_demo_web_without_a_display_says_so_instead_of_starting_a_text_browser(
    browser: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("poise_py._demo._has_display", lambda: False)
    assert main(["demo", "--web", "--requests", "20", "--no-live"]) == 0
    assert browser == []
    assert "(no graphical display here: open it in a browser)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("platform", "env", "display"),
    [
        ("linux", {}, False),
        ("linux", {"DISPLAY": ":0"}, True),
        ("linux", {"WAYLAND_DISPLAY": "wayland-0"}, True),
        ("darwin", {}, True),
        ("win32", {}, True),
    ],
)
def test_a_browser_is_opened_only_where_a_graphical_one_can_be(
    platform: str, env: dict[str, str], display: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from poise_py import _demo

    for name in ("DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "platform", platform)  # the one _demo reads
    assert _demo._has_display() is display


def _runs_over(endpoints: list[poise.Endpoint], cls: type[Any] | None = None) -> list[Any]:
    from poise_py._demo import Run, build_balancers

    make = cls or Run
    return [make(name, lb, learns, client=name) for name, lb, learns in build_balancers(endpoints, seed=1)]


@attrs.define(eq=False)
class _Recorded:
    """What the pacer handed a balancer: when each request was sent; each takes ``takes`` seconds."""

    takes: float = 0.0
    sent: list[float] = attrs.field(factory=list)


def _recording_runs(takes: float) -> list[Any]:
    from poise_py._demo import BEHAVIOURS, Run

    @attrs.define(eq=False)
    class Recorded(Run):
        record: _Recorded = attrs.field(factory=lambda: _Recorded(takes))

        async def request(self, http: dict[str, httpx.AsyncClient], at: float) -> None:
            assert at == anyio.current_time()
            assert sorted(http) == sorted(name for name, _ in BEHAVIOURS)  # a client per endpoint
            self.record.sent.append(at)
            await anyio.sleep(self.record.takes)
            self.done += 1

    return _runs_over([poise.Endpoint(name, address=1) for name, _ in BEHAVIOURS], Recorded)


@pytest.mark.anyio
@pytest.mark.virtual_asyncio
async def test_both_balancers_get_each_request_at_the_same_scheduled_instant() -> None:
    from poise_py._demo import RATE, _traffic

    runs = _recording_runs(takes=0.01)
    start = anyio.current_time()
    await _traffic(runs, 50, None)
    ours, naive = runs
    assert ours.record.sent == naive.record.sent  # one schedule, both balancers
    assert ours.record.sent == pytest.approx([start + i / RATE for i in range(50)])
    assert (ours.issued, naive.issued, ours.done, naive.done) == (50, 50, 50, 50)


@pytest.mark.anyio
@pytest.mark.virtual_asyncio
async def test_a_balancer_with_its_requests_all_unanswered_holds_the_schedule_for_both() -> None:
    from poise_py._demo import IN_FLIGHT, RATE, _traffic

    runs = _recording_runs(takes=1.0)
    start = anyio.current_time()
    await _traffic(runs, IN_FLIGHT + 1, None)
    sent = runs[0].record.sent
    assert sent == runs[1].record.sent
    assert sent[:IN_FLIGHT] == pytest.approx([start + i / RATE for i in range(IN_FLIGHT)])
    assert sent[IN_FLIGHT] == pytest.approx(start + 1.0)  # when the first answer freed a slot


def _backend(behaviour: str) -> tuple[Any, Any]:
    from poise_py._demo import Backend
    from tests.support.clocks import FakeClock

    clock = FakeClock()
    return Backend(behaviour, behaviour, random.Random(1), clock=clock), clock


def test_a_steady_backend_answers_every_call_in_two_to_six_ms() -> None:
    backend, _ = _backend("steady")
    answers = [backend.respond("poise_py") for _ in range(1000)]
    assert {status for status, _, _ in answers} == {200}
    assert all(0.002 <= delay <= 0.006 for _, _, delay in answers)


def test_the_rate_limit_is_each_clients_own() -> None:
    from poise_py._demo import RATE_LIMIT

    backend, clock = _backend("rate-limited")
    assert [backend.respond("poise_py")[0] for _ in range(RATE_LIMIT)] == [200] * RATE_LIMIT
    assert backend.respond("poise_py")[:2] == (429, [("retry-after", "2")])
    assert backend.respond("naive")[0] == 200  # the other balancer's quota is untouched
    clock.advance(1.0)
    assert backend.respond("poise_py")[0] == 200  # a second later the window has room again
    assert backend.hits == {"poise_py": RATE_LIMIT + 2, "naive": 1}


def test_the_flapping_backend_is_up_then_down_for_one_and_a_half_seconds_each() -> None:
    backend, clock = _backend("flapping")
    statuses = []
    for _ in range(6):
        statuses.append(backend.respond("naive")[0])
        clock.advance(0.75)
    assert statuses == [200, 200, 500, 500, 200, 200]


@pytest.mark.anyio
async def test_the_comparison_freezes_when_the_run_ends() -> None:
    from poise_py._demo import BEHAVIOURS, Backend, Comparison, LoopLag

    endpoints = [poise.Endpoint(name, address=1) for name, _ in BEHAVIOURS]
    runs = _runs_over(endpoints)
    backends = {name: Backend(name, kind, random.Random(1)) for name, kind in BEHAVIOURS}
    comparison = Comparison(runs, 10, backends, LoopLag())
    async with runs[0].lb, runs[1].lb:
        for run in runs:
            run.issued, run.done, run.successes = 4, 4, 3
        assert comparison.rows()[:2] == [
            ("traffic", "4/10 requests to each balancer, 200 a second, the same schedule"),
            ("success", "poise_py 75.0% · naive round-robin 75.0%"),
        ]
        comparison.finish(1.25)
        final = comparison.rows()
        runs[0].done, runs[0].successes = 10, 10
        backends["broken"].respond("poise_py")
        assert comparison.rows() == final
    assert final[0] == ("run ended", "4 requests to each balancer in 1.2 s; final figures, served until Ctrl-C")
    assert final[2] == ("calls to the broken backend", "poise_py 0 · naive round-robin 0")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("errors", "says"),
    [
        ({"ReadTimeout": 2}, "fell up to 80 ms behind, and the clients' 200 ms timeout counts that delay too"),
        ({"RemoteProtocolError": 1, "ReadTimeout": 1}, "fell up to 80 ms behind"),
    ],
)
async def test_the_steady_row_says_what_the_steady_backends_went_through(errors: dict[str, int], says: str) -> None:
    from collections import Counter

    from poise_py._demo import BEHAVIOURS, Backend, Comparison, LoopLag

    runs = _runs_over([poise.Endpoint(name, address=1) for name, _ in BEHAVIOURS])
    backends = {name: Backend(name, kind, random.Random(1)) for name, kind in BEHAVIOURS}
    comparison = Comparison(runs, 10, backends, LoopLag(worst=0.08))
    ours = runs[0]
    async with ours.lb, runs[1].lb:
        assert comparison.steady() == "no faults with either balancer (each answers in 2-6 ms)"
        for _ in range(sum(errors.values())):
            permit = ours.lb.acquire(exclude=[name for name, _ in BEHAVIOURS if name != "steady-1"])
            async with permit:
                permit.fail(poise.Fault.SUSPECT)
        ours.steady_errors = Counter(errors)
        text = comparison.steady()
    total = sum(errors.values())
    assert text.startswith(f"faults: poise_py {total}, naive round-robin 0 (")
    assert says in text
    if "RemoteProtocolError" in errors:
        assert "timeout counts" not in text  # not every fault was a timeout: no such claim


def _render(renderable: object, width: int = 80) -> str:
    from rich.console import Console

    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_the_live_table_keeps_whole_headers_at_80_columns_with_the_widest_values() -> None:
    from poise_py._demo import LIVE_COLUMNS, table

    row = ("rate-limited", "half-open", "1234567", "123456", "12345", "12345", "1234567", "1234567")
    text = _render(table("poise_py and naive round-robin: 1000000/1000000 requests each", LIVE_COLUMNS, [row] * 6))
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["endpoint"])
    assert lines[header - 1].split() == ["naive", "naive"]
    assert lines[header].split() == ["endpoint", "state", "ok", "faults", "ejected", "readmitted", "ok", "errors"]
    assert " ".join(row) == " ".join(text.splitlines()[-1].split())


@pytest.mark.anyio
async def test_the_live_view_shows_both_balancers_per_endpoint_and_the_comparison_in_80_columns() -> None:
    from poise_py._demo import BEHAVIOURS, Backend, Comparison, LoopLag, live_view

    runs = _runs_over([poise.Endpoint(name, address=1) for name, _ in BEHAVIOURS])
    backends = {name: Backend(name, kind, random.Random(1)) for name, kind in BEHAVIOURS}
    comparison = Comparison(runs, 300000, backends, LoopLag())
    ours = runs[0]
    ours.log(poise.EndpointEjected(at=0.0, endpoint_id="rate-limited", cause=poise.Cause.RETRY_AFTER))
    ours.log(poise.EndpointReadmitted(at=0.0, endpoint_id="rate-limited", cause=poise.Cause.PROBE_SUCCEEDED))
    async with ours.lb, runs[1].lb:
        text = _render(live_view(comparison))
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    lines = text.splitlines()
    assert lines[0].startswith("poise_py and naive round-robin: 0/300000 requests each")
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["endpoint"])
    assert lines[header - 1].split() == ["naive", "naive"]  # over its own two columns
    assert lines[header].split() == ["endpoint", "state", "ok", "faults", "ejected", "readmitted", "ok", "errors"]
    for name, _ in BEHAVIOURS:
        assert any(line.startswith(name) for line in lines)
    for label in ("success:", "calls to the broken backend:", "p50 / p99:", "steady backends:"):
        assert any(line.startswith(label) for line in lines), label
    assert "rate-limited readmitted (probe succeeded)" in text
    assert "rate-limited ejected (retry after)" in text


def _runs() -> list[Any]:
    from poise_py._demo import RunSummary

    # Wide figures on purpose: a long run on a slow machine.
    return [
        RunSummary(
            name="poise_py",
            learns=True,
            requests=300000,
            successes=299999,
            p50=1.2345,
            p99=12.345,
            ejections=12345,
            readmissions=12345,
            probes=12345,
            broken_hits=12345,
            seconds=999.0,
        ),
        RunSummary(
            name="naive round-robin",
            learns=False,
            requests=300000,
            successes=200000,
            p50=0.5,
            p99=9.5,
            ejections=0,
            readmissions=0,
            probes=0,
            broken_hits=123456,
            seconds=999.0,
        ),
    ]


def test_the_summary_fits_80_columns_without_cutting_a_header() -> None:
    from poise_py._demo import summary_table

    text = _render(summary_table(_runs()))
    assert "…" not in text
    header = next(line for line in text.splitlines() if line.split()[:1] == ["balancer"])
    assert header.split() == ["balancer", "success", "p50", "p99", "ejected", "readmitted", "to", "broken"]
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    assert "99.9%" in text  # 299999 of 300000 is not rounded up to 100.0%


def test_the_summary_shows_dashes_where_naive_round_robin_has_no_circuits() -> None:
    from poise_py._demo import summary_table

    naive = next(line for line in _render(summary_table(_runs()), width=120).splitlines() if "naive" in line)
    assert naive.split()[-3:] == ["-", "-", "123456"]


def test_the_report_explains_the_latency_columns() -> None:
    text = " ".join(_render_report(_runs()).split())
    assert "failed ones included" in text
    assert "queueing" in text
    assert "quick failures" in text


def _render_report(runs: list[Any]) -> str:
    from rich.console import Console

    from poise_py._demo import report

    console = Console(width=80, record=True, force_terminal=False, color_system=None)
    report(runs, console)
    return console.export_text()


@pytest.mark.anyio
async def test_the_event_log_counts_a_readmission_as_it_happens() -> None:
    import poise_py as poise
    from poise_py._demo import EventLog
    from tests.support.clocks import TRIP_AT_ONCE, FakeClock, static_lb

    clock = FakeClock()
    lb = static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=clock)
    log = EventLog()
    lb.add_observer(log)
    async with lb:
        permit = lb.acquire(exclude=["b"])
        async with permit:
            permit.fail(poise.Fault.SUSPECT)
        assert (log.ejected["a"], log.readmitted["a"]) == (1, 0)
        clock.advance(31.0)
        probe = lb.acquire(exclude=["b"])
        async with probe:
            assert probe.probe
            probe.succeed()
    assert (log.ejected["a"], log.readmitted["a"]) == (1, 1)
    assert "a readmitted" in log.render().plain
    assert "probe succeeded" in log.render().plain


def test_demo_web_on_a_taken_port_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["demo", "--web", str(port), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"poise demo: cannot serve the status page on 127.0.0.1:{port}: ")
    assert err.count("\n") == 1


@pytest.mark.parametrize("port", ["-1", "65536", "http"])
def test_demo_web_refuses_a_port_that_is_not_one(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--web", port])
    assert exit_info.value.code == 2
    assert "--web" in capsys.readouterr().err


@pytest.mark.parametrize("requests", ["-1", "0"])
def test_demo_refuses_a_request_count_below_one(requests: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--requests", requests, "--no-live"])
    assert exit_info.value.code == 2
    assert "--requests" in capsys.readouterr().err


@pytest.mark.parametrize("requests", [-1, 0, True, 2.5])
def test_run_demo_refuses_a_request_count_below_one(requests: object) -> None:
    from poise_py._demo import run_demo

    with pytest.raises(poise.ConfigError) as caught:
        run_demo(requests=requests, live=False)  # type: ignore[arg-type]
    assert caught.value.knob == "requests"
