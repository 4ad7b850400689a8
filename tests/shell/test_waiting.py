"""``lb.acquire(wait=seconds)``: a bounded, first-come-first-served wait for an eligible endpoint.

Issue 39's goal: every endpoint OPEN for 60 s (a rate-limit answer with Retry-After 60) and
1,000 callers waiting with ``wait=90``: exactly ``permitted_probes`` probes when the window
ends, no ``NoEligibleEndpoints``, no caller past its wait, every caller served once the
probe passes, on Trio and asyncio in virtual time.
"""

from __future__ import annotations

import anyio
import pytest

import poise_py as poise
from poise_py import Fault

pytestmark = [pytest.mark.anyio, pytest.mark.virtual_asyncio]


def balancer(ids: list[str], **options: object) -> poise.LoadBalancer:
    return poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint(i) for i in ids]),
        policy=poise.RoundRobin(),
        circuit=poise.CircuitPolicy(max_ejection_percent=1.0),
        **options,  # type: ignore[arg-type]
    )


async def rate_limit_everything(lb: poise.LoadBalancer, n: int, retry_after: float = 60.0) -> None:
    for _ in range(n):
        async with lb.acquire() as permit:
            permit.fail(Fault.TRANSIENT, retry_after=retry_after)


@pytest.mark.parametrize("permitted_probes", [1, 3])
async def test_a_thousand_waiters_get_exactly_the_probe_slots_then_everyone_is_served(permitted_probes: int) -> None:
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint("provider")]),
        circuit=poise.CircuitPolicy(permitted_probes=permitted_probes),
    )
    served: list[tuple[float, bool]] = []
    refused: list[BaseException] = []
    async with lb:
        await rate_limit_everything(lb, 1)
        start = anyio.current_time()

        async def caller() -> None:
            try:
                async with lb.acquire(wait=90) as permit:
                    served.append((anyio.current_time() - start, permit.probe))
                    await anyio.sleep(0.5)
            except poise.SelectionError as exc:
                refused.append(exc)

        async with anyio.create_task_group() as tg:
            for _ in range(1000):
                tg.start_soon(caller)
        stats = lb.statistics().pool
    assert refused == []
    assert len(served) == 1000
    probes = [at for at, probe in served if probe]
    assert probes == [60.0] * permitted_probes  # exactly the probe slots, at the instant the window ends
    assert all(60.0 <= at <= 90.0 for at, _ in served)  # nobody before the window, nobody past its wait
    assert stats.probes == permitted_probes
    assert stats.failed_selections == 0
    assert stats.waits == 1000
    assert stats.waits_expired == 0


async def test_waiters_are_served_in_arrival_order() -> None:
    lb = balancer(["a"], max_in_flight=1)
    order: list[int] = []
    async with lb:
        holder = lb.acquire()
        async with anyio.create_task_group() as tg:

            async def caller(i: int) -> None:
                async with lb.acquire(wait=10):
                    order.append(i)
                    await anyio.sleep(0.1)

            for i in range(20):
                tg.start_soon(caller, i)
                await anyio.sleep(0.001)  # arrive one after another
            await anyio.sleep(1)
            assert order == []  # the only slot is held
            holder.succeed()  # the slot frees: the first waiter, then each in turn
    assert order == list(range(20))


async def test_a_wait_that_runs_out_raises_no_eligible_with_retry_after_at_the_instant() -> None:
    lb = balancer(["a", "b"])
    async with lb:
        await rate_limit_everything(lb, 2)
        start = anyio.current_time()
        with pytest.raises(poise.NoEligibleEndpoints) as raised:
            async with lb.acquire(wait=5):
                pytest.fail("no endpoint is eligible for 60 s")
        assert anyio.current_time() - start == pytest.approx(5.0)
        assert raised.value.retry_after == pytest.approx(60.0)
        stats = lb.statistics().pool
    assert stats.waits == 1
    assert stats.waits_expired == 1
    assert stats.failed_selections == 1  # the refusal the caller saw, once


async def test_an_eligible_endpoint_is_taken_at_once_and_wait_zero_refuses_at_once() -> None:
    lb = balancer(["a"])
    async with lb:
        pending = lb.acquire(wait=1)
        assert isinstance(pending, poise.PendingPermit)
        async with pending as permit:
            assert permit.endpoint.id == "a"
        await rate_limit_everything(lb, 1)
        before = anyio.current_time()
        with pytest.raises(poise.NoEligibleEndpoints):
            await lb.acquire(wait=0)
        assert anyio.current_time() == before


async def test_await_gives_the_permit_to_report_by_hand() -> None:
    lb = balancer(["a"])
    async with lb:
        await rate_limit_everything(lb, 1, retry_after=3)
        permit = await lb.acquire(wait=10)
        assert permit.probe
        permit.succeed()
        assert lb.snapshot()["a"].state is poise.CircuitState.CLOSED


async def test_a_cancelled_waiter_leaves_no_trace() -> None:
    lb = balancer(["a"])
    async with lb:
        await rate_limit_everything(lb, 1, retry_after=10)
        with anyio.move_on_after(2):
            async with lb.acquire(wait=60):
                pytest.fail("the circuit is open for 10 s")
        await anyio.sleep(20)  # the circuit half-opens with nobody waiting
        stats = lb.statistics()
        assert stats.pool.probes == 0
        assert stats.pool.cancellations == 0
        assert stats.pool.failed_selections == 0
        async with lb.acquire() as permit:
            assert permit.probe  # the probe slot is still there for the next caller


async def test_a_waiter_cancelled_after_its_permit_was_handed_over_frees_the_probe_for_the_next() -> None:
    lb = balancer(["a"])
    async with lb:
        await rate_limit_everything(lb, 1, retry_after=10)
        queue = lb._waiting  # the race is one instant wide: play it step by step
        waiter = queue.join(None, (), 60)
        await anyio.sleep(10.001)  # the window ends: the timer hands the probe slot to the waiter
        assert waiter.permit is not None
        assert waiter.permit.probe
        queue.leave(waiter)  # cancelled before it ran: the permit goes back unused
        assert lb.statistics().pool.cancellations == 0
        async with lb.acquire() as permit:
            assert permit.probe  # the next caller gets the slot


async def test_waiters_are_told_when_the_balancer_stops() -> None:
    lb = balancer(["a"])
    errors: list[BaseException] = []
    async with anyio.create_task_group() as tg, lb:
        await rate_limit_everything(lb, 1)

        async def caller() -> None:
            try:
                await lb.acquire(wait=100)
            except poise.NotRunning as exc:
                errors.append(exc)

        tg.start_soon(caller)
        await anyio.sleep(1)
    assert len(errors) == 1


async def test_a_new_waiter_does_not_jump_the_queue() -> None:
    lb = balancer(["a"], max_in_flight=1)
    order: list[str] = []
    async with lb:
        holder = lb.acquire()

        async def caller(name: str) -> None:
            async with lb.acquire(wait=10):
                order.append(name)

        async with anyio.create_task_group() as tg:
            tg.start_soon(caller, "queued")
            await anyio.sleep(0.1)
            holder.succeed()  # the slot frees; before the timer serves the queue...
            tg.start_soon(caller, "late")  # ...a new waiting caller arrives
    assert order == ["queued", "late"]


async def test_a_discovery_update_serves_waiters_on_an_empty_pool() -> None:
    publisher = poise.DiscoveryPublisher()
    lb = poise.LoadBalancer(publisher.subscribe())
    async with lb, anyio.create_task_group() as tg:

        async def caller() -> None:
            async with lb.acquire(wait=10) as permit:
                assert permit.endpoint.id == "late"

        tg.start_soon(caller)
        await anyio.sleep(2)
        publisher.publish(poise.Snapshot(revision=1, endpoints=(poise.Endpoint("late"),)))


async def test_wait_is_validated() -> None:
    lb = balancer(["a"])
    async with lb:
        for bad in (-1, float("nan"), "5", True):
            with pytest.raises(poise.ConfigError, match="wait"):
                lb.acquire(wait=bad)  # type: ignore[arg-type]


async def test_a_waiter_that_cannot_be_served_holds_back_no_one_who_asks_for_something_else() -> None:
    lb = balancer(["a", "b"])
    async with lb:
        async with lb.acquire(exclude=["b"]) as permit:
            permit.fail(Fault.TRANSIENT, retry_after=60.0)  # a is OPEN for a minute
        served: list[tuple[str, float]] = []

        async def head() -> None:
            with pytest.raises(poise.NoEligibleEndpoints):
                async with lb.acquire(exclude=["b"], wait=30.0):  # only a will do: it waits
                    pass

        async def second() -> None:
            start = anyio.current_time()
            async with lb.acquire(wait=20.0) as permit:  # b is eligible the whole time
                served.append((permit.endpoint.id, anyio.current_time() - start))

        async with anyio.create_task_group() as tg:
            tg.start_soon(head)
            await anyio.sleep(0.01)
            tg.start_soon(second)
    assert served == [("b", 0.0)]


async def test_waiters_end_with_discovery_closed_when_discovery_fails_closed() -> None:
    publisher = poise.DiscoveryPublisher()
    lb = poise.LoadBalancer(publisher.subscribe(), on_discovery_end=poise.DiscoveryEnd.FAIL_CLOSED)
    ended: list[tuple[str, float]] = []
    async with lb:
        publisher.publish(poise.Snapshot(revision=1, endpoints=[poise.Endpoint("a")]))
        await lb.wait_ready(timeout=5)
        async with lb.acquire() as permit:
            permit.fail(Fault.TRANSIENT, retry_after=60.0)

        async def waiter() -> None:
            try:
                async with lb.acquire(wait=30.0):
                    pass
            except poise.SelectionError as exc:
                ended.append((type(exc).__name__, anyio.current_time()))

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(waiter)
            await anyio.sleep(1.0)
            closed_at = anyio.current_time()
            publisher.close()
        with pytest.raises(poise.DiscoveryClosed):
            lb.acquire(wait=5.0)
    assert ended == [("DiscoveryClosed", closed_at)] * 3


async def test_a_waiter_with_a_key_no_policy_hashes_is_served_like_any_other() -> None:
    lb = balancer(["a"])  # round robin reads no key, so any object will do
    async with lb:
        await rate_limit_everything(lb, 1, retry_after=5.0)
        served: list[str] = []

        async def waiter(key: object) -> None:
            async with lb.acquire(key=key, wait=10.0) as permit:
                served.append(permit.endpoint.id)

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter, [1, 2])  # unhashable
            tg.start_soon(waiter, None)
    assert sorted(served) == ["a", "a"]
