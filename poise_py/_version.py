"""The package version, and whether this install is the compiled build."""

from __future__ import annotations

import importlib.util

VERSION = "0.1.0"


def compiled() -> bool:
    """True if the hot path was compiled with mypyc (an extension module, not ``.py`` source)."""
    spec = importlib.util.find_spec("poise_py._core._pool")
    return spec is not None and spec.origin is not None and not spec.origin.endswith(".py")
