"""The one ``Retry-After`` reader: ``classify.parse_retry_after`` (lenient) and the quota's (strict)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import poise_py as poise
from poise_py import Quota, quota_from_headers

NOW = datetime(2026, 1, 1, tzinfo=UTC)
WALL = NOW.timestamp()


@pytest.mark.parametrize(
    ("value", "lenient", "strict"),
    [
        ("120", 120.0, 120.0),
        (" 1.5 ", 1.5, 1.5),
        ("Thu, 01 Jan 2026 00:02:00 GMT", 120.0, 120.0),
        ("Thu, 01 Jan 2026 00:02:00", 120.0, 120.0),  # no zone: UTC
        ("Wed, 31 Dec 2025 23:00:00 GMT", 0.0, 0.0),  # passed
        ("1e3", 1000.0, None),  # a number float() reads, not a plain decimal
        ("-5", 0.0, None),
        ("+5", 5.0, None),
        ("9" * 16, float("9" * 16), None),
        ("nan", None, None),
        ("inf", None, None),
        ("soon", None, None),
    ],
)
def test_parse_retry_after_takes_any_finite_number_and_the_quota_a_plain_decimal(
    value: str, lenient: float | None, strict: float | None
) -> None:
    assert poise.classify.parse_retry_after(value, now=NOW) == lenient
    quota = quota_from_headers({"retry-after": value}, wall=WALL)
    assert quota == (None if strict is None else Quota(retry_after=strict))
    if not value.endswith(("GMT", ":00")):  # a date counts from the real clock in http_status
        verdict = poise.classify.http_status(429, {"retry-after": value})
        assert verdict == (
            poise.Classification(poise.Fault.TRANSIENT, retry_after=strict) if strict else poise.Fault.TRANSIENT
        )


def test_parse_retry_after_counts_a_date_from_now_to_the_microsecond() -> None:
    now = datetime(2026, 1, 1, 0, 0, 0, 123457, tzinfo=UTC)
    assert poise.classify.parse_retry_after("Thu, 01 Jan 2026 00:02:00 GMT", now=now) == 119.876543


def test_parse_retry_after_of_nothing_is_none() -> None:
    assert poise.classify.parse_retry_after(None) is None
    assert poise.classify.parse_retry_after("  ") is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("1500", 1.5),
        (" 250.5 ", 0.2505),
        ("0", 0.0),
        ("1e3", None),  # a plain decimal only, as the quota has always read it
        ("+5", None),
        ("-5", None),
        ("9" * 16, None),
        ("nan", None),
        ("inf", None),
        ("soon", None),
    ],
)
def test_retry_after_ms_is_read_the_same_by_the_classifier_and_the_quota(value: str, seconds: float | None) -> None:
    verdict = poise.classify.http_status(429, {"retry-after-ms": value})
    quota = quota_from_headers({"retry-after-ms": value}, wall=WALL)
    delayed = poise.Classification(poise.Fault.TRANSIENT, retry_after=seconds) if seconds else None
    assert verdict == (delayed or poise.Fault.TRANSIENT)  # no delay (or none read): the bare tier
    assert quota == (None if seconds is None else Quota(retry_after=seconds))
