"""Developer tasks: ``nox`` runs tests, lint and typecheck; ``nox -s bench`` runs the benchmarks;
``nox -s docs`` builds the documentation site (strict); ``nox -s build`` builds the wheel and
sdist and installs each into a clean virtualenv; ``nox -s verifytypes`` scores the public
type surface with pyright."""

from __future__ import annotations

import shutil
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True

PYTHONS = ["3.11"]


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    session.install("-e", ".[dev]")
    session.run("pytest", *session.posargs)


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
def verifytypes(session: nox.Session) -> None:
    session.install(".[httpx,otel]", "pyright>=1.1.380")
    # Score the installed package, not the tree: run outside it, with only the session's
    # bin on PATH (pyright otherwise may resolve poise_py through another interpreter).
    path = f"{session.bin}:/usr/local/bin:/usr/bin:/bin"
    with session.chdir(session.create_tmp()):
        session.run("pyright", "--verifytypes", "poise_py", "--ignoreexternal", *session.posargs, env={"PATH": path})
