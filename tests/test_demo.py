"""``poise demo`` against real loopback HTTP servers: poise_py comes out ahead."""

from __future__ import annotations

import pytest

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
    assert proc.returncode == 130
    assert "Traceback" not in err
    assert "interrupted" in err
