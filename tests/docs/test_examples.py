"""Each example runs to completion and shows what it exists to show."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(  # noqa: S603 - our own interpreter and file
        [sys.executable, str(ROOT / "examples" / name)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "chttp2_transport" not in done.stderr, "gRPC core's own logging reached the reader"
    return done.stdout


def row(out: str, endpoint: str) -> str:
    (line,) = [line for line in out.splitlines() if line.startswith(endpoint + " ")]
    return line


def field(line: str, name: str) -> int:
    found = re.search(rf"{name}=(\d+)", line)
    assert found is not None, (name, line)
    return int(found.group(1))


def test_quickstart_example_ejects_and_readmits() -> None:
    out = run_example("quickstart.py")
    assert "after phase 2" in out


def test_http_client_example_answers_every_request_and_ejects_the_broken_server() -> None:
    out = run_example("http_client.py")
    assert "requests answered 200: 60/60" in out
    assert row(out, "bravo").split()[1] == "open"
    assert field(row(out, "bravo"), "ejections") == 1
    assert field(row(out, "charlie"), "transient") >= 1
    assert field(row(out, "charlie"), "suspect") == 0
    assert "EndpointEjected(bravo)" in out


def test_llm_gateway_example_never_probes_the_revoked_key_and_recovers_the_rate_limited_tier() -> None:
    out = run_example("llm_gateway.py")
    secondary = row(out, "secondary")
    assert "blocked" in secondary
    assert field(secondary, "probes") == 0
    assert field(secondary, "auth_failures") == 1
    primary = row(out, "primary")
    assert "closed" in primary
    assert field(primary, "successes") > 0
    assert field(primary, "rate_limited") == 1
    rate_limited = next(line for line in out.splitlines() if line.startswith("rate-limited"))
    assert "primary" not in rate_limited


@pytest.mark.filterwarnings("ignore")
def test_grpc_pool_example_evicts_only_the_marked_worker() -> None:
    out = run_example("grpc_pool.py")
    assert "ejected: w3 (fatal)" in out
    assert field(row(out, "w2"), "suspect") > 0
    assert "closed" in row(out, "w2")
    assert field(row(out, "w4"), "transient") > 0
    assert field(row(out, "w4"), "ejections") == 0
    assert "of 120" in out
    dispatched = re.search(r"dispatched: (\{.*\}) of 120", out)
    assert dispatched is not None
    assert sum(int(n) for n in re.findall(r": (\d+)", dispatched.group(1))) == 120
