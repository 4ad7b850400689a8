"""FileDiscovery: an edited, corrupted, then fixed file; parsing JSON and TOML."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import poise_py as poise
from poise_py._discovery._file import parse_endpoints
from tests.support.discovery import Tap, live_ids

pytestmark = pytest.mark.anyio


def write_json(path: Path, *ids: str) -> None:
    path.write_text(
        json.dumps({"endpoints": [{"id": i, "address": ["127.0.0.1", 8000 + n]} for n, i in enumerate(ids)]})
    )


@pytest.mark.backends("trio")
async def test_a_balancer_follows_an_edited_then_corrupted_then_fixed_file(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.json"
    write_json(path, "a", "b")
    errors: list[tuple[poise.EndpointsFileError, set[str]]] = []
    error_seen = anyio.Event()

    def on_error(error: poise.EndpointsFileError) -> None:
        errors.append((error, live_ids(lb)))
        error_seen.set()

    source = poise.FileDiscovery(path, interval=1.0, on_error=on_error)
    tap = Tap(source)
    lb = poise.LoadBalancer(discovery=tap)
    async with lb:
        await tap.wait(1)
        assert live_ids(lb) == {"a", "b"}
        assert lb.snapshot()["a"].endpoint.address == ("127.0.0.1", 8000)

        write_json(path, "a", "b", "c")  # edited
        await tap.wait(2)
        assert live_ids(lb) == {"a", "b", "c"}
        assert lb.discovery_revision == 2

        path.write_text('{"endpoints": [{"id": "a"')  # corrupted
        await error_seen.wait()
        await anyio.sleep(5)  # several more polls of the same bad file
        assert live_ids(lb) == {"a", "b", "c"}
        assert lb.discovery_revision == 2
        assert source.error is not None
        assert "not valid JSON" in source.error.problem

        write_json(path, "c", "d")  # fixed
        await tap.wait(3)
        assert live_ids(lb) == {"c", "d"}
        assert source.error is None
    assert len(errors) == 1  # reported once, not once per poll
    error, pool_then = errors[0]
    assert isinstance(error, poise.DiscoveryError)
    assert error.path == str(path)
    assert pool_then == {"a", "b", "c"}  # the last good pool stayed live
    assert source.rejected == 1


async def until(predicate: Callable[[], bool]) -> None:
    """Let virtual time pass until ``predicate()`` holds (file reads run in a thread, off the clock).

    Bounded by real time, not by a count of virtual sleeps: the loop holds the GIL while it
    spins, and a worker thread's read may need more real time than 10,000 autojumped sleeps
    take (it did, now and then, under the compiled build, which spins faster).
    """
    give_up = time.monotonic() + 60.0
    while time.monotonic() < give_up:
        if predicate():
            return
        await anyio.sleep(0.5)
    pytest.fail("the condition never held")


@pytest.mark.backends("trio")
async def test_a_formatting_only_edit_publishes_no_revision(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.json"
    path.write_text('["10.0.0.1:80"]')
    source = poise.FileDiscovery(path, interval=1.0)
    tap = Tap(source)
    async with poise.LoadBalancer(discovery=tap) as lb:
        await tap.wait(1)
        path.write_text("[")
        await until(lambda: source.error is not None)
        path.write_text('[\n  "10.0.0.1:80"\n]\n')  # the same pool, formatted differently
        await until(lambda: source.error is None)
        await anyio.sleep(3)
        assert lb.discovery_revision == 1
        assert tap.consumed == 1
        path.write_text('["10.0.0.1:80", "10.0.0.2:80"]')
        await tap.wait(2)
        assert lb.discovery_revision == 2


@pytest.mark.backends("trio")
async def test_a_missing_file_is_reported_then_picked_up_when_it_appears(tmp_path: Path) -> None:
    path = tmp_path / "later.toml"
    seen = anyio.Event()

    def on_error(error: poise.EndpointsFileError) -> None:
        assert "cannot be read" in error.problem
        path.write_text('[[endpoints]]\nid = "a"\naddress = ["10.0.0.1", 80]\n')
        seen.set()

    source = poise.FileDiscovery(path, interval=1.0, on_error=on_error)
    stream = aiter(source)
    update = await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    assert seen.is_set()
    assert update == poise.Snapshot(1, [poise.Endpoint("a", address=("10.0.0.1", 80))])


async def test_load_parses_toml(tmp_path: Path) -> None:
    path = tmp_path / "pool.toml"
    path.write_text(
        """
[[endpoints]]
id = "a"
address = ["10.0.0.1", 8080]
weight = 2
tier = 1
zone = "eu-1"
metadata = { rack = "r7" }

[[endpoints]]
id = "b"
address = "http://10.0.0.2:8080"
"""
    )
    loaded = await poise.FileDiscovery(path).load()
    assert loaded == (
        poise.Endpoint("a", address=("10.0.0.1", 8080), weight=2, tier=1, zone="eu-1", metadata={"rack": "r7"}),
        poise.Endpoint("b", address="http://10.0.0.2:8080"),
    )
    assert loaded[0].metadata == {"rack": "r7"}


async def test_load_of_a_malformed_file_raises_endpoints_file_error(tmp_path: Path) -> None:
    path = tmp_path / "pool.json"
    path.write_text("[{]")
    with pytest.raises(poise.EndpointsFileError) as caught:
        await poise.FileDiscovery(path).load()
    assert isinstance(caught.value.__cause__, json.JSONDecodeError)
    with pytest.raises(poise.EndpointsFileError, match="cannot be read"):
        await poise.FileDiscovery(tmp_path / "absent.json").load()


def test_json_shorthand_entries_and_list_addresses() -> None:
    parsed = parse_endpoints(b'["10.0.0.1:80", {"id": "b", "address": ["h", 1]}]', "json")
    assert parsed == (
        poise.Endpoint("10.0.0.1:80", address="10.0.0.1:80"),
        poise.Endpoint("b", address=("h", 1)),
    )


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (b'{"endpoints": [{"id": "a"}, {"id": "a"}]}', "twice"),
        (b'{"endpoints": [{"id": "a", "wieght": 2}]}', "unknown keys"),
        (b'{"endpoints": [{"address": "x"}]}', "no id"),
        (b'{"endpoints": [{"id": "a", "weight": 0}]}', "Endpoint.weight"),
        (b'{"endpoints": [{"id": "a", "metadata": 3}]}', "metadata"),
        (b'{"endpoints": [7]}', "table or a string"),
        (b'{"endpoint": []}', "unknown top-level keys"),
        (b"{}", "no 'endpoints'"),
        (b'{"endpoints": {"a": 1}}', "must be a list"),
        (b"\xff\xfe", "not valid JSON"),
    ],
)
def test_malformed_documents_are_rejected_with_a_clear_problem(document: bytes, problem: str) -> None:
    with pytest.raises(poise.EndpointsFileError) as caught:
        parse_endpoints(document, "json", "pool.json")
    assert problem in caught.value.problem
    assert caught.value.path == "pool.json"


def test_malformed_toml_is_rejected() -> None:
    with pytest.raises(poise.EndpointsFileError, match="not valid TOML"):
        parse_endpoints(b"[[endpoints]\nid = 1", "toml")


@pytest.mark.parametrize(
    ("kwargs", "knob"),
    [
        ({"path": "pool.yaml"}, "format"),
        ({"path": "pool.json", "format": "yaml"}, "format"),
        ({"path": "pool.json", "interval": -1}, "interval"),
        ({"path": "pool.json", "on_error": 3}, "on_error"),
    ],
)
def test_invalid_file_knobs_raise_config_error(kwargs: dict[str, Any], knob: str) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.FileDiscovery(**kwargs)
    assert caught.value.knob == knob


NESTED = b'{"endpoints": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
HUGE_NUMBER = b'{"endpoints": [{"id": "a", "weight": ' + b"9" * 5_000 + b"}]}"


def nested_list(fmt: str, n: int) -> bytes:
    return (("endpoints = " if fmt == "toml" else "") + "[" * n + "]" * n).encode()


def nested_metadata(fmt: str, n: int) -> bytes:
    if fmt == "toml":
        return ('[[endpoints]]\nid = "a"\nmetadata = ' + "{k = " * n + "1" + "}" * n).encode()
    return ('{"endpoints": [{"id": "a", "metadata": ' + '{"k": ' * n + "1" + "}" * n + "}]}").encode()


def nested_extra_key(fmt: str, n: int) -> bytes:
    if fmt == "toml":
        return ("endpoints = []\nx = " + "[" * n + "]" * n).encode()
    return ('{"x": ' + "[" * n + "]" * n + ', "endpoints": []}').encode()


def verdict(document: bytes, fmt: str) -> str:
    try:
        return f"{len(parse_endpoints(document, fmt))} endpoints"
    except poise.EndpointsFileError as exc:
        return exc.problem


def on_a_deep_stack(frames: int, call: Callable[[], str]) -> str:
    return call() if frames == 0 else on_a_deep_stack(frames - 1, call)


@pytest.mark.parametrize("fmt", ["json", "toml"])
@pytest.mark.parametrize("shape", [nested_list, nested_metadata, nested_extra_key], ids=lambda f: f.__name__)
@pytest.mark.parametrize("depth", [30, 60, 63, 64, 65, 300, 600, 900, 2_000])
def test_the_verdict_on_a_nested_document_does_not_depend_on_how_deep_the_callers_stack_is(
    fmt: str, shape: Callable[[str, int], bytes], depth: int
) -> None:
    # A parser stops at Python's recursion limit, which a deep caller has partly used:
    # the same document used to parse from a shallow stack and fail from a deep one.
    document = shape(fmt, depth)
    shallow = verdict(document, fmt)
    assert on_a_deep_stack(700, lambda: verdict(document, fmt)) == shallow
    if depth > 64:  # whatever else is wrong with it, first: too deep
        assert shallow == "nests lists or tables more than 64 deep"
    elif depth <= 30:
        assert "64 deep" not in shallow


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (NESTED, "nests lists or tables more than 64 deep"),
        (HUGE_NUMBER, "ValueError"),
        (b'{"endpoints": [{"id": "a", "metadata": ' + b'{"k": ' * 40 + b"1" + b"}" * 40 + b"}]}", "more than 32 deep"),
    ],
    ids=["nested", "huge-number", "deep-metadata"],
)
@pytest.mark.backends("trio")
async def test_a_nested_or_huge_number_file_is_one_error_and_a_fixed_file_is_picked_up_even_when_failing_closed(
    tmp_path: Path, document: bytes, problem: str
) -> None:
    path = tmp_path / "endpoints.json"
    write_json(path, "a", "b")
    errors: list[poise.EndpointsFileError] = []
    source = poise.FileDiscovery(path, interval=1.0, on_error=errors.append)
    lb = poise.LoadBalancer(discovery=source, on_discovery_end=poise.DiscoveryEnd.FAIL_CLOSED)
    async with lb:
        await until(lambda: live_ids(lb) == {"a", "b"})
        path.write_bytes(document)
        await until(lambda: bool(errors))
        assert problem in errors[0].problem
        assert live_ids(lb) == {"a", "b"}  # the last good pool is kept
        async with lb.acquire():  # and serving: the stream did not end
            pass
        write_json(path, "c")
        await until(lambda: live_ids(lb) == {"c"})  # still watching
        assert source.error is None
    assert len(errors) == 1


@pytest.mark.backends("trio")
async def test_a_file_over_max_bytes_is_rejected_unparsed_and_the_pool_kept(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.json"
    write_json(path, "a")
    errors: list[poise.EndpointsFileError] = []
    source = poise.FileDiscovery(path, interval=1.0, on_error=errors.append, max_bytes=200)
    async with poise.LoadBalancer(discovery=source) as lb:
        await until(lambda: live_ids(lb) == {"a"})
        write_json(path, *(f"n{i}" for i in range(20)))
        await until(lambda: bool(errors))
        assert "max_bytes=200" in errors[0].problem
        assert live_ids(lb) == {"a"}
    with pytest.raises(poise.EndpointsFileError, match="max_bytes"):
        await source.load()


async def test_a_large_file_is_parsed_in_a_worker_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from poise_py._discovery import _file as _file_discovery

    path = tmp_path / "endpoints.json"
    write_json(path, *(f"node-{i}" for i in range(2_000)))  # well over the 64 KiB threshold
    threads: list[int] = []
    parse = _file_discovery.parse_endpoints

    def spy(data: bytes, fmt: str, where: str = "<endpoints>") -> tuple[poise.Endpoint, ...]:
        threads.append(threading.get_ident())
        return parse(data, fmt, where)

    monkeypatch.setattr(_file_discovery, "parse_endpoints", spy)
    loaded = await poise.FileDiscovery(path).load()
    assert len(loaded) == 2_000
    assert threads
    assert threads[0] != threading.get_ident()  # not on the event loop's thread


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "16MiB", None])
def test_an_invalid_max_bytes_raises_config_error(value: Any) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.FileDiscovery("pool.json", max_bytes=value)
    assert caught.value.knob == "max_bytes"
