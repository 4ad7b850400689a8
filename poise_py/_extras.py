"""One line naming the extra to install when an optional dependency is missing."""

from __future__ import annotations

import importlib
from collections.abc import Iterable


def install_hint(extra: str) -> str:
    """How to install an extra, from an index or (what works today) from a clone of the repository."""
    return f"pip install 'poise_py[{extra}]' (in a clone: pip install -e '.[{extra}]')"


def missing_extra(what: str, extra: str) -> str:
    """The one-line message: ``<what> needs: <install_hint(extra)>``."""
    return f"{what} needs: {install_hint(extra)}"


def first_missing(modules: Iterable[str]) -> str | None:
    """The first of ``modules`` that cannot be imported, or None if all can."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            return name
    return None


def require(what: str, extra: str, modules: Iterable[str]) -> None:
    """Raise ``ModuleNotFoundError`` with the one-line message if any of ``modules`` is missing."""
    name = first_missing(modules)
    if name is not None:
        raise ModuleNotFoundError(missing_extra(what, extra), name=name)
