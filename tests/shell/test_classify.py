"""Classifier presets for gRPC and HTTP, with the real exception types."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
import grpc.aio
import httpx
import pytest

import poise_py as poise
from poise_py import Classification, Fault, classify

MARKER = ("wool-fault", "worker-internal")


def split(verdict: Fault | Classification) -> tuple[Fault, bool]:
    """A verdict's fault, and whether it is load-shaped."""
    if isinstance(verdict, Classification):
        return verdict.fault, verdict.overload
    return verdict, False


def rpc_error(code: grpc.StatusCode, *trailing: tuple[str, str]) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), "details")


@pytest.mark.parametrize(
    ("code", "fault", "overload"),
    [
        (grpc.StatusCode.UNAVAILABLE, Fault.TRANSIENT, False),  # also a refused connection: a dead endpoint
        (grpc.StatusCode.DEADLINE_EXCEEDED, Fault.TRANSIENT, True),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, Fault.TRANSIENT, False),  # a quota: this endpoint's own
        (grpc.StatusCode.INTERNAL, Fault.SUSPECT, False),
        (grpc.StatusCode.INVALID_ARGUMENT, Fault.CALLER, False),
        (grpc.StatusCode.FAILED_PRECONDITION, Fault.CALLER, False),
        (grpc.StatusCode.UNAUTHENTICATED, Fault.PERMANENT, False),
        (grpc.StatusCode.UNIMPLEMENTED, Fault.FATAL, False),
    ],
)
def test_grpc_status_codes_map_to_their_tiers(code: grpc.StatusCode, fault: Fault, overload: bool) -> None:
    assert split(poise.classify.grpc(marker=MARKER)(rpc_error(code))) == (fault, overload)


def test_an_override_to_a_fault_that_cannot_be_load_drops_the_overload_mark() -> None:
    classify = poise.classify.grpc(overrides={"DEADLINE_EXCEEDED": Fault.FATAL})
    assert classify(rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED)) is Fault.FATAL


def test_grpc_internal_with_the_servers_marker_is_fatal_without_it_suspect() -> None:
    classify = poise.classify.grpc(marker=MARKER)
    assert classify(rpc_error(grpc.StatusCode.INTERNAL, MARKER)) is Fault.FATAL
    assert classify(rpc_error(grpc.StatusCode.INTERNAL, ("wool-fault", "other"))) is Fault.SUSPECT
    assert classify(rpc_error(grpc.StatusCode.INTERNAL)) is Fault.SUSPECT
    # no marker configured: a marked INTERNAL is only a strike
    assert poise.classify.grpc()(rpc_error(grpc.StatusCode.INTERNAL, MARKER)) is Fault.SUSPECT


def test_grpc_overrides_and_fallback() -> None:
    classify = poise.classify.grpc(overrides={"unavailable": Fault.SUSPECT})
    assert classify(rpc_error(grpc.StatusCode.UNAVAILABLE)) is Fault.SUSPECT
    assert classify(ValueError("not grpc")) is Fault.CALLER
    with pytest.raises(poise.ConfigError):
        poise.classify.grpc(overrides={"INTERNAL": "fatal"})  # type: ignore[dict-item]
    with pytest.raises(poise.ConfigError):
        poise.classify.grpc(marker=("only-key",))  # type: ignore[arg-type]


def status_error(status: int, **headers: str) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "http://backend/")
    response = httpx.Response(status, headers=headers, request=request)
    return httpx.HTTPStatusError("status", request=request, response=response)


@pytest.mark.parametrize(
    ("status", "fault", "overload"),
    [
        (500, Fault.SUSPECT, False),
        (502, Fault.SUSPECT, False),
        (503, Fault.SUSPECT, True),
        (504, Fault.SUSPECT, True),
        (429, Fault.TRANSIENT, False),  # a quota: this endpoint's own
        (401, Fault.PERMANENT, False),
        (403, Fault.PERMANENT, False),
        (404, Fault.CALLER, False),
        (400, Fault.CALLER, False),
    ],
)
def test_http_status_codes_map_to_their_tiers(status: int, fault: Fault, overload: bool) -> None:
    assert split(poise.classify.http()(status_error(status))) == (fault, overload)


def test_http_gateway_errors_are_configurable() -> None:
    classify = poise.classify.http(gateway=Fault.TRANSIENT)
    assert classify(status_error(503)) == Classification(Fault.TRANSIENT, overload=True)
    assert classify(status_error(500)) is Fault.SUSPECT


def test_http_429_carries_retry_after_in_seconds_or_as_a_date() -> None:
    classify = poise.classify.http()
    assert classify(status_error(429, **{"Retry-After": "60"})) == Classification(Fault.TRANSIENT, retry_after=60.0)
    verdict = classify(status_error(503, **{"retry-after": "7"}))
    assert verdict == Classification(Fault.SUSPECT, retry_after=7.0, overload=True)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert poise.classify.parse_retry_after("Thu, 01 Jan 2026 00:02:00 GMT", now=now) == 120.0
    assert poise.classify.parse_retry_after("garbage") is None
    assert poise.classify.parse_retry_after("-5") == 0.0
    assert poise.classify.parse_retry_after("nan") is None


def test_httpx_transport_errors() -> None:
    classify = poise.classify.http()
    request = httpx.Request("GET", "http://backend/")
    assert classify(httpx.ConnectTimeout("t", request=request)) is Fault.TRANSIENT
    assert classify(httpx.PoolTimeout("t", request=request)) is Fault.TRANSIENT
    assert classify(httpx.ConnectError("refused", request=request)) is Fault.SUSPECT
    assert classify(httpx.ReadTimeout("slow", request=request)) == Classification(Fault.SUSPECT, overload=True)
    assert classify(httpx.WriteTimeout("slow", request=request)) == Classification(Fault.SUSPECT, overload=True)
    assert classify(httpx.RemoteProtocolError("reset", request=request)) is Fault.SUSPECT
    assert classify(httpx.UnsupportedProtocol("ftp", request=request)) is Fault.CALLER
    assert classify(ConnectionResetError()) is Fault.SUSPECT


def test_http_status_helper_for_responses_that_were_not_raised() -> None:
    assert poise.classify.http_status(200) is None
    assert poise.classify.http_status(302) is None
    assert poise.classify.http_status(500) is Fault.SUSPECT


def test_default_classifier_honours_an_explicit_fault_marker() -> None:
    err = poise.FaultError(Fault.FATAL, "evict me", retry_after=5)
    assert poise.default_classifier(err) == Classification(Fault.FATAL, retry_after=5)
    assert poise.default_classifier(KeyError("k")) is Fault.CALLER
    assert poise.default_classifier(TimeoutError()) == Classification(Fault.SUSPECT, overload=True)
    marked = poise.FaultError(Fault.SUSPECT, "queue full", overload=True)
    assert poise.default_classifier(marked) == Classification(Fault.SUSPECT, overload=True)
    with pytest.raises(poise.ConfigError, match="overload"):
        Classification(Fault.SUSPECT, overload="yes")  # type: ignore[arg-type]
    assert poise.default_classifier(poise.NoEligibleEndpoints({}, 0)) is Fault.CALLER


@pytest.mark.parametrize(
    ("value", "retry_after"),
    [
        ("250", 0.25),
        ("0", 0.0),
        ("-1", None),
        ("soon", None),
        ("1.5", None),
        ("9" * 13, None),
        ("\u00b2", None),  # a digit to str.isdigit, not to int()
        ("\u0661\u0662", None),  # Arabic-Indic twelve: ASCII digits only
    ],
)
def test_a_grpc_servers_pushback_trailer_is_the_retry_after(value: str, retry_after: float | None) -> None:
    classify = poise.classify.grpc()
    plain = split(classify(rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED)))
    verdict = classify(rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, ("grpc-retry-pushback-ms", value)))
    assert split(verdict) == plain  # the same tier and load mark as without the trailer
    assert (verdict.retry_after if isinstance(verdict, poise.Classification) else None) == retry_after


def test_a_pushback_on_a_callers_error_is_ignored_and_on_a_plain_fault_makes_a_classification() -> None:
    classify = poise.classify.grpc()
    bad = rpc_error(grpc.StatusCode.INVALID_ARGUMENT, ("grpc-retry-pushback-ms", "100"))
    assert classify(bad) is Fault.CALLER
    unavailable = rpc_error(grpc.StatusCode.UNAVAILABLE, ("grpc-retry-pushback-ms", "100"))
    verdict = classify(unavailable)
    assert isinstance(verdict, poise.Classification)
    assert verdict.retry_after == 0.1


# -- what LLM providers send: retry-after-ms, rate-limit headers, 529 ------------------------


def test_retry_after_ms_wins_over_retry_after() -> None:
    verdict = classify.http_status(429, {"retry-after-ms": "1500", "retry-after": "9"})
    assert verdict == poise.Classification(Fault.TRANSIENT, retry_after=1.5)


@pytest.mark.parametrize("value", ["-5", "soon", "nan", "inf", "1" * 40])
def test_a_bad_retry_after_ms_falls_back_to_retry_after(value: str) -> None:
    verdict = classify.http_status(503, {"retry-after-ms": value, "retry-after": "2"})
    assert verdict == poise.Classification(Fault.SUSPECT, retry_after=2.0, overload=True)


def test_a_429_without_retry_after_waits_for_its_spent_quotas_reset() -> None:
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s"}
    assert classify.http_status(429, headers) == poise.Classification(Fault.TRANSIENT, retry_after=360.0)
    unspent = {"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "6m0s"}
    assert classify.http_status(429, unspent) is Fault.TRANSIENT


def test_a_529_is_load_shaped_like_a_503() -> None:
    assert classify.http_status(529) == poise.Classification(Fault.SUSPECT, overload=True)
    assert classify.http_status(529, gateway=Fault.TRANSIENT) == poise.Classification(Fault.TRANSIENT, overload=True)


def test_the_llm_preset_moves_past_a_providers_overload_without_a_strike() -> None:
    class AnsweredError(Exception):
        def __init__(self, status: int) -> None:
            self.response = type("R", (), {"status_code": status, "headers": {}})()

    judge = classify.llm()
    assert judge(AnsweredError(503)) == poise.Classification(Fault.TRANSIENT, overload=True)
    assert judge(AnsweredError(529)) == poise.Classification(Fault.TRANSIENT, overload=True)
    assert judge(AnsweredError(500)) is Fault.SUSPECT
    assert judge(AnsweredError(401)) is Fault.PERMANENT


def test_a_repeated_retry_after_is_read_from_its_first_value_as_the_quota_reads_it() -> None:
    headers = httpx.Headers([("Retry-After", "7"), ("Retry-After", "9")])  # httpx's get() joins them: "7, 9"
    assert classify.http_status(429, headers) == poise.Classification(Fault.TRANSIENT, retry_after=7.0)
    assert poise.quota_from_headers(headers) == poise.Quota(retry_after=7.0)
