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
