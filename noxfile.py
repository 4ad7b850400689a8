"""Developer tasks.

- ``nox`` runs ``tests`` on every supported Python (3.11, 3.12, 3.13), then ``lint`` (ruff)
  and ``typecheck`` (mypy --strict); ``nox -s tests-3.12`` runs the suite on one of them.
- ``nox -s coverage`` runs the suite once under pytest-cov over ``poise_py``, prints the
  report (missing lines) and fails under the floor in ``pyproject.toml``
  (``[tool.coverage.report] fail_under``). CI measures the same way: ``.ci/run`` sets
  ``PYTEST_ADDOPTS=--cov=poise_py`` for its single run of the README's test command. Add
  ``--no-venv`` (``nox --no-venv -s coverage``) to measure in the current environment.
- ``nox -s bench`` runs the benchmarks; ``nox -s docs`` builds the documentation site
  (strict); ``nox -s build`` builds the wheel and sdist and installs each into a clean
  virtualenv; ``nox -s wheels`` builds into ``dist/`` the compiled wheel for this platform
  (mypyc) and the pure ``py3-none-any`` one; ``nox -s verifytypes`` scores the public type
  surface with pyright.

Interpreters are looked up on ``PATH`` as ``python3.X``; pyenv installs under
``$PYENV_ROOT/versions/`` (default ``~/.pyenv``) are put on ``PATH`` first, so nox finds each
version without ``pyenv global``/``pyenv local`` listing them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True

PYTHONS = ["3.11"]
"""The oldest supported Python: the one lint, typecheck and the tools run on."""

SUPPORTED = ["3.11", "3.12", "3.13"]
"""Every Python the suite runs on (pyproject's classifiers)."""


def _pyenv_on_path() -> None:
    """Let nox find each pyenv-installed ``python3.X`` of :data:`SUPPORTED`.

    pyenv's shims answer ``python3.12`` only for the versions ``pyenv global`` lists, so nox
    would find a shim that refuses to run. Links to the real interpreters go in
    ``.nox/pythons``, put first on ``PATH``; it holds only ``python3.X`` names, so plain
    ``python`` (what ``--no-venv`` runs) is unchanged.
    """
    versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    links = Path(__file__).parent / ".nox" / "pythons"
    for python in SUPPORTED:
        candidates = sorted(versions.glob(f"{python}.*/bin/python{python}"))
        if not candidates:
            continue
        links.mkdir(parents=True, exist_ok=True)
        link = links / f"python{python}"
        link.unlink(missing_ok=True)
        link.symlink_to(candidates[-1])
    if links.is_dir():
        os.environ["PATH"] = os.pathsep.join([str(links), os.environ.get("PATH", "")])


_pyenv_on_path()


@nox.session(python=SUPPORTED)
def tests(session: nox.Session) -> None:
    session.install("-e", ".[dev]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(python=PYTHONS)
def coverage(session: nox.Session) -> None:
    """The suite under pytest-cov: prints the report, fails under ``fail_under``."""
    if session.venv_backend != "none":  # never install into the environment --no-venv runs in
        session.install("-e", ".[dev]")
    session.run("python", "-m", "pytest", "--cov=poise_py", *session.posargs)


@nox.session(python=PYTHONS)
def compiled(session: nox.Session) -> None:
    """The suite on the optional compiled build (mypyc; needs a C compiler), as CI runs it."""
    session.install("-e", ".[dev]")
    session.run("python", ".ci/compiled.py", *session.posargs)


@nox.session(python=PYTHONS)
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.8")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHONS)
def typecheck(session: nox.Session) -> None:
    session.install("-e", ".[dev]")
    session.run("mypy")


@nox.session(python=PYTHONS)
def bench(session: nox.Session) -> None:
    session.install("-e", ".[dev]")
    for script in (
        "bench/overhead.py",
        "bench/health.py",
        "bench/discovery.py",
        "bench/coordination.py",
        "bench/policies.py",
    ):
        session.run("python", script)


@nox.session(python=PYTHONS)
def docs(session: nox.Session) -> None:
    session.install("-e", ".[docs]")
    session.env["NO_MKDOCS_2_WARNING"] = "1"
    session.run("mkdocs", "build", "--strict", *session.posargs)


# What a bare install may pull in, and what it must not.
_OPTIONAL = ("httpx", "opentelemetry", "coredis", "grpc", "trio", "rich", "matplotlib")
_CHECK = (
    "import importlib.util, sys, poise_py\n"
    "assert poise_py.__file__.startswith(sys.prefix), poise_py.__file__\n"
    f"present = [m for m in {_OPTIONAL!r} if importlib.util.find_spec(m) is not None]\n"
    "assert not present, present\n"
    "print('imported', poise_py.__version__, 'from', poise_py.__file__)\n"
)


@nox.session(python=PYTHONS)
def build(session: nox.Session) -> None:
    root = Path.cwd()
    dist = root / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.install("build")
    session.run("python", "-m", "build", "--outdir", str(dist))
    artifacts = sorted(dist.glob("*.whl")) + sorted(dist.glob("*.tar.gz"))
    if len(artifacts) != 2:
        session.error(f"expected one wheel and one sdist, got {artifacts}")
    tmp = Path(session.create_tmp()).resolve()
    for artifact in artifacts:
        venv = tmp / f"clean-{artifact.suffix.strip('.')}"
        shutil.rmtree(venv, ignore_errors=True)
        session.run("python", "-m", "venv", str(venv))
        python = str(venv / "bin" / "python")
        session.run(python, "-m", "pip", "install", "-q", str(artifact), external=True)
        with session.chdir(tmp):  # not the source tree: import what was installed
            session.run(python, "-c", _CHECK, external=True)


@nox.session(python=PYTHONS)
def wheels(session: nox.Session) -> None:
    """Into ``dist/``: the compiled wheel for this platform (mypyc; a C compiler) and the pure one.

    The compiled wheel is built from an sdist in a temporary directory (mypyc writes its
    extension modules beside the sources it compiles, which would leave them in this tree).
    ``tests/docs/test_wheels.py`` installs both kinds into fresh venvs and smoke-runs them.
    """
    dist = Path.cwd() / "dist"
    dist.mkdir(exist_ok=True)
    for old in dist.glob("poise_py-*.whl"):
        old.unlink()
    session.install("build")
    scratch = Path(session.create_tmp()).resolve() / "compiled"
    shutil.rmtree(scratch, ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", str(scratch), env={"HATCH_BUILD_HOOK_ENABLE_MYPYC": "true"})
    for wheel in scratch.glob("*.whl"):
        shutil.move(wheel, dist / wheel.name)
    session.run(
        "python", "-m", "build", "--wheel", "--outdir", str(dist), env={"HATCH_BUILD_HOOK_ENABLE_MYPYC": "false"}
    )
    built = sorted(dist.glob("poise_py-*.whl"))
    pure = [wheel for wheel in built if wheel.name.endswith("-py3-none-any.whl")]
    if len(built) != 2 or len(pure) != 1:
        session.error(f"expected one compiled and one py3-none-any wheel, got {[w.name for w in built]}")
    for wheel in built:
        session.log(f"built {wheel.relative_to(Path.cwd())}")


@nox.session(python=PYTHONS)
def verifytypes(session: nox.Session) -> None:
    session.install(".[httpx,otel]", "pyright>=1.1.380")
    # Score the installed package, not the tree: run outside it, with only the session's
    # bin on PATH (pyright otherwise may resolve poise_py through another interpreter).
    path = f"{session.bin}:/usr/local/bin:/usr/bin:/bin"
    with session.chdir(session.create_tmp()):
        session.run("pyright", "--verifytypes", "poise_py", "--ignoreexternal", *session.posargs, env={"PATH": path})
