"""How long FileDiscovery stalls the event loop while it reads and parses a large file.

Run: ``python bench/file_stall.py [--endpoints 150000]``. Writes a JSON endpoints file
(about 10 MB with the default), then has ``FileDiscovery.load()`` read and parse it on
Trio while a ticker task sleeps 1 ms at a time; prints the file size, the load time and
the longest gap the ticker saw (the loop's worst stall).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import poise_py as poise


async def main(count: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pool.json"
        entries = [
            {"id": f"node-{i}", "address": ["10.0.0.1", 1024 + i % 60000], "metadata": {"rack": f"r{i % 97}"}}
            for i in range(count)
        ]
        path.write_text(json.dumps({"endpoints": entries}))
        size = path.stat().st_size
        worst = 0.0
        done = False

        async def ticker() -> None:
            nonlocal worst
            last = time.perf_counter()
            while not done:
                await trio.sleep(0.001)
                now = time.perf_counter()
                worst = max(worst, now - last)
                last = now

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            await trio.sleep(0.01)
            start = time.perf_counter()
            loaded = await poise.FileDiscovery(path, max_bytes=64 * 1024 * 1024).load()
            took = time.perf_counter() - start
            done = True
        print(
            f"file {size / 1e6:.1f} MB, {len(loaded)} endpoints: load {took:.2f} s, longest event-loop stall {worst * 1e3:.0f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoints", type=int, default=150_000)
    trio.run(main, parser.parse_args().endpoints)
