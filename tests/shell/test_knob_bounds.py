"""Knob bounds: ints no float holds, counts past 2**32 - 1, ints repr() refuses, volumes no window holds."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import poise_py as poise

HUGE = 10**400  # float(HUGE) raises OverflowError


@pytest.mark.parametrize(
    ("make", "knob"),
    [
        (lambda v: poise.LoadReport(qps=v), "LoadReport.qps"),
        (lambda v: poise.LoadReport(named_metrics={"q": v}), "LoadReport.named_metrics['q']"),
        (lambda v: poise.Quota(requests_reset=v), "Quota.requests_reset"),
        (lambda v: poise.Classification(poise.Fault.SUSPECT, retry_after=v), "retry_after"),
        (lambda v: poise.CircuitPolicy(max_retry_after=v), "CircuitPolicy.max_retry_after"),
        (lambda v: poise.CircuitPolicy(max_ejection_percent=v), "CircuitPolicy.max_ejection_percent"),
        (lambda v: poise.CircuitPolicy(max_ejection_percent=-v), "CircuitPolicy.max_ejection_percent"),
        (lambda v: poise.SlowStart(window=v), "SlowStart.window"),
        (lambda v: poise.Gradient2(smoothing=v), "Gradient2.smoothing"),
        (lambda v: poise.Gradient2(queue_size=v), "Gradient2.queue_size"),
        (lambda v: poise.AIMD(timeout=v), "AIMD.timeout"),
    ],
)
def test_an_int_no_float_holds_is_a_config_error_naming_the_field(make: Callable[[int], object], knob: str) -> None:
    with pytest.raises(poise.ConfigError) as info:
        make(HUGE)
    assert info.value.knob == knob
    assert len(str(info.value)) < 300  # the value is shown cut short, not as 400 digits


@pytest.mark.anyio
async def test_a_permit_refuses_such_a_retry_after_and_stays_unreported() -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))
    async with lb:
        permit = lb.acquire()
        with pytest.raises(poise.PermitError):
            permit.fail(retry_after=HUGE)
        assert not permit.done
        permit.succeed()


@pytest.mark.parametrize(
    ("make", "knob"),
    [
        (lambda: poise.LogLimit(burst=10**400), "LogLimit.burst"),
        (lambda: poise.CircuitPolicy(success_threshold=10**400), "CircuitPolicy.success_threshold"),
        (lambda: poise.CircuitPolicy(consecutive_failures=2**40), "CircuitPolicy.consecutive_failures"),
        (lambda: poise.LogLimit(burst=10**5000), "LogLimit.burst"),  # past the 4,300 digits repr() takes
        (lambda: poise.CircuitPolicy(max_retry_after=-(10**5000)), "CircuitPolicy.max_retry_after"),
    ],
)
def test_a_count_past_2_to_the_32_and_an_int_repr_refuses_are_config_errors(
    make: Callable[[], object], knob: str
) -> None:
    with pytest.raises(poise.ConfigError) as info:
        make()
    assert info.value.knob == knob
    assert len(str(info.value)) < 300


@pytest.mark.anyio
async def test_an_event_buffer_no_deque_holds_is_a_config_error() -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))
    async with lb:
        for buffer in (2**63, 10**400):
            with pytest.raises(poise.ConfigError) as info:
                lb.events(buffer=buffer)
            assert info.value.knob == "buffer"


def test_a_minimum_volume_no_count_window_can_hold_is_refused() -> None:
    with pytest.raises(poise.ConfigError) as info:
        poise.CircuitPolicy(window=poise.CountWindow(3), minimum_volume=5)
    assert info.value.knob == "CircuitPolicy.minimum_volume"
    assert poise.CircuitPolicy(window=poise.CountWindow(5), minimum_volume=5).minimum_volume == 5


def test_coordination_knobs_that_would_fail_later_are_refused_now() -> None:
    storage = poise.InMemoryStorage()

    async def hook(change: object) -> None:  # async: it would be called and never awaited
        return None

    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: poise.Coordination(storage, on_change=hook), "Coordination.on_change"),  # type: ignore[arg-type]
        (lambda: poise.Coordination(storage, max_open_wait=1e-4), "Coordination.max_open_wait"),
        (lambda: poise.OpenWait(escalation=poise.Escalation(), minimum=10**400), "OpenWait.minimum"),
        (lambda: poise.OpenWait(escalation=poise.Escalation(), horizon=10**400), "OpenWait.horizon"),
    ]
    for make, knob in cases:
        with pytest.raises(poise.ConfigError) as info:
            make()
        assert info.value.knob == knob
