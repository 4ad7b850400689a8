"""The wheels users install: the compiled one for this platform and the pure one.

Each wheel is installed into a new virtual environment (``--system-site-packages``, so
anyio and attrs come from this environment and no index is needed; the venv's own
poise_py is the one imported, which ``wheel_smoke.py`` checks) and must name its build in
``poise --version`` and pass the smoke run. The compiled wheel is the one
``.ci/compiled.py`` built when ``POISE_COMPILED_WHEEL`` names its directory (``.ci/run``
sets it, so CI builds it once; ``dist/`` after ``nox -s wheels`` works too); otherwise it is built here (mypyc and a C compiler, about
half a minute) from an sdist, because mypyc writes its extension modules next to the
sources it compiles and this tree must stay as it is. No case skips.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from poise_py._version import VERSION

ROOT = Path(__file__).resolve().parents[2]
SMOKE = Path(__file__).with_name("wheel_smoke.py")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
THIS_PYTHON = f"cp{sys.version_info.major}{sys.version_info.minor}"


def _build(out: Path, *, compiled: bool) -> Path:
    """Build a wheel of this tree into ``out``; the compiled one through an sdist."""
    env = {**os.environ, "HATCH_BUILD_HOOK_ENABLE_MYPYC": "true" if compiled else "false"}
    # With no --wheel, build makes the sdist and then the wheel from it, in a temporary copy.
    command = [sys.executable, "-m", "build", "-q", "--outdir", str(out), str(ROOT)]
    if not compiled:
        command.insert(4, "--wheel")
    subprocess.run(command, env=env, check=True, capture_output=True)  # noqa: S603 - this interpreter, fixed arguments
    (wheel,) = out.glob("poise_py-*.whl")
    return wheel


@pytest.fixture(scope="module")
def pure_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("pure"), compiled=False)


@pytest.fixture(scope="module")
def compiled_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    kept = os.environ.get("POISE_COMPILED_WHEEL")
    if kept:  # .ci/compiled.py's directory, or dist/ after `nox -s wheels`
        (wheel,) = [w for w in Path(kept).glob("poise_py-*.whl") if not w.name.endswith("-none-any.whl")]
        return wheel
    return _build(tmp_path_factory.mktemp("compiled"), compiled=True)


def _install(wheel: Path, where: Path) -> Path:
    """A fresh venv holding ``wheel``; its ``bin`` directory."""
    venv.create(where, system_site_packages=True, with_pip=False)
    bin_dir = where / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / "python"
    subprocess.run(  # noqa: S603 - this interpreter's pip, our wheel
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    return bin_dir


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # Outside the tree and without PYTHONPATH: only the venv's poise_py can be found.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, check=False)  # noqa: S603


def _extension_modules(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return [name for name in archive.namelist() if name.endswith((".so", ".pyd"))]


def test_the_pure_wheel_installs_anywhere_and_says_it_is_pure_python(pure_wheel: Path, tmp_path: Path) -> None:
    assert pure_wheel.name == f"poise_py-{VERSION}-py3-none-any.whl"
    assert _extension_modules(pure_wheel) == []
    bin_dir = _install(pure_wheel, tmp_path / "venv")
    version = _run([str(bin_dir / "poise"), "--version"], tmp_path)
    assert version.returncode == 0, version.stderr
    assert version.stdout == f"poise_py {VERSION} (pure Python)\n"
    smoke = _run([str(bin_dir / "python"), str(SMOKE), "pure"], tmp_path)
    assert smoke.returncode == 0, smoke.stderr
    assert smoke.stdout.startswith(f"pure build from {tmp_path / 'venv'}")


def test_the_compiled_wheel_is_for_this_python_and_says_it_is_compiled(compiled_wheel: Path, tmp_path: Path) -> None:
    assert compiled_wheel.name.startswith(f"poise_py-{VERSION}-{THIS_PYTHON}-{THIS_PYTHON}-")
    assert any(name.startswith("poise_py/_core/_pool.") for name in _extension_modules(compiled_wheel))
    bin_dir = _install(compiled_wheel, tmp_path / "venv")
    version = _run([str(bin_dir / "poise"), "--version"], tmp_path)
    assert version.returncode == 0, version.stderr
    assert version.stdout == f"poise_py {VERSION} (compiled: mypyc)\n"
    smoke = _run([str(bin_dir / "python"), str(SMOKE), "compiled"], tmp_path)
    assert smoke.returncode == 0, smoke.stderr
    assert smoke.stdout.startswith(f"compiled build from {tmp_path / 'venv'}")


def test_the_smoke_run_refuses_the_other_build(pure_wheel: Path, tmp_path: Path) -> None:
    bin_dir = _install(pure_wheel, tmp_path / "venv")
    smoke = _run([str(bin_dir / "python"), str(SMOKE), "compiled"], tmp_path)
    assert smoke.returncode == 1
    assert "expected the compiled build, poise_py.COMPILED is False" in smoke.stderr


def test_cibuildwheel_builds_compiled_wheels_for_every_supported_python_on_three_systems() -> None:
    config = PYPROJECT["tool"]["cibuildwheel"]
    supported = [c.removeprefix("Programming Language :: Python :: ") for c in PYPROJECT["project"]["classifiers"]]
    minors = [v for v in supported if v.startswith("3.")]
    assert config["build"].split() == [f"cp{v.replace('.', '')}-*" for v in minors]
    assert config["environment"] == {"HATCH_BUILD_HOOK_ENABLE_MYPYC": "true"}
    assert "{project}/tests/docs/wheel_smoke.py compiled" in config["test-command"]
    assert "poise --version" in config["test-command"]
    for system in ("linux", "macos", "windows"):
        assert config[system]["archs"], system
    assert "*-musllinux_*" in config["skip"].split()
