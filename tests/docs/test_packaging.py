"""Packaging: ``import poise_py`` pulls in no optional dependency; the public surface is whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import poise_py as poise

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = ("opentelemetry", "httpx", "httpcore", "coredis", "redis", "grpc", "rich", "matplotlib", "trio")


def test_importing_poise_py_imports_no_optional_dependency() -> None:
    code = (
        "import sys, poise_py\n"
        f"optional = {OPTIONAL!r}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(optional)))\n"
        "print(poise_py.__file__)\n"
    )
    out = subprocess.run(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    loaded, path = out.stdout.splitlines()
    assert loaded == "[]"
    assert Path(path).resolve().is_relative_to(ROOT)


def test_every_public_name_is_reexported_from_a_private_module() -> None:
    public = [name for name in dir(poise) if not name.startswith("_")]
    assert "LoadBalancer" in public
    for name in public:
        obj = getattr(poise, name)
        module = getattr(obj, "__module__", None)
        if module is not None and isinstance(obj, type):
            assert module.startswith("poise_py."), (name, module)
