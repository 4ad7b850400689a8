"""mkdocs hook: list every public name of ``poise_py`` that the reference page does not place.

The API reference groups names by hand; this hook replaces the ``<!-- poise:unlisted -->``
marker with a ``::: poise_py.Name`` block for each public name the page does not mention
yet, so a name added to ``poise_py/__init__.py`` appears in the reference without an edit.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- poise:unlisted -->"


def on_page_markdown(markdown: str, *, page: Any, config: Any, files: Any) -> str:
    """Fill the marker with the public names the page does not document yet."""
    if MARKER not in markdown:
        return markdown
    # The tree being documented, not whichever poise_py the interpreter would find first.
    root = str(Path(config["config_file_path"]).resolve().parent)
    if sys.path[0] != root:
        sys.path.insert(0, root)
    poise_py = importlib.import_module("poise_py")
    if not str(Path(poise_py.__file__ or "").resolve()).startswith(root):
        raise RuntimeError(f"documenting {poise_py.__file__}, not the tree at {root}")
    listed = set(re.findall(r"^::: poise_py\.(\w+)\s*$", markdown, flags=re.MULTILINE))
    public = sorted(
        name
        for name in vars(poise_py)
        if not name.startswith("_")
        and name not in listed
        and getattr(getattr(poise_py, name), "__module__", "").startswith("poise_py.")
    )
    block = "\n\n".join(f"::: poise_py.{name}" for name in public) or "(none)"
    return markdown.replace(MARKER, block)
