"""``poise demo`` against real loopback HTTP servers: poise_py comes out ahead."""

from __future__ import annotations

from typing import Any

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


def test_ctrl_c_ends_the_demo_cleanly() -> None:
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "poise_py.cli", "demo", "--requests", "1000000", "--no-live"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert "poise demo" in proc.stdout.readline()  # the backends are being started
        # Let the run get inside its task groups, so the interrupt crosses them (this waits
        # for a process to get going; nothing here measures time).
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()  # reaped here, whatever happened: no ResourceWarning in a later test
    assert proc.returncode == 130
    assert "Traceback" not in err
    assert "interrupted" in err


def _render(renderable: object, width: int = 80) -> str:
    from rich.console import Console

    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    console.print(renderable)
    return console.export_text()


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


@pytest.mark.parametrize("learns", [True, False], ids=["poise_py", "naive"])
def test_live_tables_keep_whole_headers_at_80_columns_with_the_widest_values(learns: bool) -> None:
    from poise_py._demo import NAIVE_COLUMNS, POISE_COLUMNS, table

    columns: tuple[str, ...]
    row: tuple[str, ...]
    if learns:
        columns = POISE_COLUMNS
        row = ("rate-limited", "half-open", "123456", "16", "1234567", "123456", "12345", "12345")
    else:
        columns = NAIVE_COLUMNS
        row = ("rate-limited", "16", "1234567", "1234567", "100%")
    text = _render(table("naive round-robin: 1000000/1000000 requests", columns, [row] * 6))
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    header = next(line for line in text.splitlines() if line.split()[:1] == ["endpoint"])
    assert header.split() == " ".join(columns).split()
    assert " ".join(row) == " ".join(text.splitlines()[-1].split())


@pytest.mark.anyio
@pytest.mark.parametrize("learns", [True, False], ids=["poise_py", "naive"])
async def test_live_tables_fit_80_columns_and_naive_shows_only_its_traffic(learns: bool) -> None:
    import poise_py as poise
    from poise_py._demo import BEHAVIOURS, EventLog, _live_view, build_balancers

    endpoints = [poise.Endpoint(name, address=1) for name, _ in BEHAVIOURS]
    balancers = {name: (lb, flag) for name, lb, flag in build_balancers(endpoints, seed=1)}
    lb, flag = balancers["poise_py" if learns else "naive round-robin"]
    assert flag is learns
    log = EventLog()
    log(poise.EndpointEjected(at=0.0, endpoint_id="rate-limited", cause=poise.Cause.RETRY_AFTER))
    log(poise.EndpointReadmitted(at=0.0, endpoint_id="rate-limited", cause=poise.Cause.PROBE_SUCCEEDED))
    async with lb:
        text = _render(_live_view("poise_py: 123456/300000 requests", lb, log, learns=learns))
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    header = next(line for line in text.splitlines() if line.split()[:1] == ["endpoint"]).split()
    if learns:
        assert header == ["endpoint", "state", "epoch", "in-flight", "ok", "faults", "ejected", "readmitted"]
        assert "rate-limited readmitted (probe succeeded)" in text
        assert "rate-limited ejected (retry after)" in text
    else:
        assert header == ["endpoint", "in-flight", "ok", "errors", "share", "of", "calls"]
        assert "readmitted" not in text
    for name, _ in BEHAVIOURS:
        assert name in text


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


def test_demo_web_serves_the_status_page_of_both_balancers_while_it_runs() -> None:
    import re
    import signal
    import subprocess
    import sys

    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "poise_py.cli", "demo", "--requests", "1000000", "--no-live", "--web"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        match = None
        while match is None and len(lines) < 5:  # the intro, then the page's address
            lines.append(proc.stdout.readline())
            match = re.search(r"status page: (http://127\.0\.0\.1:\d+/)", lines[-1])
        assert match is not None, lines
        url = match.group(1)
        page = httpx.get(url, timeout=10)
        data = httpx.get(url + "status.json", timeout=10).json()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()  # reaped here, whatever happened: no ResourceWarning in a later test
    assert page.status_code == 200
    assert [b["name"] for b in data["balancers"]] == ["poise_py", "naive round-robin"]
    assert len(data["balancers"][0]["endpoints"]) == 6
    assert proc.returncode == 130  # Ctrl-C stops the server with everything else
    assert "Traceback" not in err


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
