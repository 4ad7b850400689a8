"""What a probe verdict means for eligibility, as a pure step of the core."""

from __future__ import annotations

import pytest

import poise_py as poise
from poise_py._core._health_schedule import HealthStatus, ProbeResult, refusal, verdict


async def _probe(endpoint: poise.Endpoint) -> None:
    return None


CHECK = poise.HealthCheck(probe=_probe)
STRICT = poise.HealthCheck(probe=_probe, admit_unknown=False, uneject=False)


@pytest.mark.parametrize(
    ("check", "status", "expected"),
    [
        (CHECK, HealthStatus.HEALTHY, None),
        (CHECK, HealthStatus.UNKNOWN, None),
        (CHECK, HealthStatus.UNHEALTHY, poise.IneligibleReason.UNHEALTHY),
        (STRICT, HealthStatus.UNKNOWN, poise.IneligibleReason.UNCLASSIFIED),
        (STRICT, HealthStatus.HEALTHY, None),
    ],
)
def test_a_classification_maps_to_its_refusal(
    check: poise.HealthCheck, status: HealthStatus, expected: poise.IneligibleReason | None
) -> None:
    assert refusal(check, status) is expected


def test_a_passing_probe_of_a_healthy_endpoint_unejects_only_in_the_epoch_it_probed() -> None:
    same = verdict(CHECK, HealthStatus.UNKNOWN, HealthStatus.HEALTHY, ProbeResult.PASSED, epoch=3, current_epoch=3)
    assert same.uneject
    assert same.changed
    assert same.refusal is None
    moved_on = verdict(CHECK, HealthStatus.HEALTHY, HealthStatus.HEALTHY, ProbeResult.PASSED, epoch=3, current_epoch=4)
    assert not moved_on.uneject
    assert not moved_on.changed


def test_no_uneject_when_disabled_not_yet_healthy_or_failing() -> None:
    healthy, passed = HealthStatus.HEALTHY, ProbeResult.PASSED
    assert not verdict(STRICT, healthy, healthy, passed, epoch=1, current_epoch=1).uneject
    assert not verdict(CHECK, None, HealthStatus.UNKNOWN, passed, epoch=1, current_epoch=1).uneject
    failed = verdict(CHECK, healthy, healthy, ProbeResult.FAILED, epoch=1, current_epoch=1)
    assert not failed.uneject
    down = verdict(CHECK, healthy, HealthStatus.UNHEALTHY, ProbeResult.TIMED_OUT, epoch=1, current_epoch=1)
    assert down.changed
    assert down.refusal is poise.IneligibleReason.UNHEALTHY
