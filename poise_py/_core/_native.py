"""mypyc's class marker for the optional compiled build, a no-op without mypy_extensions.

The pure core compiles with mypyc from this same source (see ``docs/performance.md``).
A class mypyc cannot make native (one that subclasses a builtin such as ``list`` or
``RuntimeError``) is marked ``@mypyc_attr(native_class=False)``; in the pure-Python
install the marker changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

_T = TypeVar("_T")

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:
    try:
        from mypy_extensions import mypyc_attr
    except ImportError:  # the base install: anyio and attrs only

        def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[_T], _T]:
            """No-op stand-in for ``mypy_extensions.mypyc_attr``."""
            return lambda cls: cls


__all__ = ["mypyc_attr"]
