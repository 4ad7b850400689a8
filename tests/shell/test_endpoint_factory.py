"""The endpoint factory: per-endpoint resources, transactional failure, and their release."""

from __future__ import annotations

from typing import Any

import anyio
import attrs
import pytest

import poise_py as poise
from tests.support.clocks import endpoints
from tests.support.discovery import Tap, live_ids

pytestmark = pytest.mark.anyio


@attrs.define(eq=False)
class Conn:
    """A stand-in for a connection pool built per endpoint."""

    endpoint: poise.Endpoint
    closed: bool = False


@attrs.define
class Factory:
    """Builds a Conn per endpoint (sync or async), failing for the ids in ``fail``."""

    asynchronous: bool = False
    fail: set[str] = attrs.field(factory=set)
    built: list[Conn] = attrs.field(factory=list)
    closed: list[Conn] = attrs.field(factory=list)

    def build(self, endpoint: poise.Endpoint) -> Any:
        if self.asynchronous:
            return self._build_async(endpoint)
        return self._build(endpoint)

    async def _build_async(self, endpoint: poise.Endpoint) -> Conn:
        await anyio.lowlevel.checkpoint()
        return self._build(endpoint)

    def _build(self, endpoint: poise.Endpoint) -> Conn:
        if endpoint.id in self.fail:
            raise OSError(f"cannot connect to {endpoint.id}")
        conn = Conn(endpoint)
        self.built.append(conn)
        return conn

    def close(self, conn: Conn) -> Any:
        async def aclose() -> None:
            await anyio.lowlevel.checkpoint()
            self._close(conn)

        if self.asynchronous:
            return aclose()
        self._close(conn)
        return None

    def _close(self, conn: Conn) -> None:
        assert not conn.closed, "closed twice"
        conn.closed = True
        self.closed.append(conn)


@pytest.fixture(params=[False, True], ids=["sync", "async"])
def factory(request: pytest.FixtureRequest) -> Factory:
    return Factory(asynchronous=request.param)


def channel() -> tuple[anyio.abc.ObjectSendStream[poise.Update], anyio.abc.ObjectReceiveStream[poise.Update]]:
    return anyio.create_memory_object_stream[poise.Update](16)


def balancer(factory: Factory, discovery: Any, **kwargs: Any) -> poise.LoadBalancer:
    return poise.LoadBalancer(
        discovery=discovery, endpoint_factory=factory.build, endpoint_close=factory.close, **kwargs
    )


async def test_the_permit_carries_what_the_factory_built_for_its_endpoint(factory: Factory) -> None:
    async with balancer(factory, poise.StaticDiscovery(endpoints("a", "b"))) as lb:
        for _ in range(4):
            async with lb.acquire() as permit:
                assert isinstance(permit.resource, Conn)
                assert permit.resource.endpoint is permit.endpoint
    assert len(factory.built) == 2


async def test_without_a_factory_the_permit_resource_is_none() -> None:
    lb = poise.LoadBalancer(discovery=poise.StaticDiscovery(endpoints("a")))
    async with lb, lb.acquire() as permit:
        assert permit.resource is None


async def test_a_static_list_whose_factory_fails_raises_from_async_with_and_releases_what_it_built(
    factory: Factory,
) -> None:
    factory.fail = {"c"}
    lb = balancer(factory, poise.StaticDiscovery(endpoints("a", "b", "c")))
    with pytest.raises(poise.EndpointFactoryError) as caught:
        async with lb:
            pytest.fail("the balancer must not start")
    assert caught.value.endpoint_id == "c"
    assert isinstance(caught.value.__cause__, OSError)
    assert isinstance(caught.value, poise.DiscoveryError)
    assert [c.endpoint.id for c in factory.closed] == ["a", "b"]
    assert lb.discovery_revision is None


async def test_a_factory_failure_leaves_the_previous_pool_live_and_the_stream_goes_on(
    factory: Factory,
) -> None:
    send, receive = channel()
    tap = Tap(receive)
    async with send, receive, balancer(factory, tap) as lb:
        await send.send(poise.Snapshot(1, endpoints("a", "b")))
        await tap.wait(1)
        before = list(factory.built)
        factory.fail = {"d"}
        await send.send(poise.Snapshot(2, endpoints("a", "c", "d")))  # c is built, then d fails
        await tap.wait(2)
        assert live_ids(lb) == {"a", "b"}
        assert lb.discovery_revision == 1
        assert lb.discovery_rejected == 1
        await anyio.wait_all_tasks_blocked()
        assert [c.endpoint.id for c in factory.closed] == ["c"]
        for _ in range(4):
            async with lb.acquire() as permit:
                assert permit.resource in before
        factory.fail = set()
        await send.send(poise.Snapshot(3, endpoints("a", "c", "d")))
        await tap.wait(3)
        assert live_ids(lb) == {"a", "c", "d"}
        await anyio.wait_all_tasks_blocked()
        assert [c.endpoint.id for c in factory.closed] == ["c", "b"]


async def test_a_removed_endpoint_resource_is_closed_after_its_last_permit(factory: Factory) -> None:
    send, receive = channel()
    tap = Tap(receive)
    async with send, receive, balancer(factory, tap) as lb:
        await send.send(poise.Snapshot(1, endpoints("a", "b")))
        await tap.wait(1)
        first = lb.acquire(exclude=("b",))
        second = lb.acquire(exclude=("b",))
        conn = first.resource
        await send.send(poise.Delta(2, removed=["a"]))
        await tap.wait(2)
        await anyio.wait_all_tasks_blocked()
        assert not conn.closed  # two permits still use it
        async with first:
            pass
        second.cancel()
        await anyio.wait_all_tasks_blocked()
        assert conn.closed
        assert factory.closed == [conn]


async def test_an_endpoint_removed_while_idle_has_its_resource_closed_at_once(factory: Factory) -> None:
    send, receive = channel()
    tap = Tap(receive)
    async with send, receive, balancer(factory, tap):
        await send.send(poise.Snapshot(1, endpoints("a", "b")))
        await send.send(poise.Snapshot(2, endpoints("b")))
        await tap.wait(2)
        await anyio.wait_all_tasks_blocked()
        assert [c.endpoint.id for c in factory.closed] == ["a"]


async def test_every_resource_is_closed_when_the_balancer_stops_and_rebuilt_when_it_restarts(
    factory: Factory,
) -> None:
    lb = balancer(factory, poise.StaticDiscovery(endpoints("a", "b")))
    async with lb:
        pass
    assert sorted(c.endpoint.id for c in factory.closed) == ["a", "b"]
    async with lb, lb.acquire() as permit:
        assert not permit.resource.closed
    assert len(factory.built) == 4
    assert len(factory.closed) == 4


async def test_an_updated_endpoint_keeps_its_resource(factory: Factory) -> None:
    send, receive = channel()
    tap = Tap(receive)
    async with send, receive, balancer(factory, tap) as lb:
        await send.send(poise.Snapshot(1, endpoints("a")))
        await send.send(poise.Delta(2, updated=[poise.Endpoint("a", weight=7)]))
        await tap.wait(2)
        async with lb.acquire() as permit:
            assert permit.endpoint.weight == 7
            assert permit.resource is factory.built[0]
        assert len(factory.built) == 1


async def test_a_raising_close_is_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    def close(conn: object) -> None:
        raise RuntimeError("close failed")

    lb = poise.LoadBalancer(
        discovery=poise.StaticDiscovery(endpoints("a")), endpoint_factory=Conn, endpoint_close=close
    )
    async with lb:
        pass
    assert "endpoint_close raised" in caplog.text


@pytest.mark.parametrize(
    ("knob", "value"),
    [("endpoint_factory", 3), ("endpoint_close", "x"), ("readiness", 1.0)],
)
def test_invalid_factory_knobs_raise_config_error(knob: str, value: object) -> None:
    kwargs: dict[str, Any] = {knob: value}
    with pytest.raises(poise.ConfigError) as caught:
        poise.LoadBalancer(discovery=poise.StaticDiscovery([]), **kwargs)
    assert caught.value.knob == knob


async def test_after_a_rejected_delta_a_subscription_catches_up_with_a_full_snapshot(factory: Factory) -> None:
    pub = poise.DiscoveryPublisher()
    async with balancer(factory, pub.subscribe()) as lb:
        pub.publish(poise.Snapshot(1, endpoints("a")))
        await anyio.wait_all_tasks_blocked()
        factory.fail = {"b"}
        pub.publish(poise.Delta(2, added=endpoints("b")))
        await anyio.wait_all_tasks_blocked()
        assert lb.discovery_rejected == 1
        assert lb.discovery_revision == 1
        factory.fail = set()
        pub.publish(poise.Delta(3, added=endpoints("c")))  # on top of revision 2, which we missed
        await anyio.wait_all_tasks_blocked()
        assert live_ids(lb) == {"a", "b", "c"}
        assert lb.discovery_revision == 3


async def test_a_first_update_whose_factory_fails_says_nothing_was_applied_and_ends_with_the_cause() -> None:
    factory = Factory(fail={"b"})
    lb = balancer(factory, poise.StaticDiscovery(endpoints("a", "b")))
    with pytest.raises(poise.EndpointFactoryError) as caught:
        async with lb:
            pytest.fail("the balancer must not start")
    assert str(caught.value) == (
        "the endpoint factory failed for 'b'; nothing was applied (no pool was live yet): OSError: cannot connect to b"
    )


async def test_a_later_update_whose_factory_fails_says_the_previous_pool_stays_and_shows_the_cause_safely() -> None:
    def build(endpoint: poise.Endpoint) -> Conn:
        if endpoint.id == "b":  # it fails with a secret and a long second line in its message
            raise OSError(f"cannot reach https://svc:hunter2@10.0.0.9/\n{'x' * 5_000}")
        return Conn(endpoint)

    rejected: list[poise.DiscoveryRejected] = []

    def observe(event: poise.BalancerEvent) -> None:
        if isinstance(event, poise.DiscoveryRejected):
            rejected.append(event)

    send, receive = channel()
    tap = Tap(receive)
    async with send, receive, poise.LoadBalancer(tap, endpoint_factory=build) as lb:
        lb.add_observer(observe)
        await send.send(poise.Snapshot(1, endpoints("a")))
        await tap.wait(1)
        await send.send(poise.Snapshot(2, endpoints("a", "b")))
        await tap.wait(2)
        assert live_ids(lb) == {"a"}
    (event,) = rejected
    text = str(event.error)
    assert text.startswith("the endpoint factory failed for 'b'; the previous pool stays live: OSError: cannot reach")
    assert "hunter2" not in text
    assert "\n" not in text
    assert len(text) < 700
