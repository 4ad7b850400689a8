"""Provider quota from rate-limit headers: OpenAI, Anthropic, the IETF draft, Retry-After."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import poise_py as poise
from poise_py import Quota, quota_from_headers

WALL = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC).timestamp()
"""The reader's "now" in these tests (2025-03-01T12:00:00Z)."""

OPENAI = {
    "x-ratelimit-limit-requests": "60",
    "x-ratelimit-limit-tokens": "150000",
    "x-ratelimit-remaining-requests": "59",
    "x-ratelimit-remaining-tokens": "149984",
    "x-ratelimit-reset-requests": "1s",
    "x-ratelimit-reset-tokens": "6m0s",
}
"""OpenAI's documented example set."""

ANTHROPIC = {
    "anthropic-ratelimit-requests-limit": "50",
    "anthropic-ratelimit-requests-remaining": "49",
    "anthropic-ratelimit-requests-reset": "2025-03-01T12:00:07Z",
    "anthropic-ratelimit-tokens-limit": "90000",
    "anthropic-ratelimit-tokens-remaining": "72000",
    "anthropic-ratelimit-tokens-reset": "2025-03-01T12:00:20Z",
    "anthropic-ratelimit-input-tokens-limit": "80000",
    "anthropic-ratelimit-input-tokens-remaining": "8000",
    "anthropic-ratelimit-input-tokens-reset": "2025-03-01T12:00:30+00:00",
    "anthropic-ratelimit-output-tokens-limit": "16000",
    "anthropic-ratelimit-output-tokens-remaining": "15000",
    "anthropic-ratelimit-output-tokens-reset": "2025-03-01T12:00:01Z",
}
"""Anthropic's header family as it sends it: counts, and resets as RFC 3339 times."""


def test_openais_headers_give_counts_and_duration_resets() -> None:
    quota = quota_from_headers(httpx.Headers(OPENAI))
    assert quota == Quota(
        requests_limit=60,
        requests_remaining=59,
        requests_reset=1.0,
        tokens_limit=150000,
        tokens_remaining=149984,
        tokens_reset=360.0,
    )
    assert quota.remaining_fraction == pytest.approx(59 / 60)
    assert not quota.exhausted
    assert quota.resets_in is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("20ms", 0.02),
        ("1h2m3.5s", 3723.5),
        ("0s", 0.0),
        ("7.25", 7.25),
        ("250us", 0.00025),
    ],
)
def test_openai_reset_durations(value: str, seconds: float) -> None:
    quota = quota_from_headers({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": value})
    assert quota is not None
    assert quota.requests_reset == pytest.approx(seconds)


def test_anthropics_headers_give_rfc3339_resets_from_wall_and_the_tightest_token_family() -> None:
    quota = quota_from_headers(ANTHROPIC, wall=WALL)
    assert quota is not None
    assert (quota.requests_limit, quota.requests_remaining, quota.requests_reset) == (50, 49, 7.0)
    # input tokens have 10% left, tokens 80%, output tokens 94%: the input tokens are the quota
    assert (quota.tokens_limit, quota.tokens_remaining, quota.tokens_reset) == (80000, 8000, 30.0)
    assert quota.remaining_fraction == pytest.approx(0.1)


def test_an_exhausted_anthropic_quota_resets_when_its_family_does() -> None:
    headers = {**ANTHROPIC, "anthropic-ratelimit-requests-remaining": "0", "retry-after": "9"}
    quota = quota_from_headers(headers, wall=WALL)
    assert quota is not None
    assert quota.exhausted
    assert quota.remaining_fraction == 0.0
    assert quota.retry_after == 9.0
    assert quota.resets_in == 7.0


def test_a_reset_in_the_past_is_zero_seconds_away() -> None:
    quota = quota_from_headers({"anthropic-ratelimit-requests-reset": "2025-03-01T11:00:00Z"}, wall=WALL)
    assert quota is not None
    assert quota.requests_reset == 0.0


def test_retry_after_ms_is_the_reset_of_an_exhausted_quota_without_its_own() -> None:
    quota = quota_from_headers({"x-ratelimit-remaining-tokens": "0", "retry-after-ms": "1500", "retry-after": "2"})
    assert quota is not None
    assert quota.retry_after == 1.5
    assert quota.tokens_reset is None
    assert quota.resets_in == 1.5


def test_retry_after_as_an_http_date_counts_from_wall() -> None:
    quota = quota_from_headers({"Retry-After": "Sat, 01 Mar 2025 12:00:42 GMT"}, wall=WALL)
    assert quota == Quota(retry_after=42.0)
    assert not quota.exhausted


def test_the_ietf_draft_separate_fields() -> None:
    headers = {"RateLimit-Limit": "100, 100;w=60", "RateLimit-Remaining": "0", "RateLimit-Reset": "30"}
    quota = quota_from_headers(headers)
    assert quota == Quota(requests_limit=100, requests_remaining=0, requests_reset=30.0)
    assert quota.exhausted
    assert quota.resets_in == 30.0


def test_the_ietf_draft_07_structured_field() -> None:
    quota = quota_from_headers({"RateLimit": "limit=100, remaining=50, reset=5"})
    assert quota == Quota(requests_limit=100, requests_remaining=50, requests_reset=5.0)
    assert quota.remaining_fraction == 0.5


def test_the_ietf_later_drafts_structured_field_with_its_policy() -> None:
    headers = {"RateLimit": '"burst";r=3;t=10', "RateLimit-Policy": '"daily";q=1000;w=86400, "burst";q=20;w=60'}
    assert quota_from_headers(headers) == Quota(requests_limit=20, requests_remaining=3, requests_reset=10.0)


def test_the_ietf_structured_field_with_several_policies_gives_the_tightest() -> None:
    policy = '"a";q=1000;w=60, "b";q=10;w=1'
    spent = quota_from_headers({"RateLimit": '"a";r=900;t=30, "b";r=0;t=1', "RateLimit-Policy": policy})
    assert spent == Quota(requests_limit=10, requests_remaining=0, requests_reset=1.0)
    assert spent.exhausted
    tight = quota_from_headers({"RateLimit": '"a";r=100;t=30, "b";r=9;t=1', "RateLimit-Policy": policy})
    assert tight == Quota(requests_limit=1000, requests_remaining=100, requests_reset=30.0)  # 10% left, not 90%


def test_provider_headers_win_over_the_ietf_ones() -> None:
    headers = {"x-ratelimit-remaining-requests": "7", "RateLimit-Remaining": "99", "RateLimit-Limit": "100"}
    assert quota_from_headers(headers) == Quota(requests_limit=100, requests_remaining=7)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"content-type": "application/json"},
        {"x-ratelimit-remaining-requests": "lots"},
        {"x-ratelimit-remaining-requests": "-1"},
        {"x-ratelimit-reset-requests": "soon"},
        {"anthropic-ratelimit-requests-reset": "tomorrow"},
        {"retry-after": "later"},
        {"x-ratelimit-remaining-requests": "1" * 300},
        None,
        12,
        [("x-ratelimit-remaining-requests",)],
    ],
)
def test_nothing_readable_is_none(headers: Any) -> None:
    assert quota_from_headers(headers) is None


@pytest.mark.parametrize(
    ("kwargs", "knob"),
    [
        ({"requests_limit": -1}, "Quota.requests_limit"),
        ({"tokens_remaining": 1.5}, "Quota.tokens_remaining"),
        ({"requests_remaining": True}, "Quota.requests_remaining"),
        ({"tokens_reset": -2.0}, "Quota.tokens_reset"),
        ({"retry_after": float("nan")}, "Quota.retry_after"),
    ],
)
def test_a_bad_quota_value_names_the_field(kwargs: dict[str, Any], knob: str) -> None:
    with pytest.raises(poise.ConfigError) as info:
        Quota(**kwargs)
    assert info.value.knob == knob


_names = st.sampled_from(
    [
        *OPENAI,
        *ANTHROPIC,
        "retry-after",
        "retry-after-ms",
        "RateLimit",
        "RateLimit-Policy",
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
        "x-other",
    ]
)
_values = st.one_of(
    st.text(max_size=40),
    st.integers(min_value=-5, max_value=10**20).map(str),
    st.sampled_from(["1s", "6m0s", "1h", "ms", "2025-03-01T12:00:07Z", '"a";r=1;t=2', "limit=1, remaining=0", "1e5"]),
)


@given(st.lists(st.tuples(_names, _values), max_size=20), st.floats(allow_nan=True))
def test_any_headers_read_without_raising(headers: list[tuple[str, str]], wall: float) -> None:
    quota = quota_from_headers(headers, wall=wall)
    assert quota is None or isinstance(quota, Quota)
    if quota is not None:
        fraction = quota.remaining_fraction
        assert fraction is None or 0.0 <= fraction <= 1.0
        assert quota.resets_in is None or quota.resets_in >= 0
