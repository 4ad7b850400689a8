"""A period the timer repeats is at least a millisecond: shorter ones are lost in the clock's rounding."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import poise_py as poise
from poise_py.contrib.status import StatusApp


@pytest.mark.parametrize(
    ("make", "knob"),
    [
        (lambda: poise.TimeWindow(duration=5e-324), "TimeWindow.duration"),
        (lambda: poise.TimeWindow(duration=0.005, buckets=10), "TimeWindow.duration"),
        (lambda: poise.SuccessRateEjection(interval=1e-12), "SuccessRateEjection.interval"),
        (lambda: poise.Coordination(poise.InMemoryStorage(), sync_interval=1e-9), "Coordination.sync_interval"),
        (lambda: poise.FileDiscovery(Path("endpoints.json"), interval=1e-6), "interval"),
        (lambda: poise.RetryBudget(ttl=1e-305), "RetryBudget.ttl"),  # ten slices of it: an OverflowError at a call
        (lambda: poise.RetryBudget(ttl=5e-324), "RetryBudget.ttl"),
        (
            lambda: poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]), no_eligible_alert_after=1e-9),
            "no_eligible_alert_after",
        ),
    ],
)
def test_a_period_under_a_millisecond_is_refused_naming_its_knob(make: Callable[[], object], knob: str) -> None:
    with pytest.raises(poise.ConfigError) as info:
        make()
    assert info.value.knob == knob


def test_a_millisecond_is_allowed() -> None:
    assert poise.TimeWindow(duration=0.01, buckets=10).duration == 0.01
    assert poise.SuccessRateEjection(interval=0.001).interval == 0.001


def test_the_status_pages_poll_interval_is_held_to_it_too() -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))
    with pytest.raises(poise.ConfigError) as info:
        StatusApp(lb, poll_interval=1e-6)
    assert info.value.knob == "poll_interval"
