"""The ``poise`` command: ``poise demo`` and ``poise simulate``."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence

from ._errors import ConfigError
from ._extras import first_missing, install_hint, missing_extra
from ._version import VERSION, compiled

REQUIRES: dict[str, tuple[str, tuple[str, ...]]] = {
    "demo": ("cli", ("trio", "httpx", "h11", "rich")),
    "simulate": ("sim", ("rich",)),
}
"""Each command's extra and the modules it imports from it."""


def _simulate(args: argparse.Namespace) -> int:
    try:
        return _simulate_checked(args)
    except ConfigError as exc:
        print(f"poise simulate: {exc}", file=sys.stderr)
        return 2
    except BaseExceptionGroup as group:  # scenarios run side by side: one's ConfigError arrives wrapped
        found, _ = group.split(ConfigError)
        if found is None:
            raise
        first: BaseException = found
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        print(f"poise simulate: {first}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (``poise simulate --json | head -1``): stop quietly, and
        # point stdout at /dev/null so the interpreter's final flush cannot complain.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0


def _simulate_checked(args: argparse.Namespace) -> int:
    from . import sim  # noqa: PLC0415
    from .sim._command import default_processes, simulate  # noqa: PLC0415

    if args.list:
        for name in sim.builtin_names():
            print(f"{name}: {sim.load_scenario(name).summary}")
        sys.stdout.flush()
        return 0
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print(f"poise simulate: --plot needs matplotlib: {install_hint('sim')}", file=sys.stderr)
        return 2
    return simulate(
        args.scenario or sim.builtin_names(),
        seed=args.seed,
        full=args.full,
        processes=args.jobs or default_processes(),
        as_json=args.json,
        plot_path=args.plot,
    )


def _demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo  # noqa: PLC0415 - needs the cli extra

    return run_demo(
        requests=args.requests, seed=args.seed, live=not args.no_live, web=args.web, browser=not args.no_browser
    )


def _int_argument(text: str, lowest: int, highest: int | None, *, unreadable: str, out_of_range: str) -> int:
    """``text`` as an int in ``lowest..highest`` (None: no upper bound), for an argparse ``type=``.

    Raises:
        argparse.ArgumentTypeError: ``"{unreadable}: 'text'"`` for no int, ``"{out_of_range}, got N"``
            for one out of range.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{unreadable}: {text!r}") from None
    if value < lowest or (highest is not None and value > highest):
        raise argparse.ArgumentTypeError(f"{out_of_range}, got {value}")
    return value


def _requests(text: str) -> int:
    return _int_argument(text, 1, None, unreadable="not a number of requests", out_of_range="at least 1 request")


def _jobs(text: str) -> int:
    return _int_argument(text, 1, None, unreadable="not a number of processes", out_of_range="at least 1 process")


def _seed(text: str) -> int:
    top = 2**63 - 1  # a scenario file's seed bound
    return _int_argument(text, 0, top, unreadable="not a seed", out_of_range=f"a seed is 0..{top}")


def _port(text: str) -> int:
    return _int_argument(text, 0, 65535, unreadable="not a port number", out_of_range="a port is 0..65535")


def version_line() -> str:
    """What ``poise --version`` prints: the version and which build is running."""
    build = "compiled: mypyc" if compiled() else "pure Python"
    return f"poise_py {VERSION} ({build})"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``poise``."""
    parser = argparse.ArgumentParser(prog="poise", description="poise_py: a client-side load balancer.")
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="balance real HTTP backends on loopback with injected faults")
    demo.add_argument(
        "--requests", type=_requests, default=3000, help="requests sent to each balancer, 200 a second (default 3000)"
    )
    demo.add_argument("--seed", type=_seed, default=7, help="seed for fault injection and selection")
    demo.add_argument("--no-live", action="store_true", help="no live view, only the summary")
    demo.add_argument(
        "--web",
        nargs="?",
        const=0,
        type=_port,
        metavar="PORT",
        help="also serve the status page of both balancers on 127.0.0.1:PORT (default: a free port), open it"
        " in the browser, and keep serving it after the run until Ctrl-C",
    )
    demo.add_argument("--no-browser", action="store_true", help="with --web: print the page's address, do not open it")
    demo.set_defaults(func=_demo)

    simulate = sub.add_parser("simulate", help="compare configurations on a virtual-time fault scenario")
    simulate.add_argument("scenario", nargs="*", help="built-in scenario names or TOML files (default: all)")
    simulate.add_argument("--seed", type=_seed, default=None, help="override the scenario's seed")
    simulate.add_argument("--json", action="store_true", help="print JSON instead of tables")
    simulate.add_argument("--plot", metavar="FILE", help="write a PNG/SVG/PDF timeline (needs matplotlib)")
    simulate.add_argument("--list", action="store_true", help="list the built-in scenarios")
    simulate.add_argument(
        "--full",
        action="store_true",
        help="run every scenario whole (default: a quick run, each at most 8,000 requests per configuration)",
    )
    simulate.add_argument(
        "--jobs",
        type=_jobs,
        default=None,
        metavar="N",
        help="scenarios simulated at once, one process each (default: twice the cores available)",
    )
    simulate.set_defaults(func=_simulate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``poise`` command."""
    args = build_parser().parse_args(argv)
    extra, modules = REQUIRES[args.command]
    if args.command == "demo" and args.web is not None:
        modules = (*modules, "hypercorn")
    missing = first_missing(modules)
    if missing is not None:
        print(missing_extra(f"poise {args.command}", extra), file=sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BaseExceptionGroup as group:
        # Ctrl-C inside a task group arrives wrapped; every task has ended by now.
        _, rest = group.split(KeyboardInterrupt)
        if rest is not None:
            raise
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
