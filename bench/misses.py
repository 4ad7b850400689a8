"""Simulated cache misses per call, by policy and pool size: the scaling figure without the noise.

Run: ``python bench/misses.py`` (needs valgrind, its headers and a C compiler: Debian's
``valgrind`` and ``gcc``). For every row of ``bench/scale.py`` it runs ``async with
lb.acquire(): pass`` under callgrind's cache simulator, collecting only the timed loop,
and prints per call the instructions and the last-level data misses (reads and writes),
at 10 and at 100,000 endpoints. Runs go in parallel, one per core.

Why: at 100,000 endpoints a random pick's cost is memory, and on a shared machine memory
latency moves with what the neighbours do, so wall-clock ratios (``bench/scale.py``)
wobble by 0.1-0.3 between runs. The simulator counts the same misses for the same code
every time (the hash seed and address layout are fixed), so it tells whether a change
touches fewer cache lines. Its caches are a model: a 4 MiB last level, the capacity this
machine's last level behaves like (random reads slow from 16 ns with a 2 MiB working set
to 150 ns with 8 MiB: ``bench/latency.c``). It knows nothing of hardware prefetchers or
TLBs, so read its counts as "lines fetched from memory", not as time.

``--only NAME`` runs the rows whose name contains NAME; ``--sizes``, ``--calls`` as in
``bench/scale.py``. ``--served N`` starts every endpoint's success count at N before the
timed loop, as in a pool that has served a while (the bench's pools are fresh, so at
100,000 endpoints their counts stay near zero; a count's size matters to the interpreted
build, where an int above 256 is an object of its own).

The collection is switched on and off around the loop by a callgrind client request, from
a two-line C helper built into a temporary directory at start-up (valgrind's
``callgrind.h``); the balancer is built, warmed and its garbage collected before.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gc
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HELPER = """
#include <valgrind/callgrind.h>
void toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
"""

CACHES = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=4194304,16,64"]


def child(helper: str, name: str, size: int, calls: int, served: int = 0) -> None:
    """Build the balancer, warm it, then run ``calls`` acquires with collection switched on."""
    import ctypes

    import trio

    from bench.scale import ROWS, acquire_loop, make_lb

    toggle = ctypes.CDLL(helper).toggle
    (row,) = [r for r in ROWS if r[0] == name]
    _, make, weighted, keyed, _ = row

    async def main() -> None:
        lb = make_lb(make(), size, weighted=weighted)
        async with lb:
            body = acquire_loop(lb, keyed=keyed)
            await body(20_000)  # warm the caches and any lazily built structure
            if served:
                for state in lb._pool.members.values():  # the bench's one look inside: no public setter
                    state.successes = served
            gc.collect()
            gc.freeze()  # no collection of the setup's objects inside the loop
            toggle()
            await body(calls)
            toggle()

    trio.run(main)


def build_helper(directory: str) -> str:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or shutil.which("valgrind") is None:
        sys.exit("bench/misses.py needs valgrind and a C compiler (Debian: apt-get install valgrind gcc)")
    source = Path(directory, "toggle.c")
    source.write_text(HELPER)
    library = str(Path(directory, "libtoggle.so"))
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", str(source), "-o", library], check=True)  # noqa: S603
    return library


def measure(helper: str, name: str, size: int, calls: int, directory: str, *, served: int = 0) -> tuple[float, float]:
    """(instructions, last-level data misses) per call, from one callgrind run."""
    out = Path(directory, f"callgrind.{name}.{size}.out".replace(" ", "_").replace(",", ""))
    command = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--cache-sim=yes", *CACHES]
    command += [
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        "--child",
        helper,
        name,
        str(size),
        str(calls),
        str(served),
    ]
    if shutil.which("setarch"):
        command = ["setarch", "-R", *command]  # a fixed address layout: the same misses every run
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
    events: list[str] = []
    totals: list[int] = []
    for line in out.read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith(("summary:", "totals:")):
            totals = [int(v) for v in line.split()[1:]]
    out.unlink()
    got = dict(zip(events, totals, strict=True))
    return got["Ir"] / calls, (got["DLmr"] + got["DLmw"]) / calls


def main() -> None:
    from bench.scale import ROWS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,100000")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--only", default=None)
    parser.add_argument("--served", type=int, default=0)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    names = [name for name, *_ in ROWS if args.only is None or args.only.lower() in name.lower()]
    with tempfile.TemporaryDirectory() as directory, concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        helper = build_helper(directory)
        runs = {
            (n, s): pool.submit(measure, helper, n, s, args.calls, directory, served=args.served)
            for n in names
            for s in sizes
        }
        served = f", success counts from {args.served:,}" if args.served else ""
        print(
            f"per call, {args.calls:,} calls under callgrind (last level 4 MiB{served}): instructions, last-level misses"
        )
        print(f"{'policy':<38}" + "".join(f"{f'@{s:,}':>20}" for s in sizes))
        for name in names:
            cells = [runs[name, size].result() for size in sizes]
            print(f"{name:<38}" + "".join(f"{i:>12,.0f}{m:>8.2f}" for i, m in cells), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
