"""One knob-validation module: each kind of knob checked and worded the same way everywhere."""

from __future__ import annotations

import math

import pytest

import poise_py as poise
from poise_py._knobs import check_bool, check_count, check_duration, check_number, check_share, optional


@pytest.mark.parametrize("value", [True, "1", 0, -1.0, math.nan, math.inf])
def test_a_duration_must_be_a_finite_positive_number_of_seconds(value: object) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        check_duration("X.wait", value)  # type: ignore[arg-type]
    assert caught.value.knob == "X.wait"


def test_a_share_given_as_a_percent_says_which_fraction_to_write() -> None:
    with pytest.raises(poise.ConfigError, match=r"write 0\.25") as caught:
        check_share("X.share", 25)
    assert "looks like a percent" in str(caught.value)


@pytest.mark.parametrize(("value", "ok"), [(1, True), (0, False), (True, False), (2.0, False), (2**32 + 1, False)])
def test_a_count_is_an_int_in_its_range_and_never_a_bool(value: object, ok: bool) -> None:
    if ok:
        assert check_count("X.n", value, maximum=2**32) == value  # type: ignore[arg-type]
    else:
        with pytest.raises(poise.ConfigError, match=r"must be an int in \[1, 2\*\*32\]"):
            check_count("X.n", value, maximum=2**32)  # type: ignore[arg-type]


def test_a_number_with_no_upper_bound_must_still_be_finite() -> None:
    assert check_number("X.m", 2, low=1.0, low_open=True) == 2.0
    for bad in (1.0, math.inf, math.nan, False):
        with pytest.raises(poise.ConfigError, match="must be"):
            check_number("X.m", bad, low=1.0, low_open=True)


def test_a_bool_knob_refuses_truthy_values() -> None:
    assert check_bool("X.flag", False) is False
    with pytest.raises(poise.ConfigError):
        check_bool("X.flag", 1)


def test_optional_passes_none_and_checks_anything_else() -> None:
    assert optional(check_duration, "X.wait", None) is None
    assert optional(check_duration, "X.wait", 0, allow_zero=True) == 0.0
    with pytest.raises(poise.ConfigError):
        optional(check_count, "X.n", 1, minimum=2)


def test_the_core_knobs_use_the_shared_checks() -> None:
    with pytest.raises(poise.ConfigError, match=r"must be an int >= 2") as caught:
        poise.CircuitPolicy(consecutive_transient_failures=1)
    assert caught.value.knob == "CircuitPolicy.consecutive_transient_failures"
    with pytest.raises(poise.ConfigError, match="must be a bool") as bool_error:
        poise.HealthCheck(probe=_probe, uneject=1)  # type: ignore[arg-type]
    assert bool_error.value.knob == "HealthCheck.uneject"


async def _probe(endpoint: poise.Endpoint) -> None:
    return None
