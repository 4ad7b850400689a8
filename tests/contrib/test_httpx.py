"""PoiseTransport: a real httpx.AsyncClient against real HTTP servers on 127.0.0.1.

Real sockets, so these run on Trio and asyncio with the real clock (an autojumping mock
clock would fire httpx's timeouts while a socket waits); the timeout test runs on Trio
with a MockClock the test moves by hand. Nothing sleeps for real.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
import trio
import trio.testing

import poise_py as poise
from poise_py import CircuitState, Fault
from poise_py.contrib.httpx import PoiseTransport, balanced_client, endpoint_url
from tests.support.http_server import FaultServer, fault_servers

pytestmark = [pytest.mark.anyio, pytest.mark.real_clock]  # these tests wait on real sockets

BASE = "http://api.internal"


def balancer(servers: list[FaultServer], **kwargs: Any) -> poise.LoadBalancer:
    eps = [poise.Endpoint(s.name, address=s.address) for s in servers]
    kwargs.setdefault("policy", poise.RoundRobin())
    return poise.LoadBalancer(poise.StaticDiscovery(eps), **kwargs)


def counters(lb: poise.LoadBalancer, endpoint_id: str) -> poise.EndpointCounters:
    return lb.statistics().endpoints[endpoint_id]


async def test_requests_are_balanced_over_three_servers_with_path_and_host_kept() -> None:
    async with fault_servers("a", "b", "c") as servers:
        lb = balancer(servers)
        async with lb, balanced_client(lb, BASE) as client:
            bodies = [(await client.get(f"/v1/items/{i}", params={"q": "x"})).text for i in range(9)]
            assert sorted(bodies) == sorted(["a:200", "b:200", "c:200"] * 3)
            for server in servers:
                assert server.hits == 3
                request = server.requests[0]
                assert request.target.startswith(b"/v1/items/")
                assert request.target.endswith(b"?q=x")
                assert dict(request.headers)[b"host"] == b"api.internal"
                assert counters(lb, server.name).successes == 3


async def test_a_500_is_a_strike_and_reaches_the_caller() -> None:
    async with fault_servers("a", "b") as servers:
        servers[1].fault = "500"
        lb = balancer(servers)
        async with lb, balanced_client(lb, BASE) as client:
            statuses = sorted([(await client.get("/")).status_code for _ in range(2)])
            assert statuses == [200, 500]
            assert counters(lb, "b").faults[Fault.SUSPECT] == 1
            assert counters(lb, "a").successes == 1


async def test_a_429_with_retry_after_opens_the_circuit_for_at_least_that_long() -> None:
    async with fault_servers("a", "b") as servers:
        servers[0].fault = "429:120"
        lb = balancer(servers)
        async with lb, balanced_client(lb, BASE) as client:
            responses = [await client.get("/") for _ in range(2)]
            assert sorted(r.status_code for r in responses) == [200, 429]
            snap = lb.snapshot()["a"]
            assert snap.counters.faults[Fault.TRANSIENT] == 1
            assert snap.state is CircuitState.OPEN
            assert snap.reopen_at is not None
            assert snap.reopen_at >= lb.snapshot().taken_at + 119.0
            for _ in range(4):  # every request now goes to b
                assert (await client.get("/")).text == "b:200"


async def test_a_401_blocks_the_endpoint_without_probing() -> None:
    async with fault_servers("a", "b") as servers:
        servers[0].fault = "401"
        lb = balancer(servers)
        async with lb, balanced_client(lb, BASE) as client:
            for _ in range(6):
                await client.get("/")
            snap = lb.snapshot()["a"]
            assert snap.state is CircuitState.BLOCKED
            assert snap.counters.faults[Fault.PERMANENT] == 1
            assert snap.counters.probes == 0
            assert servers[0].hits == 1


async def test_a_connection_reset_raises_to_the_caller_and_is_a_strike() -> None:
    async with fault_servers("a") as servers:
        servers[0].fault = "reset"
        lb = balancer(servers)
        async with lb, balanced_client(lb, BASE) as client:
            with pytest.raises(httpx.TransportError):
                await client.get("/")
            c = counters(lb, "a")
            assert c.faults[Fault.SUSPECT] == 1
            assert c.successes == 0


async def test_a_reset_in_the_middle_of_the_body_counts_against_the_endpoint() -> None:
    async with fault_servers("a") as servers:
        servers[0].fault = "reset-body"
        lb = balancer(servers)
        async with lb, balanced_client(lb, BASE) as client:
            with pytest.raises(httpx.TransportError):
                await client.get("/")
            c = counters(lb, "a")
            assert c.faults[Fault.SUSPECT] == 1
            assert c.successes == 0
            assert lb.snapshot()["a"].inflight == 0


async def test_a_streamed_body_holds_its_permit_until_it_is_read() -> None:
    async with fault_servers("a") as servers:
        lb = balancer(servers)
        async with lb, balanced_client(lb, BASE) as client:
            async with client.stream("GET", "/") as response:
                assert response.status_code == 200
                assert lb.snapshot()["a"].inflight == 1
                assert counters(lb, "a").successes == 0
                assert await response.aread() == b"a:200"
            assert lb.snapshot()["a"].inflight == 0
            assert counters(lb, "a").successes == 1


async def test_a_caller_giving_up_on_a_slow_response_is_a_cancellation_not_a_fault() -> None:
    async with fault_servers("a") as servers:
        servers[0].fault = "slow"
        lb = balancer(servers)
        async with lb, balanced_client(lb, BASE) as client:
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    await client.get("/")

                tg.start_soon(call)
                await servers[0].arrived.wait()
                tg.cancel_scope.cancel()
            c = counters(lb, "a")
            assert c.cancellations == 1
            assert sum(c.faults.values()) == 0
            assert lb.snapshot()["a"].state is CircuitState.CLOSED
            servers[0].release.set()


@pytest.mark.backends("trio")
@pytest.mark.manual_clock
async def test_a_response_slower_than_the_timeout_is_a_strike() -> None:
    clock = trio.lowlevel.current_clock()
    assert isinstance(clock, trio.testing.MockClock)
    async with fault_servers("a") as servers:
        servers[0].fault = "slow"
        lb = balancer(servers)
        transport = PoiseTransport(lb, host="api.internal")
        async with lb, httpx.AsyncClient(transport=transport, base_url=BASE, timeout=5.0) as client:
            failure: list[BaseException] = []
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    try:
                        await client.get("/")
                    except httpx.ReadTimeout as exc:
                        failure.append(exc)

                tg.start_soon(call)
                await servers[0].arrived.wait()
                await trio.testing.wait_all_tasks_blocked()
                clock.jump(5.5)
            assert len(failure) == 1
            assert counters(lb, "a").faults[Fault.SUSPECT] == 1
            servers[0].release.set()


async def test_idempotent_requests_are_retried_on_another_endpoint() -> None:
    async with fault_servers("a", "b", "c") as servers:
        servers[0].fault = "reset"
        servers[1].fault = "503"
        lb = balancer(servers)
        transport = PoiseTransport(lb, host="api.internal", attempts=3)
        async with lb, httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            for _ in range(3):  # whichever endpoint round-robin starts on, c answers
                response = await client.get("/")
                assert response.text == "c:200"
            a, b, c = (s.hits for s in servers)
            assert c == 3
            assert a + b >= 2  # two of the three requests started on a broken endpoint
            assert counters(lb, "a").faults[Fault.SUSPECT] == a
            assert counters(lb, "b").faults[Fault.SUSPECT] == b


async def test_retries_stop_once_every_endpoint_was_tried_without_asking_the_budget() -> None:
    async with fault_servers("a", "b") as servers:
        servers[0].fault = "503"
        servers[1].fault = "503"
        lb = balancer(servers, retry_budget=poise.RetryBudget(percent=0.0, min_per_second=1.0))
        transport = PoiseTransport(lb, host="api.internal", attempts=5)
        async with lb, httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            response = await client.get("/")
            assert response.status_code == 503
            assert [s.hits for s in servers] == [1, 1]  # both tried once, then nowhere else to go
            assert lb.retries_denied == 0  # the third attempt never asked the budget


async def test_a_post_is_sent_once_even_with_attempts() -> None:
    async with fault_servers("a", "b") as servers:
        servers[0].fault = "503"
        servers[1].fault = "503"
        lb = balancer(servers)
        transport = PoiseTransport(lb, host="api.internal", attempts=3)
        async with lb, httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            response = await client.post("/", content=b"once")
            assert response.status_code == 503
            assert sum(s.hits for s in servers) == 1


async def test_no_eligible_endpoint_raises_the_typed_selection_error() -> None:
    async with fault_servers("a") as servers:
        servers[0].fault = "401"
        lb = balancer(servers)
        async with lb, balanced_client(lb, BASE) as client:
            await client.get("/")
            with pytest.raises(poise.NoEligibleEndpoints):
                await client.get("/")


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        (("10.0.0.7", 8080), "http://10.0.0.7:8080/p?q=1"),
        ("10.0.0.7:8080", "http://10.0.0.7:8080/p?q=1"),
        ("backend", "http://backend/p?q=1"),
        ("[::1]:9000", "http://[::1]:9000/p?q=1"),
        ("https://10.0.0.8:8443", "https://10.0.0.8:8443/p?q=1"),
    ],
)
def test_endpoint_url_points_the_url_at_the_address(address: object, expected: str) -> None:
    url = endpoint_url(httpx.URL("http://api.internal/p?q=1"), poise.Endpoint("e", address=address))
    assert str(url) == expected


def test_an_endpoint_without_an_address_is_a_config_error() -> None:
    with pytest.raises(poise.ConfigError):
        endpoint_url(httpx.URL("http://api/"), poise.Endpoint("e"))


def test_bad_transport_knobs_raise_config_error() -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))
    with pytest.raises(poise.ConfigError):
        PoiseTransport(lb, host="api", attempts=0)
    with pytest.raises(poise.ConfigError):
        PoiseTransport("lb", host="api")  # type: ignore[arg-type]
    with pytest.raises(poise.ConfigError):
        PoiseTransport(lb, host="api", gateway="suspect")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "knob"),
    [
        ({"transport": 0}, "transport"),
        ({"transport": httpx.HTTPTransport()}, "transport"),  # a sync transport
        ({"classifier": "x"}, "classifier"),
        ({"classifier": "http"}, "classifier"),
    ],
)
def test_a_transport_or_classifier_that_cannot_work_is_refused_at_construction(
    kwargs: dict[str, Any], knob: str
) -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))
    with pytest.raises(poise.ConfigError) as caught:
        PoiseTransport(lb, host="api", **kwargs)
    assert caught.value.knob == knob
    if kwargs.get("classifier") == "http":
        assert str(caught.value).endswith("write classifier=poise.classify.http()")


async def test_an_https_request_is_not_sent_in_cleartext_to_an_http_address_and_the_endpoint_is_ejected() -> None:
    async with fault_servers("a") as servers:
        host, port = servers[0].address
        lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a", address=f"http://{host}:{port}")]))
        async with lb, balanced_client(lb, "https://api.internal") as client:
            with pytest.raises(poise.ConfigError, match="cleartext") as caught:
                await client.get("/secret", headers={"Authorization": "Bearer t0ken"})
            assert caught.value.knob == "Endpoint.address"
            assert servers[0].hits == 0  # nothing went out
            assert lb.snapshot()["a"].state is not CircuitState.CLOSED  # FATAL: ejected
            assert counters(lb, "a").faults[Fault.FATAL] == 1


async def test_an_endpoint_whose_metadata_allows_it_takes_an_https_request_over_http() -> None:
    async with fault_servers("a") as servers:
        host, port = servers[0].address
        endpoint = poise.Endpoint("a", address=f"http://{host}:{port}", metadata={"allow_http_downgrade": True})
        lb = poise.LoadBalancer(poise.StaticDiscovery([endpoint]))
        async with lb, balanced_client(lb, "https://api.internal") as client:
            assert (await client.get("/")).text == "a:200"


async def test_an_endpoint_with_an_unusable_address_is_ejected_instead_of_failing_every_request() -> None:
    async with fault_servers("good") as servers:
        eps = [poise.Endpoint("good", address=servers[0].address), poise.Endpoint("broken", address=("", 0))]
        lb = poise.LoadBalancer(poise.StaticDiscovery(eps), policy=poise.RoundRobin())
        failures, knob = 0, ""
        async with lb, balanced_client(lb, BASE) as client:
            for _ in range(20):
                try:
                    await client.get("/")
                except poise.ConfigError as exc:
                    failures += 1
                    knob = exc.knob
            assert knob == "Endpoint.address"
            assert failures == 1  # the first request sent there; then it is out of rotation
            assert servers[0].hits == 19
            assert counters(lb, "broken").faults[Fault.FATAL] == 1


async def test_an_unusable_address_error_carries_the_requests_attempts() -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a", address="h:0")]))
    async with lb, balanced_client(lb, BASE, transport=httpx.MockTransport(lambda r: httpx.Response(200))) as client:
        with pytest.raises(poise.ConfigError) as caught:
            await client.get("/")
    attempts = caught.value.poise_attempts  # type: ignore[attr-defined]
    assert [(a.endpoint_id, a.fault) for a in attempts] == [("a", Fault.FATAL)]


async def test_an_unusable_endpoint_is_retried_elsewhere_when_attempts_allow() -> None:
    async with fault_servers("good") as servers:
        eps = [poise.Endpoint("broken", address=object()), poise.Endpoint("good", address=servers[0].address)]
        lb = poise.LoadBalancer(poise.StaticDiscovery(eps), policy=poise.RoundRobin(), seed=1)
        async with lb, balanced_client(lb, BASE, attempts=2) as client:
            for _ in range(4):
                assert (await client.get("/")).text == "good:200"


async def test_an_absolute_url_to_another_host_is_refused_not_sent_to_the_pool() -> None:
    async with fault_servers("a") as servers:
        lb = balancer(servers)
        async with lb, balanced_client(lb, BASE) as client:
            await client.get("/")
            with pytest.raises(poise.ConfigError, match="mounts=") as caught:
                await client.get("http://elsewhere.example/steal")
            assert caught.value.knob == "host"
            assert servers[0].hits == 1


async def test_a_first_request_for_another_host_is_refused_and_does_not_pin_the_transport() -> None:
    async with fault_servers("a") as servers:
        lb = balancer(servers)
        async with lb, balanced_client(lb, BASE) as client:
            with pytest.raises(poise.ConfigError) as caught:
                await client.get("http://attacker.example/", headers={"Authorization": "Bearer t0ken"})
            assert caught.value.knob == "host"
            assert servers[0].hits == 0  # nothing went to the pool
            assert (await client.get("/items/42")).text == "a:200"  # the base_url host still works
            assert dict(servers[0].requests[0].headers)[b"host"] == b"api.internal"


def test_a_transport_without_a_host_is_refused_at_construction() -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))
    with pytest.raises(TypeError, match="host"):
        PoiseTransport(lb)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "host", ["", "http://api.internal", "api.internal:8080", "api.internal/v1", "user@api.internal", "a b", None, 3]
)
def test_a_host_that_is_not_a_bare_host_name_is_a_config_error(host: object) -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))
    with pytest.raises(poise.ConfigError) as caught:
        PoiseTransport(lb, host=host)  # type: ignore[arg-type]
    assert caught.value.knob == "host"


@pytest.mark.parametrize("base_url", ["", "/v1", "ftp://api.internal", "http://", 7])
def test_balanced_client_refuses_a_base_url_without_an_http_host(base_url: object) -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))
    with pytest.raises(poise.ConfigError) as caught:
        balanced_client(lb, base_url)  # type: ignore[arg-type]
    assert caught.value.knob == "base_url"


async def test_balanced_client_serves_its_base_url_host_with_the_client_options_and_the_transport_knobs() -> None:
    async with fault_servers("a", "b") as servers:
        servers[0].fault = "503"
        lb = balancer(servers)
        client = balanced_client(lb, "http://API.Internal:8443/v1/", attempts=2, headers={"x-team": "blue"})
        async with lb, client:
            for _ in range(2):  # attempts=2: whichever endpoint comes first, b answers
                assert (await client.get("items")).text == "b:200"
            request = servers[1].requests[0]
            assert request.target == b"/v1/items"
            assert dict(request.headers)[b"x-team"] == b"blue"
            with pytest.raises(poise.ConfigError):
                await client.get("http://other.internal/v1/items")


async def test_an_ipv6_host_is_matched_with_or_without_brackets() -> None:
    async with fault_servers("a") as servers:
        lb = balancer(servers)
        async with lb, httpx.AsyncClient(transport=PoiseTransport(lb, host="::1")) as client:
            assert (await client.get("http://[::1]:9/x")).text == "a:200"
        lb = balancer(servers)
        async with lb, balanced_client(lb, "http://[::1]") as client:
            assert (await client.get("/x")).text == "a:200"


async def test_an_explicit_host_is_enforced_from_the_first_request_and_mounts_route_by_host() -> None:
    async with fault_servers("a") as servers:
        lb = balancer(servers)
        transport = PoiseTransport(lb, host="api.internal")
        async with lb, httpx.AsyncClient(mounts={"http://api.internal": transport}) as client:
            assert (await client.get("http://api.internal/x")).text == "a:200"
            with pytest.raises(poise.ConfigError):
                await transport.handle_async_request(httpx.Request("GET", "http://other.internal/"))
            assert servers[0].hits == 1


@pytest.mark.parametrize(
    "address",
    [
        "ftp://10.0.0.1/",
        ("h", 0),
        ("h", 70000),
        ("h", True),
        ":80",
        "http://",
        "a b",
        ("", 80),
        "http://127.0.0.1:0",
        "http://127.0.0.1:70000",
    ],
)
def test_unusable_addresses_are_a_config_error(address: object) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        endpoint_url(httpx.URL("http://api/"), poise.Endpoint("e", address=address))
    assert caught.value.knob == "Endpoint.address"


async def test_when_no_other_endpoint_is_eligible_the_retry_ends_with_the_real_answer() -> None:
    # a answers 503 (a retry is asked for); b is disabled, so the retry finds nowhere to go:
    # the caller gets the 503, as lb.call gives the real error, never NoEligibleEndpoints.
    async with fault_servers("a", "b") as servers:
        servers[0].fault = "503"
        lb = balancer(servers)
        transport = PoiseTransport(lb, host="api.internal", attempts=3)
        async with lb, httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            lb.set_status("b", poise.AdminStatus.DISABLED)
            response = await client.get("/")
            assert response.status_code == 503
            assert [s.hits for s in servers] == [1, 0]
            servers[0].fault = "reset"  # a transport error: the error itself is the answer
            with pytest.raises(httpx.TransportError):
                await client.get("/")


def test_a_base_url_whose_host_the_transport_cannot_serve_names_base_url() -> None:
    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint("a")]))
    with pytest.raises(poise.ConfigError) as caught:
        balanced_client(lb, "http://a b")
    assert caught.value.knob == "base_url"
