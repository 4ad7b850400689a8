"""Smoke run of an installed poise_py: the expected build answers a few balanced calls.

Usage: ``python wheel_smoke.py compiled|pure``, in an environment where poise_py was
installed from a wheel (``tests/docs/test_wheels.py``, and cibuildwheel's
``test-command`` in ``pyproject.toml``). It refuses to run on a source checkout's
``poise_py``, so it can only pass on what was installed, and prints one line.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

import poise_py as poise

CALLS = 200
BUILDS = {"compiled": True, "pure": False}


async def balanced_calls() -> dict[str, int]:
    """``CALLS`` permits over three endpoints, one in four ending in a fault on ``b``."""
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint(name) for name in ("a", "b", "c")]),
        policy=poise.RoundRobin(),
    )
    async with lb:
        for i in range(CALLS):
            try:
                async with lb.acquire() as permit:
                    if permit.endpoint.id == "b" and i % 4 == 0:
                        raise ConnectionError(i)
            except ConnectionError:
                pass
        counters = lb.statistics().pool
    return {"issued": counters.issued, "successes": counters.successes}


def main(argv: list[str]) -> int:
    """Check the build named by ``argv[0]``, run the calls, print the summary line."""
    if len(argv) != 1 or argv[0] not in BUILDS:
        print("usage: python wheel_smoke.py compiled|pure", file=sys.stderr)
        return 2
    installed = Path(poise.__file__).resolve()
    checkout = Path(__file__).resolve().parents[2] / "poise_py"
    if installed.is_relative_to(checkout):
        print(f"poise_py was imported from the checkout ({installed}), not an install", file=sys.stderr)
        return 1
    if poise.COMPILED is not BUILDS[argv[0]]:
        print(f"expected the {argv[0]} build, poise_py.COMPILED is {poise.COMPILED}", file=sys.stderr)
        return 1
    counts = anyio.run(balanced_calls)
    if counts["issued"] != CALLS or not 0 < counts["successes"] < CALLS:
        print(f"unexpected counters after {CALLS} calls: {counts}", file=sys.stderr)
        return 1
    print(f"{argv[0]} build from {installed.parent}: {counts['successes']}/{counts['issued']} calls succeeded")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
