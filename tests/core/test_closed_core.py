"""The core is closed: ``poise_py._core`` imports only itself and leaf modules of plain values.

Read from the source (every ``import`` statement, relative ones resolved), so no stub of
``poise_py/__init__.py`` can hide a reach into the shell: the real package's ``__init__``
loads the shell (anyio) by design, which is why ``test_pure_import`` runs the core's
modules under a bare package; this test proves what that run relies on.
"""

from __future__ import annotations

from pathlib import Path

import poise_py
from tests.support.imports import poise_imports

PACKAGE = Path(poise_py.__file__).parent
LEAVES = frozenset(f"poise_py.{name}" for name in ("_errors", "_faults", "_knobs", "_decision", "_endpoint", "_redact"))
"""Modules of plain values (errors, faults, knob checks, decisions, endpoints, text bounds)
that the core and the shell share; a leaf imports only other leaves."""


def imports_of(path: Path) -> list[tuple[int, str]]:
    """The poise_py modules the module at ``path`` imports, with their lines."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    return poise_imports(path.read_text(), package)


def test_every_core_module_imports_only_the_core_and_leaf_modules() -> None:
    modules = sorted((PACKAGE / "_core").glob("*.py"))
    assert len(modules) > 20
    reaches = [
        f"{path.name}:{n}: {module}"
        for path in modules
        for n, module in imports_of(path)
        if not module.startswith("poise_py._core") and module not in LEAVES
    ]
    assert not reaches, reaches


def test_every_leaf_imports_only_leaves() -> None:
    reaches = [
        f"{leaf}:{n}: {module}"
        for leaf in sorted(LEAVES)
        for n, module in imports_of(PACKAGE / f"{leaf.removeprefix('poise_py.')}.py")
        if module not in LEAVES
    ]
    assert not reaches, reaches


def test_the_reading_resolves_relative_imports() -> None:
    imports = dict(imports_of(PACKAGE / "_core" / "_fleet.py"))
    assert "poise_py._core._shared" in imports.values()
    assert all(not m.startswith("poise_py._coordination") for m in imports.values())
