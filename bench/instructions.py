"""A fixed loop of ``async with lb.acquire(): pass`` to count instructions under callgrind.

Wall-clock figures on a shared machine wobble by several percent; instruction counts do
not. Count two loop lengths and divide the difference, so start-up cancels out::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python3.11 bench/instructions.py 5000 rr
    valgrind --tool=callgrind --callgrind-out-file=/dev/null python3.11 bench/instructions.py 25000 rr
    # instructions per call = (second "Collected" - first) / 20000

Run the real interpreter binary (not a shell shim), as callgrind does not follow exec.
The policy argument is ``rr`` (RoundRobin), ``p2c`` (PowerOfTwoChoices) or ``bare`` (a
no-op ``async with``, the baseline of ``bench/overhead.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import poise_py as poise


class Noop:
    """The cheapest possible async context manager."""

    __slots__ = ()

    async def __aenter__(self) -> Noop:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


async def main(n: int, policy: str) -> None:
    if policy == "bare":
        cm = Noop()
        for _ in range(n):
            async with cm:
                pass
        return
    chosen: poise.Policy = poise.RoundRobin() if policy == "rr" else poise.PowerOfTwoChoices()
    eps = [poise.Endpoint(f"e{i}") for i in range(10)]
    lb = poise.LoadBalancer(poise.StaticDiscovery(eps), policy=chosen, seed=1)
    async with lb:
        acquire = lb.acquire
        for _ in range(n):
            async with acquire():
                pass


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "rr")
