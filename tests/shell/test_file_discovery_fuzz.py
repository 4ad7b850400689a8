"""File discovery against arbitrary documents: one typed error or a valid result, the stream alive.

Hypothesis throws JSON and TOML documents at the parser and at a running balancer's
file source: nested thousands deep, numbers thousands of digits long, values of the
wrong type, any unicode. Each read gives either endpoints or one
:class:`EndpointsFileError`; the balancer keeps the last good pool through every bad
document and picks up a good file written after them.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import poise_py as poise
from poise_py._discovery._file import THREAD_PARSE_BYTES, _json_loads, parse_endpoints

pytestmark = pytest.mark.anyio

KEYS = ["id", "address", "weight", "tier", "zone", "metadata"]

scalars = st.one_of(
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["", "10.0.0.1:80", "a", "\u00e9\u0301", "\ud7ff", "\U0001f600", "x" * 300]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
entries = st.one_of(
    values,
    st.dictionaries(st.sampled_from(KEYS), values, max_size=6),
    st.builds(
        lambda i, extra: {"id": i, **extra},
        st.text(min_size=1, max_size=8),
        st.dictionaries(st.sampled_from(KEYS[1:]), values, max_size=3),
    ),
)
documents = st.one_of(
    values,
    st.builds(lambda es: {"endpoints": es}, st.lists(entries, max_size=5)),
    st.builds(
        lambda es, extra: {"endpoints": es, **extra},
        st.lists(entries, max_size=3),
        st.dictionaries(st.text(max_size=5), values, max_size=2),
    ),
)


def toml_value(value: object) -> str:
    """A TOML inline value for ``value`` (None, which TOML lacks, becomes a string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "inf" if value == math.inf else "-inf" if value == -math.inf else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))


def toml_document(document: object) -> str:
    if isinstance(document, dict):
        return "\n".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in document.items()) + "\n"
    return f"endpoints = {toml_value(document)}\n"


def pathological(fmt: str) -> st.SearchStrategy[bytes]:
    """Hand-made horrors: deep nesting, huge numbers, bytes that are not UTF-8, random text."""
    depth = st.integers(min_value=1, max_value=200_000)
    digits = st.integers(min_value=1, max_value=20_000)
    if fmt == "json":
        nested = depth.map(lambda n: ("[" * n + "]" * n).encode())
        deep_entry = depth.map(
            lambda n: ('{"endpoints": [{"id": "a", "metadata": ' + '{"k": ' * n + "1" + "}" * n + "}]}").encode()
        )
        big = digits.map(lambda n: ('{"endpoints": [{"id": "a", "weight": ' + "9" * n + "}]}").encode())
    else:
        nested = depth.map(lambda n: ("endpoints = " + "[" * n + "]" * n).encode())
        deep_entry = depth.map(
            lambda n: ('[[endpoints]]\nid = "a"\nmetadata = ' + "{k = " * n + "1" + "}" * n).encode()
        )
        big = digits.map(lambda n: ('[[endpoints]]\nid = "a"\nweight = ' + "9" * n).encode())
    return st.one_of(nested, deep_entry, big, st.binary(max_size=64), st.text(max_size=64).map(str.encode))


def encoded(fmt: str) -> st.SearchStrategy[bytes]:
    render = (lambda d: json.dumps(d, ensure_ascii=False)) if fmt == "json" else toml_document
    structured = documents.map(lambda d: render(d).encode("utf-8", "surrogatepass"))
    return st.one_of(structured, pathological(fmt))


def check_one(data: bytes, fmt: str) -> tuple[poise.Endpoint, ...] | poise.EndpointsFileError:
    try:
        endpoints = parse_endpoints(data, fmt, f"pool.{fmt}")
    except poise.EndpointsFileError as exc:
        error = exc
    else:
        assert all(isinstance(e, poise.Endpoint) for e in endpoints)
        return endpoints
    assert error.problem  # the typed error says what is wrong
    assert len(str(error)) < 2_000  # a clear line, not the document echoed back
    return error


@pytest.mark.parametrize("fmt", ["json", "toml"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_document_parses_to_endpoints_or_one_endpoints_file_error(fmt: str, data: st.DataObject) -> None:
    check_one(data.draw(encoded(fmt)), fmt)


GOOD_BEFORE = b'{"endpoints": ["10.0.0.1:80", "10.0.0.2:80"]}'
GOOD_AFTER = b'{"endpoints": ["10.0.0.3:80"]}'
GOOD_TOML_BEFORE = b'endpoints = ["10.0.0.1:80", "10.0.0.2:80"]\n'
GOOD_TOML_AFTER = b'endpoints = ["10.0.0.3:80"]\n'


async def poll(predicate: Any, what: str) -> None:
    for _ in range(20_000):
        if predicate():
            return
        await anyio.sleep(0.005)
    pytest.fail(f"never happened: {what}")


def live(lb: poise.LoadBalancer) -> set[str]:
    return {e.id for e in lb.snapshot().endpoints}


runs = itertools.count()
formats_and_documents = st.sampled_from(["json", "toml"]).flatmap(
    lambda fmt: st.tuples(st.just(fmt), st.lists(encoded(fmt), min_size=1, max_size=3))
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=formats_and_documents)
async def test_a_running_balancer_keeps_the_last_good_pool_through_any_documents_and_keeps_watching(
    tmp_path: Path, case: tuple[str, list[bytes]]
) -> None:
    fmt, docs = case
    before, after = (GOOD_BEFORE, GOOD_AFTER) if fmt == "json" else (GOOD_TOML_BEFORE, GOOD_TOML_AFTER)
    path = tmp_path / f"pool-{next(runs)}.{fmt}"
    path.write_bytes(before)
    errors: list[poise.EndpointsFileError] = []
    source = poise.FileDiscovery(path, interval=0.001, on_error=errors.append)
    async with poise.LoadBalancer(discovery=source, on_discovery_end=poise.DiscoveryEnd.FAIL_CLOSED) as lb:
        await poll(lambda: live(lb) == {"10.0.0.1:80", "10.0.0.2:80"}, "the first good file applied")
        good = live(lb)
        for doc in docs:
            verdict = check_one(doc, fmt)
            rejected = lb.discovery_rejected
            path.write_bytes(doc)
            if isinstance(verdict, poise.EndpointsFileError):
                await poll(
                    lambda v=verdict: source.error is not None and source.error.problem == v.problem, "the error"
                )
                assert live(lb) == good  # the last good pool is kept
            else:
                ids = {e.id for e in verdict}
                await poll(lambda i=ids, r=rejected: live(lb) == i or lb.discovery_rejected > r, "the update")
                good = live(lb)
            if good:
                lb.acquire().cancel()  # still serving
        path.write_bytes(after)
        await poll(lambda: live(lb) == {"10.0.0.3:80"}, "a good file after the bad ones")  # still watching
        assert source.error is None
    assert all(isinstance(e, poise.EndpointsFileError) for e in errors)


def outcome(load: Any, text: str) -> object:
    try:
        return ("ok", load(text))
    except json.JSONDecodeError as exc:
        return ("invalid", exc.msg, exc.pos)
    except (ValueError, RecursionError) as exc:
        return ("unusable", type(exc).__name__)


@settings(max_examples=200, deadline=None)
@given(
    document=st.one_of(
        documents.map(json.dumps),
        st.text(alphabet='[]{},:"0123456789 \n-.etruflasn', max_size=40),
        st.builds(lambda es: json.dumps({"endpoints": es})[:-1] + ', "x": 1}', st.lists(entries, max_size=4)),
    ),
    pad=st.sampled_from(["leading", "trailing"]),
)
def test_the_entry_by_entry_json_decoder_agrees_with_json_loads(document: str, pad: str) -> None:
    # Whitespace padding past the threshold sends the document down the entry-by-entry path.
    padding = " " * THREAD_PARSE_BYTES
    text = padding + document if pad == "leading" else document + padding
    assert outcome(_json_loads, text) == outcome(json.loads, text)
