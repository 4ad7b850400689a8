"""Which modules the compiled build compiles follows one stated rule, checked here against pyproject.toml.

The rule (pyproject.toml's mypyc section, docs/architecture.md): the pure core is compiled,
and so are the shell's modules every call runs through; a core module stays interpreted
when it defines a public attrs class (configuration a user builds, or a value the public
API hands out: compiled code would check and convert a field's type before the class's own
check names it), and the four named below for their own reasons. A new module that breaks
the rule fails here until the lists or the rule change.
"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import attrs

import poise_py

ROOT = Path(poise_py.__file__).parent.parent
SHELL_HOT_PATH = frozenset(
    {
        "poise_py/_permit.py",
        "poise_py/_pool_wires.py",
        "poise_py/_issuer.py",
        "poise_py/_call_observers.py",
        "poise_py/_clock.py",
    }
)
"""The shell's modules a call runs through: ``acquire``, the permit, its exit, the clock."""
INTERPRETED_BY_NAME = {
    "poise_py/_core/_native.py": "the build's own shim (mypyc's attributes, or stand-ins without it)",
    "poise_py/_core/_listener.py": "a Protocol only, implemented structurally by the shell",
    "poise_py/_core/_fleet.py": "the fleet's cold path: the coordinator's worker, once per poll",
    "poise_py/_core/_fleet_actions.py": "the fleet's cold path: the storage operations it decides",
}


def mypyc_section() -> dict[str, list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    section: dict[str, list[str]] = config["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["mypyc"]
    return section


def defines_public_attrs_class(module_path: str) -> bool:
    name = module_path.removesuffix(".py").replace("/", ".")
    module = importlib.import_module(name)
    public = {id(getattr(poise_py, n)) for n in dir(poise_py) if not n.startswith("_")}
    return any(
        isinstance(value, type) and value.__module__ == name and attrs.has(value) and id(value) in public
        for value in vars(module).values()
    )


def test_the_compiled_set_follows_the_stated_rule() -> None:
    section = mypyc_section()
    assert set(section["include"]) == {"poise_py/_core", *SHELL_HOT_PATH}
    core = sorted(
        p.relative_to(ROOT).as_posix() for p in (ROOT / "poise_py" / "_core").glob("*.py") if p.name != "__init__.py"
    )
    assert len(core) > 20
    expected = {m for m in core if m in INTERPRETED_BY_NAME or defines_public_attrs_class(m)}
    assert set(section["exclude"]) == expected


def test_the_rule_reads_a_module_with_configuration_and_one_without() -> None:
    assert defines_public_attrs_class("poise_py/_core/_circuit_policy.py")  # CircuitPolicy
    assert not defines_public_attrs_class("poise_py/_core/_pool.py")
