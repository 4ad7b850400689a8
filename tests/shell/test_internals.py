"""The one internal interface: poise_py's own integrations reach a balancer only through ``lb._internals``."""

from __future__ import annotations

import re
from pathlib import Path

import poise_py
from poise_py import _internal
from poise_py._core._retry import Next

PACKAGE = Path(poise_py.__file__).parent
INTEGRATIONS = sorted([*PACKAGE.glob("contrib/*.py"), *PACKAGE.glob("sim/*.py"), PACKAGE / "_retry.py"])
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
    assert loop.after_fault(poise_py.Fault.SUSPECT, lb._internals.now()) is Next.BUDGET_SPENT
    assert lb.retries_denied == lb._internals.retries_denied == 1
    assert lb.statistics().pool.retries_denied == 1


def test_the_private_read_pattern_catches_a_reach_into_the_pool() -> None:
    assert PRIVATE_READ.findall("pool = lb._pool; self._lbs[i]._budget; lb._internals") == [
        "_pool",
        "_budget",
        "_internals",
    ]
