"""Every runnable Python block in the docs runs.

The convention (also in docs/index.md, "Code in these pages"): a fenced block opened
with exactly ```` ```python ```` in README.md, docs/*.md or docs/**/*.md is a complete
program, and this test runs it in a fresh interpreter (with this checkout first on
``sys.path``) and expects exit status 0. An illustrative fragment (it uses names it does
not define, or needs a service the reader has and the test has not) is marked with the
HTML comment ``<!-- fragment -->`` on the line just before its opening fence: invisible
in the rendered page, explicit in the source. Blocks in other languages (``text``,
``console``, ``toml``...) are never run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRAGMENT = "<!-- fragment -->"
OPEN = re.compile(r"^```python\s*$")


def blocks(path: Path) -> list[tuple[int, str, bool]]:
    """(line number, source, runnable) for each ```python block of ``path``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[tuple[int, str, bool]] = []
    i = 0
    while i < len(lines):
        if OPEN.match(lines[i]):
            start = i
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            runnable = not (start > 0 and lines[start - 1].strip() == FRAGMENT)
            found.append((start + 1, "\n".join(lines[start + 1 : j]) + "\n", runnable))
            i = j
        i += 1
    return found


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


RUNNABLE = [
    pytest.param(path, line, source, id=f"{path.relative_to(ROOT)}:{line}")
    for path in documents()
    for line, source, runnable in blocks(path)
    if runnable
]


@pytest.mark.parametrize(("path", "line", "source"), RUNNABLE)
def test_a_runnable_docs_block_runs_to_completion(path: Path, line: int, source: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(  # noqa: S603 - our interpreter, our docs
        [sys.executable, "-W", "error", "-c", source],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{path.relative_to(ROOT)}:{line} failed:\n{done.stderr}"


def test_blocks_are_found_and_fragments_are_told_apart(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n```python\nprint(1)\n```\n\n<!-- fragment -->\n```python\nawait lb.call(f)\n```\n\n"
        "```text\nnot python\n```\n",
        encoding="utf-8",
    )
    assert blocks(page) == [(3, "print(1)\n", True), (8, "await lb.call(f)\n", False)]


def test_the_docs_hold_runnable_blocks() -> None:
    assert len(RUNNABLE) >= 5
