"""A large discovery update is planned and built in bounded steps, the event loop running between them.

Before, a 200,000-endpoint snapshot was diffed and built in one go, holding the loop for
seconds (``python bench/update_stall.py`` measures the stall). These tests hold the shape:
another task runs between the steps, and the steps' plan is the plan.
"""

from __future__ import annotations

import random
import sys
from collections.abc import AsyncIterator, Callable
from types import FrameType

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import poise_py as poise
from poise_py._core import _directory
from poise_py._core._pool import Pool

pytestmark = pytest.mark.anyio


def pool(ids: range, tag: str = "") -> list[poise.Endpoint]:
    return [poise.Endpoint(f"n{i}", metadata={"tag": tag}) for i in ids]


async def test_another_task_runs_between_the_steps_of_a_large_update() -> None:
    n = 4 * _directory.STEP + 1
    updates: list[poise.Update] = [
        poise.Snapshot(1, pool(range(n))),
        poise.Snapshot(2, pool(range(n // 2, n + n // 2), tag="new")),  # half leave, half change, half join
        poise.Delta(3, added=pool(range(2 * n, 3 * n))),
    ]
    ticks = 0
    during: list[int] = []
    applied = anyio.Event()

    async def source() -> AsyncIterator[poise.Update]:
        for update in updates:
            before = ticks
            yield update  # resumed when the balancer asks for the next: this one is applied
            during.append(ticks - before)
        applied.set()
        await anyio.sleep_forever()

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await anyio.lowlevel.checkpoint()
            ticks += 1

    lb = poise.LoadBalancer(discovery=source())
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        async with lb:
            await applied.wait()  # no sleep: the suite's clock jumps only when every task waits
            assert lb.discovery_revision == 3
            assert len(lb.snapshot().endpoints) == 2 * n
        tg.cancel_scope.cancel()
    # Each update takes a step per STEP endpoints to plan and another to build (more for a
    # snapshot, which also indexes and diffs), the ticker running between them: 14-17 ticks
    # an update here. Applied in one go, the ticker runs only at the apply's few other
    # awaits (2-4 ticks).
    for taken in during:
        assert taken >= 2 * (n // _directory.STEP), during


endpoint_ids = st.sets(st.integers(min_value=0, max_value=40), max_size=30)


@settings(max_examples=200, deadline=None)
@given(live=endpoint_ids, incoming=endpoint_ids, changed=endpoint_ids, step=st.integers(min_value=1, max_value=7))
def test_a_snapshot_planned_in_steps_is_the_diff(
    live: set[int], incoming: set[int], changed: set[int], step: int
) -> None:
    current = {f"n{i}": poise.Endpoint(f"n{i}") for i in live}
    wanted = tuple(poise.Endpoint(f"n{i}", weight=2 if i in changed else 1) for i in sorted(incoming))
    directory = _directory.Directory()
    saved = _directory.STEP
    _directory.STEP = step
    try:
        planner = directory.planner(poise.Snapshot(1, wanted), current)
        while (changes := planner.step()) is None:
            pass
    finally:
        _directory.STEP = saved
    assert planner.steps >= len(wanted) // step
    assert {e.id for e in changes.added} == {f"n{i}" for i in incoming - live}
    assert set(changes.removed) == {f"n{i}" for i in live - incoming}
    assert {e.id for e in changes.updated} == {f"n{i}" for i in incoming & live & changed}


@settings(max_examples=100, deadline=None)
@given(ids=st.lists(st.integers(min_value=0, max_value=20), min_size=2, max_size=30), step=st.integers(1, 5))
def test_a_repeated_id_is_found_whichever_step_it_falls_in(ids: list[int], step: int) -> None:
    endpoints = tuple(poise.Endpoint(f"n{i}") for i in ids)
    saved = _directory.STEP
    _directory.STEP = step
    try:
        if len(set(ids)) < len(ids):
            with pytest.raises(poise.DuplicateIdentity):
                _directory.Directory().plan(poise.Snapshot(1, endpoints), {})
        else:
            assert len(_directory.Directory().plan(poise.Snapshot(1, endpoints), {}).added) == len(ids)
    finally:
        _directory.STEP = saved


def python_calls_during(action: Callable[[], object]) -> int:
    """How many Python-level function calls ``action`` makes (C calls not counted)."""
    calls = 0

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("policy", [poise.PowerOfTwoChoices(), poise.RoundRobin(), poise.PeakEwma()])
def test_committing_a_large_update_takes_a_pass_per_structure_not_calls_per_endpoint(policy: poise.Policy) -> None:
    # The commit of an update is one synchronous block (no permit sees half of it): with
    # 200,000 endpoints, a few calls per endpoint held the loop for most of a second. Each
    # routing structure now takes its endpoints a list at a time, so the commit makes a
    # number of calls that does not grow with the update (the loops inside run in place).
    n = 5_000
    pool = Pool(poise.CircuitPolicy(), policy, random.Random(1))
    pool.apply(0.0, added=pool_of(range(n)))
    replacement = pool_of(range(n, 2 * n))
    built = pool.build(replacement, 1.0)
    calls = python_calls_during(lambda: pool.apply(1.0, added=replacement, removed=list(pool.members), built=built))
    assert calls < 200, calls
    assert sorted(pool.members) == sorted(e.id for e in replacement)
    more = pool_of(range(2 * n, 3 * n))
    built = pool.build(more, 2.0)
    calls = python_calls_during(lambda: pool.apply(2.0, added=more, built=built))
    assert calls < 200, calls
    assert len(pool.members) == 2 * n
    assert pool.fast_scope is not None
    assert len(pool.fast_scope) == 2 * n


def pool_of(ids: range) -> list[poise.Endpoint]:
    return [poise.Endpoint(f"n{i}") for i in ids]


async def test_the_counters_of_many_departed_endpoints_are_folded_after_the_update_and_kept() -> None:
    first = pool_of(range(300))
    send, receive = anyio.create_memory_object_stream[poise.Update](4)
    lb = poise.LoadBalancer(receive, policy=poise.RoundRobin())
    async with lb, send, receive:
        await send.send(poise.Snapshot(1, first))
        await anyio.wait_all_tasks_blocked()
        for _ in range(600):
            async with lb.acquire():
                pass
        with pytest.raises(ValueError, match="boom"):
            async with lb.acquire():
                raise ValueError("boom")
        before = lb.statistics().pool
        await send.send(poise.Snapshot(2, pool_of(range(300, 600))))
        await anyio.wait_all_tasks_blocked()
        after = lb.statistics().pool
        assert after.successes == before.successes == 600
        assert sum(after.faults.values()) == sum(before.faults.values()) == 1
        assert after.issued == before.issued == 601
