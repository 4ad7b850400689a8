"""First contact: a missing extra is one line naming it; the cli extra is whole; license, URLs, --version."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from poise_py._version import VERSION, compiled
from poise_py.sim import Protocol, builtin_names, load_scenario

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _run(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter from the worktree root (so it imports this checkout)."""
    return subprocess.run(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )


def _blocked(module: str) -> str:
    """Code that makes ``import module`` fail as it would on an install without it."""
    return f"import sys\nsys.modules[{module!r}] = None\n"


@pytest.mark.parametrize(
    ("argv", "module", "extra"),
    [
        (["demo"], "trio", "cli"),
        (["demo"], "httpx", "cli"),
        (["demo"], "h11", "cli"),
        (["demo"], "rich", "cli"),
        (["demo", "--web"], "hypercorn", "cli"),
        (["simulate", "--list"], "rich", "sim"),
    ],
)
def test_a_cli_command_without_its_extra_prints_one_line_naming_it(argv: list[str], module: str, extra: str) -> None:
    result = _run(_blocked(module) + f"from poise_py.cli import main\nraise SystemExit(main({argv!r}))\n")
    assert result.returncode == 2
    assert (
        result.stderr
        == f"poise {argv[0]} needs: pip install 'poise_py[{extra}]' (in a clone: pip install -e '.[{extra}]')\n"
    )
    assert result.stdout == ""


def test_contrib_httpx_without_httpx_names_its_extra() -> None:
    result = _run(
        _blocked("httpx")
        + "try:\n    import poise_py.contrib.httpx\n"
        + "except ModuleNotFoundError as exc:\n    print(exc.name)\n    print(exc)\n    print(exc.__suppress_context__)\n"
    )
    assert result.stdout.splitlines() == [
        "httpx",
        "poise_py.contrib.httpx needs: pip install 'poise_py[httpx]' (in a clone: pip install -e '.[httpx]')",
        "True",
    ]


def test_an_uncaught_contrib_import_error_ends_in_the_one_line() -> None:
    result = _run(_blocked("httpx") + "import poise_py.contrib.httpx\n")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "ModuleNotFoundError: poise_py.contrib.httpx needs: pip install 'poise_py[httpx]' (in a clone: pip install -e '.[httpx]')"
    )
    assert "During handling" not in result.stderr  # no chained traceback of the original import


def test_contrib_status_imports_without_a_server_and_building_the_app_names_its_extra() -> None:
    # Building the app, not serve(): serve() runs in the caller's task group (one line there
    # would come wrapped in an exception group); tests/shell/test_outside_text.py runs that.
    result = _run(
        _blocked("hypercorn")
        + "import poise_py as poise\nfrom poise_py.contrib.status import StatusApp, serve\n"
        + "try:\n    StatusApp(poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint('a')])))\n"
        + "except ModuleNotFoundError as exc:\n    print(exc)\n"
    )
    assert (
        result.stdout
        == "poise_py.contrib.status needs: pip install 'poise_py[status]' (in a clone: pip install -e '.[status]')\n"
    ), result.stderr


def _third_party_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "poise_py"}


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_cli_extra_declares_every_package_the_demo_and_its_status_page_import() -> None:
    files = ["cli.py", "_demo.py", "contrib/status.py", "_extras.py"]
    modules = set().union(*(_third_party_imports(ROOT / "poise_py" / f) for f in files)) | {"hypercorn"}
    distributions = importlib.metadata.packages_distributions()
    needed = {distributions[m][0].lower() for m in modules}
    declared = _requirement_names(PYPROJECT["project"]["optional-dependencies"]["cli"])
    base = _requirement_names(PYPROJECT["project"]["dependencies"])
    assert needed - declared - base == set()
    assert {"h11", "hypercorn", "trio", "httpx", "rich"} <= declared


def test_the_cli_and_sim_extras_run_every_built_in_scenario() -> None:
    """``poise simulate`` with no argument runs every built-in scenario, the gRPC worker pool's
    among them, whose client raises grpcio's own errors: both extras that offer the command
    bring grpcio, so ``pip install 'poise_py[cli]' && poise simulate`` runs as docs/cli.md shows."""
    protocols = {load_scenario(name).client.protocol for name in builtin_names()}
    assert Protocol.GRPC in protocols
    assert Protocol.HTTP in protocols  # and the others' client is httpx
    extras = PYPROJECT["project"]["optional-dependencies"]
    for extra in ("cli", "sim"):
        assert "grpcio" in _requirement_names(extras[extra]), extra
        assert "httpx" in _requirement_names(extras[extra]), extra
        assert _requirement_names(extras["grpc"]) <= _requirement_names(extras[extra]), extra


def test_the_status_extra_is_hypercorn_and_dev_has_the_browser_driver() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert _requirement_names(extras["status"]) == {"hypercorn"}
    assert {"hypercorn", "playwright"} <= _requirement_names(extras["dev"])


def test_poise_version_prints_the_package_version_and_the_build() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "poise_py.cli", "--version"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert result.returncode == 0
    build = "compiled: mypyc" if compiled() else "pure Python"
    assert result.stdout == f"poise_py {VERSION} ({build})\n"
    assert PYPROJECT["project"]["version"] == VERSION


def test_the_license_is_mit_for_the_poise_py_developers_and_ships_in_the_sdist() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 poise_py developers" in text
    assert PYPROJECT["project"]["license"] == "MIT"
    assert "LICENSE" in PYPROJECT["tool"]["hatch"]["build"]["targets"]["sdist"]["include"]


def test_the_project_has_its_urls() -> None:
    urls = PYPROJECT["project"]["urls"]
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(urls)
    assert all(u.startswith("https://") for u in urls.values())
