"""Misuse speaks up: bad arguments are a ConfigError naming the field, at the call that made them."""

from __future__ import annotations

import asyncio
import functools
import gc
import threading
from typing import Any

import anyio
import pytest

import poise_py as poise
from tests.support.clocks import static_lb

pytestmark = pytest.mark.anyio


# -- acquire(exclude=...) and Delta(removed=...) ------------------------------------------


async def test_exclude_as_one_string_is_a_config_error_not_a_set_of_characters() -> None:
    async with static_lb("node-1", "node-10") as lb:
        with pytest.raises(poise.ConfigError) as caught:
            lb.acquire(exclude="node-10")
        assert caught.value.knob == "exclude"
        async with lb.acquire(exclude=["node-10"]) as permit:  # the right way still works
            assert permit.endpoint.id == "node-1"


@pytest.mark.parametrize("exclude", [b"node-1", 7, None, iter(["node-1"]), [1], {"node-1", None}])
async def test_exclude_that_is_not_a_collection_of_ids_is_a_config_error(exclude: Any) -> None:
    async with static_lb("node-1", "node-2") as lb:
        with pytest.raises(poise.ConfigError) as caught:
            lb.acquire(exclude=exclude)
        assert caught.value.knob == "exclude"


@pytest.mark.parametrize("exclude", [("node-1",), ["node-1"], {"node-1"}, frozenset({"node-1"}), {"node-1": 1}])
async def test_exclude_accepts_any_collection_of_ids(exclude: Any) -> None:
    async with static_lb("node-1", "node-2") as lb:
        for _ in range(10):
            async with lb.acquire(exclude=exclude) as permit:
                assert permit.endpoint.id == "node-2"


@pytest.mark.parametrize("removed", [None, 3, "a", b"a", [1], ["a", None]])
def test_a_delta_whose_removed_is_not_a_collection_of_ids_is_a_config_error(removed: Any) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.Delta(2, removed=removed)
    assert caught.value.knob == "removed"


# -- HealthCheck(probe=...) ------------------------------------------------------------------


def plain_probe(endpoint: poise.Endpoint) -> None:
    return None


async def async_probe(endpoint: poise.Endpoint, *, port: int = 80) -> None:
    return None


class AsyncCallable:
    async def __call__(self, endpoint: poise.Endpoint) -> None:
        return None


class SyncCallable:
    def __call__(self, endpoint: poise.Endpoint) -> None:
        return None


@pytest.mark.parametrize(
    "probe", [plain_probe, lambda endpoint: None, SyncCallable(), print], ids=["def", "lambda", "sync-call", "builtin"]
)
def test_a_plain_function_probe_is_refused_at_construction(probe: Any) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.HealthCheck(probe=probe)
    assert caught.value.knob == "HealthCheck.probe"
    assert "async" in str(caught.value)


@pytest.mark.parametrize(
    "probe",
    [async_probe, functools.partial(async_probe, port=8080), AsyncCallable(), poise.probes.tcp_connect()],
    ids=["async-def", "partial", "async-call", "ready-made"],
)
def test_async_probes_are_accepted(probe: Any) -> None:
    assert poise.HealthCheck(probe=probe).probe is probe


# -- endpoints, policies and share knobs ------------------------------------------------


@pytest.mark.parametrize("metadata", [[("a", 1)], "rack=r7", 3, [1, 2]], ids=["pairs", "str", "int", "list"])
def test_endpoint_metadata_that_is_not_a_mapping_is_a_config_error(metadata: Any) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.Endpoint("a", metadata=metadata)
    assert caught.value.knob == "Endpoint.metadata"


@pytest.mark.parametrize("zone", [["eu-1"], 1, b"eu-1"])
def test_an_endpoint_zone_that_is_not_a_string_is_a_config_error(zone: Any) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        poise.Endpoint("a", zone=zone)
    assert caught.value.knob == "Endpoint.zone"


async def test_an_unhashable_consistent_hash_key_is_a_config_error_naming_the_key() -> None:
    async with static_lb("a", "b", policy=poise.ConsistentHash()) as lb:
        with pytest.raises(poise.ConfigError) as caught:
            lb.acquire(key=["user", 42])  # type: ignore[call-overload]
        assert caught.value.knob == "key"
        async with lb.acquire(key=("user", 42)):  # the balancer is unharmed
            pass
        assert lb.snapshot()["a"].inflight + lb.snapshot()["b"].inflight == 0


@pytest.mark.parametrize("policy", [poise.RoundRobin, poise.PowerOfTwoChoices, poise.ConsistentHash])
def test_a_policy_class_instead_of_an_instance_is_a_config_error(policy: Any) -> None:
    with pytest.raises(poise.ConfigError, match=rf"write {policy.__name__}\(\)") as caught:
        poise.LoadBalancer(poise.StaticDiscovery([]), policy=policy)
    assert caught.value.knob == "policy"


@pytest.mark.parametrize(
    ("make", "knob", "fraction"),
    [
        (lambda v: poise.CircuitPolicy(max_ejection_percent=v), "CircuitPolicy.max_ejection_percent", "0.5"),
        (lambda v: poise.CircuitPolicy(failure_rate=v), "CircuitPolicy.failure_rate", "0.5"),
        (
            lambda v: poise.CircuitPolicy(slow_call_rate=v, slow_call_duration=1.0),
            "CircuitPolicy.slow_call_rate",
            "0.5",
        ),
        (lambda v: poise.HealthCheck(probe=async_probe, jitter=v), "HealthCheck.jitter", "0.5"),
        (lambda v: poise.Escalation(jitter=v), "Escalation.jitter", "0.5"),
    ],
)
def test_a_share_knob_given_a_percent_is_a_config_error_giving_the_fraction(
    make: Any, knob: str, fraction: str
) -> None:
    with pytest.raises(poise.ConfigError) as caught:
        make(50)
    assert caught.value.knob == knob
    assert "looks like a percent" in str(caught.value)
    assert f"write {fraction}" in str(caught.value)


def test_a_retry_budget_percent_past_ten_reads_as_a_percent() -> None:
    with pytest.raises(poise.ConfigError, match=r"write 0\.2") as caught:
        poise.RetryBudget(percent=20)
    assert caught.value.knob == "RetryBudget.percent"


def test_max_ejection_percent_is_a_fraction_of_the_pool() -> None:
    assert poise.CircuitPolicy().max_ejection_percent == 0.5
    assert poise.CircuitPolicy(max_ejection_percent=0.5).max_ejection_percent == 0.5  # half, not 0.5%
    bad: Any
    for bad in (-0.1, 101, float("nan"), "50%", True):
        with pytest.raises(poise.ConfigError):
            poise.CircuitPolicy(max_ejection_percent=bad)


async def test_max_ejection_percent_half_lets_half_a_pool_of_four_be_ejected() -> None:
    from tests.support.clocks import FakeClock

    clock = FakeClock()
    circuit = poise.CircuitPolicy(consecutive_failures=1, minimum_volume=1, max_ejection_percent=0.5)
    async with static_lb("a", "b", "c", "d", circuit=circuit, clock=clock, policy=poise.RoundRobin()) as lb:
        for _ in range(8):
            lb.acquire().fail()
        statistics = lb.statistics()
        open_ids = [e.endpoint.id for e in lb.snapshot().endpoints if e.state is not poise.CircuitState.CLOSED]
        assert len(open_ids) == 2  # floor(4 * 0.5): with 0.5 read as 0.5% only one could be
        assert statistics.pool.suppressed_ejections > 0


# -- permits and threads -------------------------------------------------------------------


async def test_a_permit_never_entered_warns_when_collected_and_counts_as_a_cancellation(clock: Any) -> None:
    async with static_lb("a", clock=clock) as lb:
        permit = lb.acquire()
        with pytest.warns(ResourceWarning, match="unreported permit <Permit 'a'"):
            del permit  # no cycle holds it: collected here
        lb.acquire().cancel()  # the next pool operation folds the dropped permit in
        assert lb.snapshot()["a"].counters.cancellations == 2
        assert lb.snapshot()["a"].inflight == 0


async def test_a_permit_reported_without_entering_does_not_warn(clock: Any) -> None:
    async with static_lb("a", clock=clock) as lb:
        lb.acquire().succeed()
        gc.collect()  # filterwarnings=error: a warning here would fail the test
        assert lb.snapshot()["a"].counters.successes == 1


async def test_entering_a_permit_twice_raises_permit_error_and_records_one_outcome(clock: Any) -> None:
    async with static_lb("a", clock=clock) as lb:
        permit = lb.acquire()
        async with permit:
            pass
        with pytest.raises(poise.PermitError, match="already entered"):
            async with permit:
                pytest.fail("a second call must not run under a used permit")
        assert lb.snapshot()["a"].counters.successes == 1


async def test_entering_a_permit_already_reported_raises_permit_error(clock: Any) -> None:
    async with static_lb("a", clock=clock) as lb:
        permit = lb.acquire()
        permit.succeed()
        with pytest.raises(poise.PermitError, match="already reported"):
            async with permit:
                pytest.fail("a call whose outcome has nowhere to go must not run")
        assert lb.snapshot()["a"].counters.successes == 1


async def test_acquire_from_another_thread_raises_wrong_thread() -> None:
    async with static_lb("a") as lb:
        with pytest.raises(poise.WrongThread, match="event loop"):
            await anyio.to_thread.run_sync(lb.acquire)
        async with lb.acquire():  # the owning loop is unaffected
            pass


def _observer(event: object) -> None:
    return None


MUTATIONS: dict[str, Any] = {
    "set_status": lambda lb: lb.set_status("a", poise.AdminStatus.DRAINING),
    "add_observer": lambda lb: lb.add_observer(print),
    "remove_observer": lambda lb: lb.remove_observer(_observer),
    "add_call_observer": lambda lb: lb.add_call_observer(print),
    "remove_call_observer": lambda lb: lb.remove_call_observer(_observer),
    "events": lambda lb: lb.events(),
}


@pytest.mark.parametrize("method", list(MUTATIONS))
async def test_every_mutating_method_refuses_another_thread_and_changes_nothing(method: str) -> None:
    async with static_lb("a") as lb:
        lb.add_observer(_observer)
        lb.add_call_observer(_observer)
        with pytest.raises(poise.WrongThread, match=rf"{method}\(\) was called from another thread"):
            await anyio.to_thread.run_sync(MUTATIONS[method], lb)
        assert lb.snapshot()["a"].admin is poise.AdminStatus.AUTO
        lb.remove_observer(_observer)  # both still registered: a refused removal removed nothing
        lb.remove_call_observer(_observer)


@pytest.mark.parametrize("method", ["wait_ready", "drained"])
def test_waiting_methods_refuse_another_event_loop_thread(method: str) -> None:
    lb = static_lb("a")
    errors: list[BaseException] = []

    async def attempt() -> None:
        try:
            await (lb.wait_ready() if method == "wait_ready" else lb.drained("a"))
        except poise.PoiseError as exc:
            errors.append(exc)

    async def main() -> None:
        async with lb:
            other = threading.Thread(target=lambda: asyncio.run(attempt()))
            other.start()
            await anyio.to_thread.run_sync(other.join)

    anyio.run(main)
    assert len(errors) == 1
    assert isinstance(errors[0], poise.WrongThread)
    assert f"{method}() was called from another thread" in str(errors[0])


async def test_mutating_methods_work_from_any_thread_before_the_balancer_runs() -> None:
    lb = static_lb("a")
    await anyio.to_thread.run_sync(lb.add_observer, _observer)
    await anyio.to_thread.run_sync(lb.add_call_observer, _observer)
    async with lb:
        lb.remove_observer(_observer)
        lb.remove_call_observer(_observer)


async def test_acquire_from_another_thread_on_a_stopped_balancer_is_not_running() -> None:
    lb = static_lb("a")
    with pytest.raises(poise.NotRunning):
        await anyio.to_thread.run_sync(lb.acquire)


def test_acquire_from_another_event_loop_thread_raises_wrong_thread() -> None:
    lb = static_lb("a")
    errors: list[BaseException] = []

    async def main() -> None:
        async with lb:
            other = threading.Thread(target=lambda: errors.append(_try_in_new_loop(lb)))
            other.start()
            await anyio.to_thread.run_sync(other.join)

    anyio.run(main)
    assert len(errors) == 1
    assert isinstance(errors[0], poise.WrongThread)


def _try_in_new_loop(lb: poise.LoadBalancer) -> BaseException:
    async def attempt() -> BaseException:
        try:
            lb.acquire()
        except poise.PoiseError as exc:
            return exc
        return AssertionError("acquire from another loop succeeded")

    return asyncio.run(attempt())
