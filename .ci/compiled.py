"""Run the test suite on the optional compiled build (mypyc), from this tree.

Usage: ``python .ci/compiled.py [pytest args...]`` (``.ci/run`` and ``nox -s compiled``).

The wheel is built as a user builds it (``HATCH_BUILD_HOOK_ENABLE_MYPYC=true``, hatch-mypyc
in pip's isolated build environment), its extension modules are unpacked over this tree
(an extension module is imported before the ``.py`` beside it), the suite runs on them with
``POISE_EXPECT_COMPILED=1`` (``tests/shell/test_build.py`` fails if the import found the
other build), and they are removed again however the run ends. If ``POISE_COMPILED_WHEEL``
names a directory, the wheel is kept there (``.ci/run`` sets it): ``tests/docs/test_wheels.py``
installs that wheel instead of building its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(pytest_args: list[str]) -> int:
    """Build, unpack, run the suite with ``pytest_args``, clean up; pytest's exit status."""
    kept = os.environ.get("POISE_COMPILED_WHEEL")
    with tempfile.TemporaryDirectory() as scratch:
        out = kept or scratch
        env = {**os.environ, "HATCH_BUILD_HOOK_ENABLE_MYPYC": "true"}
        subprocess.run(  # noqa: S603 - this interpreter, fixed arguments
            [sys.executable, "-m", "build", "-q", "--wheel", "--outdir", out, str(ROOT)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (wheel,) = Path(out).glob("poise_py-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            built = [name for name in archive.namelist() if name.endswith((".so", ".pyd"))]
            archive.extractall(ROOT, built)
    print(f"compiled build: {len(built)} extension modules from {wheel.name}", flush=True)
    try:
        env = {**os.environ, "POISE_EXPECT_COMPILED": "1"}
        command = [sys.executable, "-m", "pytest", *pytest_args]
        return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode  # noqa: S603 - the caller's args
    finally:
        for name in built:
            (ROOT / name).unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
