"""A fixed loop of ``async with lb.acquire(): pass`` to count instructions under callgrind.

Wall-clock figures on a shared machine wobble by several percent; instruction counts do
not. Count two loop lengths and divide the difference, so start-up cancels out::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python3.11 bench/instructions.py 5000 rr
    valgrind --tool=callgrind --callgrind-out-file=/dev/null python3.11 bench/instructions.py 25000 rr
    # instructions per call = (second "Collected" - first) / 20000

Run the real interpreter binary (not a shell shim), as callgrind does not follow exec.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import poise_py as poise


async def main(n: int, policy: str) -> None:
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
