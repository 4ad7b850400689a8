"""ORCA load reports: the TEXT, JSON and BIN forms, the hand-written protobuf codec, the readers."""

from __future__ import annotations

import base64
import contextlib
import math
import struct
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import poise_py as poise
from poise_py import LoadReport, LoadReportError, load_report_from_headers, load_report_from_metadata
from poise_py._load_report import MAX_METRICS, MAX_VALUE_LENGTH

ENVOY_BIN = "CZqZmZmZmdk/MQAAAAAAAElAQg4KA2ZvbxEAAAAAAADgPw=="
"""Envoy's own test vector (its ORCA parser corpus): cpu_utilization 0.4, rps_fractional 50,
named_metrics {foo: 0.5}, serialized by the protobuf library."""


def test_envoys_binary_vector_reads_and_our_encoder_writes_the_same_bytes() -> None:
    report = LoadReport.parse("BIN " + ENVOY_BIN)
    assert report == LoadReport(cpu_utilization=0.4, qps=50, named_metrics={"foo": 0.5})
    assert base64.b64encode(report.to_binary()).decode() == ENVOY_BIN
    assert LoadReport.parse(base64.b64decode(ENVOY_BIN)) == report


def test_text_form_reads_envoys_colon_pairs_and_the_equals_pairs_backends_send() -> None:
    expected = LoadReport(
        cpu_utilization=0.7,
        application_utilization=0.8,
        mem_utilization=0.9,
        qps=1000,
        eps=2,
        named_metrics={"foo": 123, "bar": 0.2},
    )
    colon = "TEXT cpu_utilization:0.7,application_utilization:0.8,mem_utilization:0.9,rps_fractional:1000,eps:2,named_metrics.foo:123,named_metrics.bar:0.2"
    equals = "TEXT cpu_utilization=0.7, application_utilization=0.8, mem_utilization=0.9, rps_fractional=1000, eps=2, named_metrics.foo=123, named_metrics.bar=0.2"
    assert LoadReport.parse(colon) == expected
    assert LoadReport.parse(equals) == expected


def test_text_form_reads_utilization_and_request_cost_maps() -> None:
    report = LoadReport.parse("TEXT utilization.gpu=0.5, request_cost.db_rows=-3, named_metrics.kv_cache=0.25")
    assert report.utilization == {"gpu": 0.5}
    assert report.request_cost == {"db_rows": -3.0}
    assert report.named_metrics == {"kv_cache": 0.25}


def test_json_form_takes_camel_case_names_and_numbers_written_as_strings() -> None:
    report = LoadReport.parse('JSON {"cpuUtilization": "0.5", "rpsFractional": 12, "namedMetrics": {"q": 3}}')
    assert report == LoadReport(cpu_utilization=0.5, qps=12, named_metrics={"q": 3})


def test_the_deprecated_integer_rps_is_read_as_qps_unless_rps_fractional_is_given() -> None:
    only_rps = bytes([3 << 3 | 0, 42])
    assert LoadReport.parse(only_rps).qps == 42.0
    both = only_rps + bytes([6 << 3 | 1]) + struct.pack("<d", 7.5)
    assert LoadReport.parse(both).qps == 7.5
    assert LoadReport.parse('JSON {"rps": "9"}').qps == 9.0


def test_unknown_names_and_fields_are_skipped_so_a_newer_backend_still_reads() -> None:
    assert LoadReport.parse("TEXT cpu_utilization=0.5, future_metric=3") == LoadReport(cpu_utilization=0.5)
    assert LoadReport.parse("TEXT cpu_utilization=0.5, future_field=v2") == LoadReport(cpu_utilization=0.5)
    assert LoadReport.parse('JSON {"cpu_utilization": 0.5, "future": {"x": [1]}}') == LoadReport(cpu_utilization=0.5)
    unknown = bytes([10 << 3 | 0, 0x96, 0x01, 11 << 3 | 2, 2, 0xFF, 0xFE, 12 << 3 | 5, 1, 2, 3, 4])
    assert LoadReport.parse(unknown + LoadReport(eps=2).to_binary()) == LoadReport(eps=2)


def test_a_bare_prefix_with_its_trailing_space_stripped_is_an_empty_report() -> None:
    assert LoadReport.parse("TEXT") == LoadReport()
    assert LoadReport().to_text() == "TEXT "
    assert LoadReport.parse(LoadReport().to_header("BIN")) == LoadReport()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("cpu_utilization=0.5", "no TEXT, JSON or BIN prefix"),
        ("XML <cpu/>", "no TEXT, JSON or BIN prefix"),
        ("TEXT cpu_utilization=0.5, cpu_utilization=0.6", "given twice"),
        ("TEXT cpu_utilization=NaN", "not a decimal number"),
        ("TEXT cpu_utilization=1e999", "not finite"),
        ("TEXT cpu_utilization=-0.5", "must be >= 0"),
        ("TEXT cpu_utilization", "not name=value"),
        ("TEXT =4", "no name"),
        ("TEXT named_metrics.=4", "empty metric name"),
        ("TEXT cpu_utilization=0x10", "not a decimal number"),
        ("JSON [1, 2]", "not an object"),
        ("JSON {", "invalid JSON"),
        ('JSON {"eps": NaN}', "invalid JSON"),
        ('JSON {"eps": true}', "not a number"),
        ('JSON {"named_metrics": 3}', "not an object"),
        ("JSON " + "[" * 5000, "invalid JSON"),
        ("BIN not base64!", "not base64"),
        ("BIN " + base64.b64encode(b"\x09\x00\x00").decode(), "ends inside a field"),
        ("BIN " + base64.b64encode(b"\x08\x01").decode(), "wire type 0, not 1"),
        ("BIN " + base64.b64encode(b"\x0b").decode(), "wire type 3"),
        ("BIN " + base64.b64encode(b"\x00\x01").decode(), "numbered 0"),
        ("BIN " + base64.b64encode(b"\x18" + b"\xff" * 11).decode(), "longer than 10 bytes"),
        ("BIN " + base64.b64encode(b"\x42\x04\x0a\x02\xff\xfe").decode(), "not UTF-8"),
    ],
)
def test_a_malformed_value_raises_load_report_error_saying_what_was_wrong(value: str, problem: str) -> None:
    with pytest.raises(LoadReportError) as info:
        LoadReport.parse(value)
    assert problem in str(info.value)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, poise.PoiseError)


def test_the_error_repeats_only_a_bounded_part_of_the_value() -> None:
    value = "TEXT " + "x" * (MAX_VALUE_LENGTH - 10)
    with pytest.raises(LoadReportError) as info:
        LoadReport.parse(value)
    assert len(str(info.value)) < 400


def test_values_past_the_bounds_are_refused() -> None:
    with pytest.raises(LoadReportError, match="longer than"):
        LoadReport.parse("TEXT " + " " * MAX_VALUE_LENGTH)
    with pytest.raises(LoadReportError, match="longer than"):
        LoadReport.parse(b"\x00" * (MAX_VALUE_LENGTH + 1))
    many = ", ".join(f"named_metrics.m{i}=1" for i in range(MAX_METRICS + 1))
    with pytest.raises(LoadReportError, match=f"more than {MAX_METRICS}"):
        LoadReport.parse("TEXT " + many)
    with pytest.raises(LoadReportError):
        LoadReport.parse(123)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "knob"),
    [
        ({"cpu_utilization": -0.1}, "LoadReport.cpu_utilization"),
        ({"mem_utilization": math.nan}, "LoadReport.mem_utilization"),
        ({"qps": math.inf}, "LoadReport.qps"),
        ({"eps": "3"}, "LoadReport.eps"),
        ({"application_utilization": True}, "LoadReport.application_utilization"),
        ({"utilization": {"gpu": -1}}, "LoadReport.utilization['gpu']"),
        ({"utilization": [("gpu", 1)]}, "LoadReport.utilization"),
        ({"named_metrics": {"": 1}}, "LoadReport.named_metrics"),
        ({"named_metrics": {"x" * 300: 1}}, "LoadReport.named_metrics"),
        ({"named_metrics": {"\ud800": 1}}, "LoadReport.named_metrics"),
        ({"request_cost": {f"c{i}": 1 for i in range(MAX_METRICS + 1)}}, "LoadReport.request_cost"),
    ],
)
def test_a_bad_value_names_the_field(kwargs: dict[str, Any], knob: str) -> None:
    with pytest.raises(poise.ConfigError) as info:
        LoadReport(**kwargs)
    assert info.value.knob == knob


def test_negative_zero_is_zero_and_the_maps_are_read_only() -> None:
    report = LoadReport(cpu_utilization=-0.0, named_metrics={"a": 1})
    assert math.copysign(1.0, report.cpu_utilization) == 1.0
    with pytest.raises(TypeError):
        report.named_metrics["b"] = 2  # type: ignore[index]


def test_text_refuses_a_name_it_cannot_carry_and_json_and_bin_carry_it() -> None:
    report = LoadReport(named_metrics={"a,b=c d": 1.0, "ünï": 2.0})
    with pytest.raises(LoadReportError, match="cannot be written in the TEXT form"):
        report.to_text()
    assert LoadReport.parse(report.to_json()) == report
    assert report.to_json().isascii()
    assert LoadReport.parse(report.to_header("BIN")) == report


def test_to_header_refuses_an_unknown_form() -> None:
    with pytest.raises(poise.ConfigError) as info:
        LoadReport().to_header("XML")
    assert info.value.knob == "form"


# --- round trips and fuzz ----------------------------------------------------------------------

_unsigned = st.floats(min_value=0, max_value=1e300, allow_nan=False, allow_infinity=False)
_signed = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False)
_tchar = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~", min_size=1, max_size=20
)
_any_name = st.text(min_size=1, max_size=20)


def reports(names: st.SearchStrategy[str]) -> st.SearchStrategy[LoadReport]:
    return st.builds(
        LoadReport,
        cpu_utilization=_unsigned,
        mem_utilization=_unsigned,
        application_utilization=_unsigned,
        qps=_unsigned,
        eps=_unsigned,
        utilization=st.dictionaries(names, _unsigned, max_size=5),
        request_cost=st.dictionaries(names, _signed, max_size=5),
        named_metrics=st.dictionaries(names, _signed, max_size=5),
    )


@given(reports(_tchar))
def test_the_text_form_round_trips(report: LoadReport) -> None:
    assert LoadReport.parse(report.to_text()) == report


@given(reports(_any_name))
def test_the_json_form_round_trips_any_name(report: LoadReport) -> None:
    assert LoadReport.parse(report.to_json()) == report


@given(reports(_any_name))
def test_the_binary_forms_round_trip_any_name(report: LoadReport) -> None:
    assert LoadReport.parse(report.to_binary()) == report
    assert LoadReport.parse(report.to_header("BIN")) == report
    assert load_report_from_metadata([("endpoint-load-metrics-bin", report.to_binary())]) == report


@given(st.binary(max_size=300))
def test_random_bytes_raise_nothing_but_load_report_error(data: bytes) -> None:
    try:
        parsed: LoadReport | None = LoadReport.parse(data)
    except LoadReportError:
        parsed = None
    assert load_report_from_metadata([("endpoint-load-metrics-bin", data)]) == parsed


@given(st.sampled_from(["TEXT ", "JSON ", "BIN ", ""]), st.text(max_size=300))
def test_random_text_raises_nothing_but_load_report_error(prefix: str, body: str) -> None:
    with contextlib.suppress(LoadReportError):
        LoadReport.parse(prefix + body)
    load_report_from_headers({"endpoint-load-metrics": prefix + body})


@given(
    st.sampled_from(["TEXT ", "JSON "]),
    st.lists(
        st.one_of(
            st.sampled_from(["cpu_utilization", "eps", "named_metrics.", "utilization.", "{", "}", '"', ":", ",", "="]),
            st.text(max_size=5),
            st.floats().map(repr),
        ),
        max_size=30,
    ),
)
def test_near_miss_text_raises_nothing_but_load_report_error(prefix: str, parts: list[str]) -> None:
    with contextlib.suppress(LoadReportError):
        LoadReport.parse(prefix + "".join(parts))


# --- the readers -------------------------------------------------------------------------------


def test_headers_are_read_from_httpx_a_dict_or_a_list_of_byte_pairs_in_any_case() -> None:
    report = LoadReport(cpu_utilization=0.25, named_metrics={"q": 2})
    value = report.to_text()
    assert load_report_from_headers(httpx.Headers({"Endpoint-Load-Metrics": value})) == report
    assert load_report_from_headers({"ENDPOINT-LOAD-METRICS": value}) == report
    assert (
        load_report_from_headers([(b"content-type", b"text/plain"), (b"endpoint-load-metrics", value.encode())])
        == report
    )


def test_the_binary_header_wins_over_the_text_header_as_in_envoy() -> None:
    text = LoadReport(cpu_utilization=0.1).to_text()
    headers = [("endpoint-load-metrics", text), ("endpoint-load-metrics-bin", ENVOY_BIN)]
    assert load_report_from_headers(headers) == LoadReport.parse("BIN " + ENVOY_BIN)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"content-type": "text/plain"},
        {"endpoint-load-metrics": "TEXT cpu_utilization=oops"},
        {"endpoint-load-metrics": "TEXT " + "named_metrics.a=1, " * 1000},
        {"endpoint-load-metrics-bin": "!!!"},
        {"endpoint-load-metrics-bin": "A" * (MAX_VALUE_LENGTH + 4)},
        [("endpoint-load-metrics", 3)],
        [("endpoint-load-metrics",)],
        None,
        42,
        "endpoint-load-metrics",
    ],
)
def test_the_header_reader_returns_none_for_anything_it_cannot_read(headers: Any) -> None:
    assert load_report_from_headers(headers) is None


def test_metadata_is_read_from_bytes_or_base64_and_the_text_key_too() -> None:
    report = LoadReport(eps=1.5, utilization={"disk": 0.5})
    assert load_report_from_metadata((("x-other", "1"), ("endpoint-load-metrics-bin", report.to_binary()))) == report
    assert (
        load_report_from_metadata([("endpoint-load-metrics-bin", base64.b64encode(report.to_binary()).decode())])
        == report
    )
    assert load_report_from_metadata([("endpoint-load-metrics", report.to_json())]) == report


@pytest.mark.parametrize("metadata", [None, [], [("endpoint-load-metrics-bin", b"\x0b")], [("a", "b", "c")], 7])
def test_the_metadata_reader_returns_none_for_anything_it_cannot_read(metadata: Any) -> None:
    assert load_report_from_metadata(metadata) is None
