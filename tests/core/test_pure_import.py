"""The pure core imports nothing async: every ``poise_py._core`` module loads with anyio,
trio, asyncio and sniffio blocked, and without running ``poise_py/__init__.py``."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import poise_py._core

_CORE = Path(poise_py._core.__file__).parent
_PACKAGE = _CORE.parent

_SCRIPT = textwrap.dedent(
    """
    import importlib
    import importlib.abc
    import sys
    import types

    BLOCKED = ("anyio", "trio", "asyncio", "sniffio")

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"the pure core imported {name}")
            return None

    for name in list(sys.modules):
        if name.split(".")[0] in BLOCKED:
            del sys.modules[name]
    sys.meta_path.insert(0, Block())
    sys.path.insert(0, sys.argv[1].rsplit("/", 1)[0])  # the compiled build's runtime module sits beside the package
    package = types.ModuleType("poise_py")
    package.__path__ = [sys.argv[1]]
    sys.modules["poise_py"] = package
    for module in sys.argv[2:]:
        importlib.import_module(module)
    leaked = sorted(n for n in sys.modules if n.split(".")[0] in BLOCKED)
    assert not leaked, leaked
    print("ok", len(sys.argv) - 2)
    """
)


def test_every_core_module_imports_with_anyio_trio_asyncio_and_sniffio_blocked() -> None:
    modules = ["poise_py._core"] + [f"poise_py._core.{m.name}" for m in pkgutil.iter_modules([str(_CORE)])]
    assert len(modules) > 10
    done = subprocess.run(  # noqa: S603 - our own interpreter and script
        [sys.executable, "-I", "-B", "-c", _SCRIPT, str(_PACKAGE), *modules],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", str(len(modules))]
