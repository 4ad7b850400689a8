"""Escalation arithmetic: monotone until the cap, never above it, never overflowing."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

import poise_py as poise
from poise_py import Backoff

levels = st.integers(min_value=0, max_value=2**64) | st.integers(min_value=2**64, max_value=2**200)
bases = st.floats(min_value=1e-300, max_value=1e6)
escalations = st.builds(
    lambda base, extra, backoff, mult: poise.Escalation(
        base=base, maximum=base + extra, backoff=backoff, multiplier=mult, jitter=0.0
    ),
    bases,
    st.floats(min_value=0.0, max_value=1e300),
    st.sampled_from(Backoff),
    st.floats(min_value=1.0001, max_value=1e6),
)


@given(escalations, levels)
def test_window_is_finite_and_within_base_and_maximum(esc: poise.Escalation, level: int) -> None:
    w = esc.window(level)
    assert math.isfinite(w)
    assert esc.base <= w <= esc.maximum


@given(escalations, st.integers(min_value=0, max_value=2**64 - 1))
def test_window_is_monotone_in_the_level(esc: poise.Escalation, level: int) -> None:
    assert esc.window(level) <= esc.window(level + 1)


@given(escalations, levels, st.floats(min_value=0.0, max_value=0.999999), st.floats(0.0, 0.99))
def test_jitter_never_leaves_the_band_or_passes_the_maximum(
    esc: poise.Escalation, level: int, unit: float, jitter: float
) -> None:
    import attrs

    esc = attrs.evolve(esc, jitter=jitter)
    w = esc.jittered(level, unit)
    assert math.isfinite(w)
    assert w <= esc.maximum
    assert w >= esc.window(level) * (1 - jitter) - 1e-9


def test_llm_gateway_exponential_sequence_60_120_240_then_the_300_cap() -> None:
    esc = poise.Escalation(base=60, maximum=300, jitter=0.0)
    assert [esc.window(n) for n in range(6)] == [60, 120, 240, 300, 300, 300]


def test_envoy_linear_sequence_base_times_ejections() -> None:
    esc = poise.Escalation(base=30, maximum=300, backoff=Backoff.LINEAR, jitter=0.0)
    assert [esc.window(n) for n in range(4)] == [30, 60, 90, 120]
    assert esc.window(2**64) == 300


@given(st.integers(0, 2**70), st.floats(0.0, 1e9))
def test_decay_never_goes_negative_or_up(level: int, closed_for: float) -> None:
    esc = poise.Escalation(base=10)
    decayed = esc.decayed(level, closed_for)
    assert 0 <= decayed <= level


def test_decay_drops_one_level_per_interval() -> None:
    esc = poise.Escalation(base=10, decay_interval=60)
    assert esc.decayed(3, 59) == 3
    assert esc.decayed(3, 60) == 2
    assert esc.decayed(3, 1000) == 0


def test_ejection_allowance_always_lets_one_endpoint_go() -> None:
    from poise_py._core._ejection import ejection_allowance

    assert ejection_allowance(1, 0.1) == 1
    assert ejection_allowance(3, 0.1) == 1
    assert ejection_allowance(4, 0.5) == 2
    assert ejection_allowance(10, 0) == 1
    assert ejection_allowance(5, 1.0) == 5
