"""The one internal interface: poise_py's own integrations reach a balancer only through ``lb._internals``."""

from __future__ import annotations

import re
from pathlib import Path

import poise_py
from poise_py import _internal
from poise_py._core._retry import AfterFault
from tests.support.imports import poise_imports

PACKAGE = Path(poise_py.__file__).parent
INTEGRATIONS = sorted([*PACKAGE.glob("contrib/*.py"), *PACKAGE.glob("sim/*.py"), PACKAGE / "_call.py"])
# A private attribute read off a balancer: lb._x, balancer._x, self._lb._x, self._lbs[i]._x.
PRIVATE_READ = re.compile(r"\b(?:lb|balancer|_lb|_lbs\[[^\]]*\])\.(_\w+)")


def test_contrib_the_simulator_and_lb_call_use_no_private_balancer_attribute_but_internals() -> None:
    found = {
        f"{path.relative_to(PACKAGE)}:{n}: {match.group(0)}"
        for path in INTEGRATIONS
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for match in PRIVATE_READ.finditer(line)
        if match.group(1) != "_internals"
    }
    assert INTEGRATIONS
    assert not found, sorted(found)


def test_the_simulator_patches_no_pool_hook() -> None:
    engine = (PACKAGE / "sim" / "_engine.py").read_text()
    assert "on_transition" not in engine
    assert "_pool" not in engine


def test_the_internal_interface_says_it_is_not_public() -> None:
    assert "not public, no stability promise" in (_internal.__doc__ or "")


def test_a_retry_the_budget_refuses_through_the_internals_counts_in_retries_denied() -> None:
    budget = poise_py.RetryBudget(percent=0.0, min_per_second=0.0)
    lb = poise_py.LoadBalancer(
        poise_py.StaticDiscovery([poise_py.Endpoint("a")]), retry_budget=budget, clock=lambda: 0.0
    )
    loop = lb._internals.retry_loop(3)
    loop.start(lb._internals.now())
    loop.attempt("a")
    assert loop.after_fault(poise_py.Fault.SUSPECT, lb._internals.now()) is AfterFault.BUDGET_SPENT
    assert lb.retries_denied == lb._internals.retries_denied == 1
    assert lb.statistics().pool.retries_denied == 1


def test_the_private_read_pattern_catches_a_reach_into_the_pool() -> None:
    assert PRIVATE_READ.findall("pool = lb._pool; self._lbs[i]._budget; lb._internals") == [
        "_pool",
        "_budget",
        "_internals",
    ]


PUBLIC_MODULES = frozenset(
    {"poise_py", "poise_py.classify", "poise_py.probes", "poise_py.cli", "poise_py.sim", "poise_py._internal"}
)
"""What contrib and the simulator may import from the rest of poise_py: the public modules
and the one internal interface (each subpackage's own modules are its business)."""


def outside_reaches(source: str, name: str) -> list[str]:
    """The imports of module ``name`` (``contrib/httpx.py``) that leave its subpackage for a private module."""
    package = "poise_py." + name.split("/", maxsplit=1)[0]  # poise_py.contrib, poise_py.sim
    return [
        f"{name}:{n}: {module}"
        for n, module in poise_imports(source, package)
        if module not in PUBLIC_MODULES and not module.startswith(package)
    ]


def test_contrib_and_the_simulator_import_only_public_modules_and_the_one_internal_interface() -> None:
    paths = sorted([*PACKAGE.glob("contrib/*.py"), *PACKAGE.glob("sim/*.py")])
    assert len(paths) > 8
    found = [
        reach for path in paths for reach in outside_reaches(path.read_text(), path.relative_to(PACKAGE).as_posix())
    ]
    assert not found, found


def test_the_import_rule_sees_a_private_import() -> None:
    source = "from .._core._pool import Pool\nfrom .. import LoadBalancer\nfrom .._internal import shown\n"
    assert outside_reaches(source, "contrib/x.py") == ["contrib/x.py:1: poise_py._core._pool"]
    assert outside_reaches("from ._engine import Engine\nimport poise_py._snapshot\n", "sim/x.py") == [
        "sim/x.py:2: poise_py._snapshot"
    ]
