"""Reading a module's imports from its source: the poise_py modules it names, relative imports resolved."""

from __future__ import annotations

import ast


def poise_imports(source: str, package: str) -> list[tuple[int, str]]:
    """Every poise_py module ``source`` (a module of ``package``) imports, with its line."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.append((node.lineno, module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return [(n, m) for n, m in found if m == "poise_py" or m.startswith("poise_py.")]
