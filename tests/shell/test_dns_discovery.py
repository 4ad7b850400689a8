"""DnsDiscovery: a new revision only when the answer changes; failures keep the last pool."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any

import attrs
import pytest
import trio

import poise_py as poise

pytestmark = pytest.mark.anyio


@attrs.define
class FakeResolver:
    """Answers from a script, one entry per lookup (the last one repeats); exceptions are raised."""

    script: list[object]
    calls: list[tuple[str, int]] = attrs.field(factory=list)

    async def __call__(self, host: str, port: int) -> Iterable[str]:
        self.calls.append((host, port))
        answer = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(answer, BaseException):
            raise answer
        assert isinstance(answer, list)
        return answer


@pytest.mark.backends("trio")
async def test_a_new_revision_is_published_only_when_the_answer_changes() -> None:
    resolver = FakeResolver(
        [
            ["10.0.0.2", "10.0.0.1"],
            ["10.0.0.1", "10.0.0.2"],  # reordered: the same answer
            socket.gaierror(socket.EAI_AGAIN, "temporary failure"),
            [],  # empty: treated as a failed lookup
            ["10.0.0.1", "10.0.0.1"],
        ]
    )
    source = poise.DnsDiscovery("svc.internal", 8080, interval=30, resolver=resolver)
    stream = aiter(source)
    first = await anext(stream)
    assert first == poise.Snapshot(
        1,
        [
            poise.Endpoint("10.0.0.1:8080", address=("10.0.0.1", 8080)),
            poise.Endpoint("10.0.0.2:8080", address=("10.0.0.2", 8080)),
        ],
    )
    second = await anext(stream)
    assert second == poise.Snapshot(2, [poise.Endpoint("10.0.0.1:8080", address=("10.0.0.1", 8080))])
    assert len(resolver.calls) == 5
    assert resolver.calls[0] == ("svc.internal", 8080)
    assert source.failures == 2
    assert source.error is None
    await stream.aclose()  # type: ignore[attr-defined]


@pytest.mark.backends("trio")
async def test_a_failing_lookup_keeps_the_balancer_on_its_last_pool(caplog: pytest.LogCaptureFixture) -> None:
    resolver = FakeResolver([["10.0.0.1"], OSError("network unreachable")])
    source = poise.DnsDiscovery("svc", 80, interval=5, resolver=resolver)
    async with poise.LoadBalancer(discovery=source) as lb:
        await lb.wait_ready(timeout=1)
        await trio.sleep(60)  # a dozen failed lookups
        assert [e.id for e in lb.snapshot().endpoints] == ["10.0.0.1:80"]
        assert lb.discovery_revision == 1
    assert source.failures >= 10
    assert isinstance(source.error, OSError)
    assert sum("DNS lookup" in r.getMessage() for r in caplog.records) == 1  # once per failing streak


@pytest.mark.backends("trio")
@pytest.mark.parametrize("answer", ["10.0.0.1", {"10.0.0.7": 1}, ["not-an-ip"], [10], ["10.0.0.1", ""]])
async def test_an_answer_that_is_not_a_list_of_ip_addresses_publishes_nothing(answer: object) -> None:
    async def resolver(host: str, port: int) -> object:
        return answer

    source = poise.DnsDiscovery("svc", 80, interval=5, resolver=resolver)  # type: ignore[arg-type]
    async with poise.LoadBalancer(discovery=source) as lb:
        await trio.sleep(12)  # three rounds
        assert lb.snapshot().endpoints == ()
        assert lb.discovery_revision is None
    assert source.failures >= 3
    assert isinstance(source.error, TypeError | ValueError)


async def test_an_ipv6_answer_gets_a_bracketed_id() -> None:
    source = poise.DnsDiscovery("svc", 443, resolver=FakeResolver([["::1"]]))
    stream = aiter(source)
    update = await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    assert update == poise.Snapshot(1, [poise.Endpoint("[::1]:443", address=("::1", 443))])


async def test_iterating_again_continues_the_revisions() -> None:
    source = poise.DnsDiscovery("svc", 80, resolver=FakeResolver([["10.0.0.1"]]))
    revisions = []
    for _ in range(2):
        stream = aiter(source)
        revisions.append((await anext(stream)).revision)
        await stream.aclose()  # type: ignore[attr-defined]
    assert revisions == [1, 2]


async def test_a_real_lookup_of_localhost_finds_the_loopback_address() -> None:
    source = poise.DnsDiscovery("localhost", 8080)
    stream = aiter(source)
    update = await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    assert isinstance(update, poise.Snapshot)
    addresses = {e.address for e in update.endpoints}
    assert addresses
    assert addresses <= {("127.0.0.1", 8080), ("::1", 8080)}


async def test_a_balancer_serves_the_endpoints_dns_found() -> None:
    resolver = FakeResolver([["10.0.0.1", "10.0.0.2"]])
    async with poise.LoadBalancer(discovery=poise.DnsDiscovery("svc", 80, resolver=resolver)) as lb:
        await lb.wait_ready(timeout=1)
        async with lb.acquire() as permit:
            assert permit.endpoint.address in {("10.0.0.1", 80), ("10.0.0.2", 80)}


@pytest.mark.parametrize(
    ("kwargs", "knob"),
    [
        ({"host": ""}, "host"),
        ({"port": 70000}, "port"),
        ({"port": True}, "port"),
        ({"interval": 0}, "interval"),
        ({"family": 12345}, "family"),
        ({"resolver": "8.8.8.8"}, "resolver"),
    ],
)
def test_invalid_dns_knobs_raise_config_error(kwargs: dict[str, Any], knob: str) -> None:
    args: dict[str, Any] = {"host": "svc", "port": 80, **kwargs}
    with pytest.raises(poise.ConfigError) as caught:
        poise.DnsDiscovery(**args)
    assert caught.value.knob == knob


@pytest.mark.parametrize(
    "host",
    ["\u00e9" * 70 + ".example", "a" * 64 + ".example", "a..b", "svc internal", "x." * 130 + "com", "\x00svc"],
    ids=["non-ascii-over-long-label", "over-long-label", "empty-label", "space", "over-long-name", "control"],
)
def test_a_name_that_cannot_be_resolved_is_a_config_error_at_construction(host: str) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.DnsDiscovery(host, 80)
    assert caught.value.knob == "host"


@pytest.mark.parametrize(
    "host", ["svc.internal", "b\u00fccher.example", "example.com.", "::1", "127.0.0.1", "localhost"]
)
def test_valid_names_and_ip_literals_are_accepted(host: str) -> None:
    assert poise.DnsDiscovery(host, 80).host == host


@pytest.mark.backends("trio")
async def test_any_resolver_error_is_a_counted_failed_round_and_resolution_goes_on() -> None:
    resolver = FakeResolver(
        [
            ["10.0.0.1"],
            UnicodeError("encoding with 'idna' codec failed (UnicodeError: label too long)"),
            ValueError("a broken resolver"),
            [None],  # an answer that is not an address
            ["10.0.0.2"],
        ]
    )
    source = poise.DnsDiscovery("svc.internal", 80, interval=5, resolver=resolver)
    lb = poise.LoadBalancer(source, on_discovery_end=poise.DiscoveryEnd.FAIL_CLOSED)
    async with lb:
        for _ in range(100):
            if lb.discovery_revision == 2:
                break
            await trio.sleep(1)
            if lb.discovery_revision == 1 and source.failures:
                assert {e.id for e in lb.snapshot().endpoints} == {"10.0.0.1:80"}  # the last pool is kept
        assert {e.id for e in lb.snapshot().endpoints} == {"10.0.0.2:80"}
    assert source.failures == 3
    assert source.error is None
