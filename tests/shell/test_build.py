"""The install under test is the build CI meant: pure Python, or the optional compiled build.

``.ci/run`` runs the suite twice: on the editable (pure-Python) install, and on a wheel
built with ``HATCH_BUILD_HOOK_ENABLE_MYPYC=true`` with ``POISE_EXPECT_COMPILED=1`` set, so
neither run can quietly test the other build.
"""

from __future__ import annotations

import os
import random
import sys

import poise_py as poise
from poise_py._core._pool import Pool

HOT_PATH = (
    "poise_py._core._pool",
    "poise_py._core._circuit",
    "poise_py._core._pickers",
    "poise_py._core._record",
    "poise_py._core._tally",
    "poise_py._core._window",
    "poise_py._permit",
    "poise_py._pool_wires",
    "poise_py._issuer",
)


def test_the_build_is_the_one_expected() -> None:
    expected = os.environ.get("POISE_EXPECT_COMPILED") == "1"
    assert poise.COMPILED is expected
    for name in HOT_PATH:
        origin = sys.modules[name].__file__
        assert origin is not None
        assert origin.endswith(".py") is not expected, origin


def test_the_compiled_record_fills_whole_cache_lines() -> None:
    # bench/NOTES.md, scaling: the allocator places blocks of a size that is a multiple
    # of 64 at the same offset in a cache line, so a record whose CLOSED call's fields lie in
    # its first 64 bytes costs a random pick one line. Interpreted, the slots are laid out
    # alphabetically and the record is larger; only the compiled layout is held to this.
    pool = Pool(poise.CircuitPolicy(), poise.RoundRobin(), random.Random(1))
    pool.apply(0.0, added=[poise.Endpoint("a")])
    size = sys.getsizeof(pool.members["a"])
    if poise.COMPILED:
        assert size == 256
    else:
        assert size > 256


def test_the_configuration_modules_stay_interpreted_in_either_build() -> None:
    # The public attrs classes users build: compiled code would convert a knob's type (True
    # to 1, say) before the knob's own check could refuse it with a ConfigError naming it.
    configuration = (
        "poise_py._core._selection",
        "poise_py._core._routing",
        "poise_py._core._circuit_policy",
        "poise_py._core._budget",
        "poise_py._core._ejection",
        "poise_py._core._health_schedule",
        "poise_py._core._outlier",
    )
    for name in configuration:
        origin = sys.modules[name].__file__
        assert origin is not None
        assert origin.endswith(".py"), origin


def test_the_balancer_and_the_permit_can_be_subclassed_in_either_build() -> None:
    # A compiled class refuses interpreted subclasses unless it allows them.
    class Balancer(poise.LoadBalancer):
        pass

    class Reserved(poise.Permit):
        pass

    balancer = Balancer(poise.StaticDiscovery([poise.Endpoint("a")]))
    assert isinstance(balancer, poise.LoadBalancer)
    assert issubclass(Reserved, poise.Permit)


def test_the_pure_pool_keeps_its_attributes_in_one_shared_keys_dict() -> None:
    # CPython 3.11 shares an instance dict's keys (and specialises attribute reads on them)
    # only up to 30 keys; past that every read of the pool's attributes on the hot path is a
    # plain dict lookup (six more attributes cost a RoundRobin call 4.9% more instructions,
    # bench/instructions.py). New state goes into one attribute (Pool.load, Pool.answers).
    for policy in (poise.RoundRobin(), poise.PowerOfTwoChoices(failure_penalty=1.0), poise.WeightedByLoad()):
        pool = Pool(poise.CircuitPolicy(), policy, random.Random(1))
        if not poise.COMPILED:
            assert len(vars(pool)) <= 30
