"""A fixed loop of pool-level picks, to count instructions per pick under callgrind.

Instruction counts do not depend on the machine's load or cache, so they show the work
a policy does per pick as the pool grows (O(1), or O(log n) for weighted least request),
apart from the memory effects ``bench/scale.py`` includes. Count two loop lengths and
divide the difference, so start-up and the pool's build cancel out::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python3.11 bench/picks.py 10000 2000 p2c-weighted
    valgrind --tool=callgrind --callgrind-out-file=/dev/null python3.11 bench/picks.py 10000 12000 p2c-weighted
    # instructions per call = (second "Collected" - first) / 10000

Arguments: endpoints, calls, and the policy (``p2c-weighted``, ``wrr-weighted``,
``wr-weighted``, ``random``). Each call is ``Pool.select`` + ``Pool.succeed``.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import poise_py as poise
from poise_py._core._pool import Pool

POLICIES = {
    "p2c-weighted": poise.PowerOfTwoChoices,
    "wrr-weighted": poise.WeightedRoundRobin,
    "wr-weighted": poise.WeightedRandom,
    "random": poise.Random,
}


def main(size: int, calls: int, policy: str) -> None:
    pool = Pool(poise.CircuitPolicy(), POLICIES[policy](), random.Random(1))
    pool.apply(0.0, added=[poise.Endpoint(f"e{i}", weight=1 + i % 4) for i in range(size)])
    select, succeed = pool.select, pool.succeed
    for _ in range(calls):
        state, ticket, now, _ = select(0.0)
        succeed(state, ticket, 0.0, now)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
