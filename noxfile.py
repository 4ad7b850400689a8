"""Developer tasks: ``nox`` runs tests, lint and typecheck; ``nox -s bench`` runs the benchmarks."""

from __future__ import annotations

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
    for script in ("bench/overhead.py", "bench/health.py", "bench/discovery.py", "bench/coordination.py"):
        session.run("python", script)
