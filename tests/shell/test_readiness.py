"""Readiness: a failing endpoint is quarantined alone; exhausting the pool names the endpoint."""

from __future__ import annotations

from typing import Any

import anyio
import attrs
import pytest
import trio
import trio.testing

import poise_py as poise
from tests.support.clocks import endpoints

pytestmark = [pytest.mark.anyio, pytest.mark.backends("trio")]  # cool-downs and readiness timeouts pass in virtual time


@attrs.frozen
class Gate:
    """A scripted ``ready()`` outcome: wait for ``event``, then behave as ``then``."""

    event: trio.Event
    then: object = True


@attrs.define(eq=False)
class Backend:
    """A resource whose ``ready()`` follows a script: True passes; False, an exception or "hang" fail."""

    endpoint: poise.Endpoint
    script: list[object]
    calls: int = 0

    async def ready(self) -> object:
        self.calls += 1
        outcome = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(outcome, Gate):
            await outcome.event.wait()
            outcome = outcome.then
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome == "hang":
            await trio.sleep_forever()
        return outcome


def scripted(**scripts: list[object]) -> dict[str, Any]:
    """Balancer kwargs: a factory whose resources follow ``scripts[endpoint.id]`` (default: ready)."""
    built: dict[str, Backend] = {}

    def build(endpoint: poise.Endpoint) -> Backend:
        built[endpoint.id] = Backend(endpoint, list(scripts.get(endpoint.id, [True])))
        return built[endpoint.id]

    return {"endpoint_factory": build, "readiness": poise.Readiness(timeout=2.0, cooldown=10.0)}


async def test_an_endpoint_with_ready_joins_only_once_ready_passes() -> None:
    gate = trio.Event()
    lb = poise.LoadBalancer(discovery=poise.StaticDiscovery(endpoints("a")), **scripted(a=[Gate(gate)]))
    async with lb:
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(poise.NoEligibleEndpoints) as caught:
            lb.acquire()
        assert caught.value.reasons[poise.IneligibleReason.NOT_READY] == 1
        assert lb.snapshot()["a"].eligible_reason is poise.IneligibleReason.NOT_READY
        gate.set()
        await lb.wait_ready(timeout=1)
        async with lb.acquire() as permit:
            assert permit.endpoint.id == "a"


async def test_a_readiness_failure_quarantines_that_endpoint_and_the_others_serve() -> None:
    lb = poise.LoadBalancer(
        discovery=poise.StaticDiscovery(endpoints("a", "b", "c")), **scripted(b=[OSError("refused")])
    )
    async with lb:
        await lb.wait_ready(timeout=1)
        await trio.testing.wait_all_tasks_blocked()
        view = lb.snapshot()
        assert view["b"].eligible_reason is poise.IneligibleReason.QUARANTINED
        assert view["a"].eligible_reason is None
        picked = set()
        for _ in range(20):
            async with lb.acquire() as permit:
                picked.add(permit.endpoint.id)
        assert picked == {"a", "c"}


async def test_a_quarantined_endpoint_is_checked_again_after_the_cooldown() -> None:
    lb = poise.LoadBalancer(
        discovery=poise.StaticDiscovery(endpoints("a", "b")), **scripted(b=[OSError("refused"), True])
    )
    async with lb:
        await trio.testing.wait_all_tasks_blocked()
        assert lb.snapshot()["b"].eligible_reason is poise.IneligibleReason.QUARANTINED
        await trio.sleep(9.9)
        assert lb.snapshot()["b"].eligible_reason is poise.IneligibleReason.QUARANTINED
        await trio.sleep(0.2)
        assert lb.snapshot()["b"].eligible_reason is None


@pytest.mark.parametrize("failure", [False, "hang", ValueError("bad handshake")])
async def test_false_a_timeout_or_an_exception_each_count_as_a_readiness_failure(failure: object) -> None:
    lb = poise.LoadBalancer(discovery=poise.StaticDiscovery(endpoints("a", "b")), **scripted(b=[failure]))
    async with lb:
        await trio.sleep(2.5)  # past the readiness timeout, inside the cool-down
        assert lb.snapshot()["b"].eligible_reason is poise.IneligibleReason.QUARANTINED
        assert lb.snapshot()["a"].eligible_reason is None


async def test_a_failure_that_exhausts_the_pool_raises_readiness_error_with_index_and_id() -> None:
    late = trio.Event()
    lb = poise.LoadBalancer(
        discovery=poise.StaticDiscovery(endpoints("a", "b", "c")),
        **scripted(a=[OSError("down")], b=[OSError("down")], c=[Gate(late, OSError("down"))]),
    )
    async with lb:
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(poise.NoEligibleEndpoints) as pending:  # c is still pending: not exhausted
            lb.acquire()
        assert not isinstance(pending.value, poise.ReadinessError)
        late.set()
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(poise.ReadinessError) as caught:
            lb.acquire()
        assert (caught.value.index, caught.value.endpoint_id) == (2, "c")
        cause = caught.value.__cause__
        assert isinstance(cause, poise.NoEligibleEndpoints)
        assert cause.reasons[poise.IneligibleReason.QUARANTINED] == 3
        with pytest.raises(poise.ReadinessError):
            await lb.wait_ready(timeout=1)


async def test_wait_ready_raises_readiness_error_when_every_endpoint_fails() -> None:
    lb = poise.LoadBalancer(
        discovery=poise.StaticDiscovery(endpoints("a", "b")),
        **scripted(a=[OSError("down")], b=[OSError("down")]),
    )
    async with lb:
        with pytest.raises(poise.ReadinessError) as caught:
            await lb.wait_ready(timeout=60)
        assert caught.value.endpoint_id in {"a", "b"}
        assert caught.value.index == ["a", "b"].index(caught.value.endpoint_id)


async def test_a_pool_exhausted_by_readiness_recovers_when_an_endpoint_passes() -> None:
    lb = poise.LoadBalancer(discovery=poise.StaticDiscovery(endpoints("a")), **scripted(a=[OSError("down"), True]))
    async with lb:
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(poise.ReadinessError):
            lb.acquire()
        await trio.sleep(10.5)
        async with lb.acquire() as permit:
            assert permit.endpoint.id == "a"


async def test_removing_the_usable_endpoints_leaves_a_readiness_error_naming_a_quarantined_one() -> None:
    send, receive = anyio.create_memory_object_stream[poise.Update](4)
    lb = poise.LoadBalancer(discovery=receive, **scripted(bad=[OSError("down")]))
    async with send, receive, lb:
        await send.send(poise.Snapshot(1, endpoints("ok", "bad")))
        await lb.wait_ready(timeout=1)
        await trio.testing.wait_all_tasks_blocked()
        await send.send(poise.Delta(2, removed=["ok"]))
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(poise.ReadinessError) as caught:
            lb.acquire()
        assert (caught.value.index, caught.value.endpoint_id) == (0, "bad")


async def test_a_readiness_failure_warns_once_per_failing_streak(caplog: pytest.LogCaptureFixture) -> None:
    lb = poise.LoadBalancer(discovery=poise.StaticDiscovery(endpoints("a", "b")), **scripted(b=[OSError("down")]))
    async with lb:
        await trio.sleep(45)  # five checks, all failing
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and "failed readiness" in r.getMessage()]
    assert len(warnings) == 1
    assert lb.readiness_failures == 5


def test_readiness_knobs_are_validated() -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.Readiness(cooldown=-1)
    assert caught.value.knob == "Readiness.cooldown"
    with pytest.raises(poise.ConfigError):
        poise.Readiness(timeout=float("nan"))


async def test_removing_an_endpoint_mid_check_cancels_the_check_and_closes_its_resource() -> None:
    send, receive = anyio.create_memory_object_stream[poise.Update](4)
    kwargs = scripted(b=["hang"])
    closed: list[Backend] = []
    lb = poise.LoadBalancer(discovery=receive, endpoint_close=closed.append, **kwargs)
    async with send, receive, lb:
        await send.send(poise.Snapshot(1, endpoints("a", "b")))
        await lb.wait_ready(timeout=1)
        await trio.testing.wait_all_tasks_blocked()
        assert lb.snapshot()["b"].eligible_reason is poise.IneligibleReason.NOT_READY
        await send.send(poise.Delta(2, removed=["b"]))
        await trio.sleep(30)  # past the readiness timeout: a surviving check would quarantine
        assert [e.id for e in lb.snapshot().endpoints] == ["a"]
        assert [c.endpoint.id for c in closed] == ["b"]
        assert lb.readiness_failures == 0  # the cancelled check never reported


async def test_a_restarted_balancer_checks_its_rebuilt_resources_afresh() -> None:
    healthy = False

    def build(endpoint: poise.Endpoint) -> Backend:
        return Backend(endpoint, [True if healthy else OSError("down")])

    lb = poise.LoadBalancer(
        discovery=poise.StaticDiscovery(endpoints("a")),
        endpoint_factory=build,
        endpoint_close=lambda backend: None,
        readiness=poise.Readiness(timeout=2.0, cooldown=10.0),
    )
    async with lb:
        with pytest.raises(poise.ReadinessError):
            await lb.wait_ready(timeout=1)
    healthy = True
    async with lb:
        await lb.wait_ready(timeout=1)
        async with lb.acquire() as permit:
            assert permit.resource.script == [True]
