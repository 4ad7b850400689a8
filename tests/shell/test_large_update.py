"""A large discovery update is planned and built in bounded steps, the event loop running between them.

Before, a 200,000-endpoint snapshot was diffed and built in one go, holding the loop for
seconds (``python bench/update_stall.py`` measures the stall). These tests hold the shape:
another task runs between the steps, and the steps' plan is the plan.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import poise_py as poise
from poise_py._core import _directory

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
