"""One scenario in a process of its own: what :func:`poise_py.sim._run.run_in_processes` starts.

``python -m poise_py.sim._worker SOURCE SEED MODE OUT`` loads ``SOURCE`` (a built-in name or
a TOML path), shortens it unless ``MODE`` is ``full`` (:func:`prepare`), runs every
configuration with ``SEED`` (``-`` for the scenario's own), writes one line
``CONFIGURATION_INDEX VIRTUAL_SECONDS`` to stdout at every 1% of each run, and pickles the
results (a tuple of :class:`~poise_py.sim.RunResult`) into the file ``OUT``.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Sequence
from pathlib import Path

from ._run import prepare, run


def main(argv: Sequence[str]) -> int:
    """Run the scenario the arguments name; 0 when its results are written."""
    source, seed_text, mode, out = argv
    scenario, _ = prepare(source, full=mode == "full")
    index = {c.name: i for i, c in enumerate(scenario.all_configurations())}
    step = scenario.traffic.duration / 100
    written = dict.fromkeys(index, -step)

    def progress(name: str, done: float) -> None:
        if done - written[name] >= step or done >= scenario.traffic.duration:  # every 1% and the end
            written[name] = done
            sys.stdout.write(f"{index[name]} {done!r}\n")
            sys.stdout.flush()

    seed = None if seed_text == "-" else int(seed_text)
    report = run(scenario, seed=seed, progress=progress)
    Path(out).write_bytes(pickle.dumps(report.results, protocol=pickle.HIGHEST_PROTOCOL))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
