"""Passive health through the balancer: the seed stories, windows, escalation, caps, retries."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import grpc
import grpc.aio
import pytest

import poise_py as poise
from poise_py import CircuitState, Classification, Fault
from tests.support.clocks import FakeClock, endpoints, static_lb

pytestmark = pytest.mark.anyio

MARKER = ("wool-fault", "worker-internal")


def rpc_error(code: grpc.StatusCode, *trailing: tuple[str, str]) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), "details")


class Workers:
    """Pretend gRPC workers: each id maps to a script of outcomes (None = success)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.broken: dict[str, Exception] = {}
        self.once: dict[str, Exception] = {}
        self.calls: dict[str, int] = {}

    async def dispatch(self, endpoint: poise.Endpoint) -> str:
        self.calls[endpoint.id] = self.calls.get(endpoint.id, 0) + 1
        if endpoint.id in self.once:
            raise self.once.pop(endpoint.id)
        if endpoint.id in self.broken:
            raise self.broken[endpoint.id]
        return endpoint.id


SEED_000 = poise.CircuitPolicy(
    consecutive_failures=3,
    minimum_volume=3,
    escalation=poise.Escalation(base=10.0, maximum=120.0, backoff=poise.Backoff.LINEAR, jitter=0.0),
)


def seed_000_lb(clock: FakeClock) -> poise.LoadBalancer:
    return static_lb(
        "w1",
        "w2",
        "w3",
        policy=poise.RoundRobin(),
        circuit=SEED_000,
        classifier=poise.classify.grpc(marker=MARKER),
        clock=clock,
        seed=0,
    )


async def test_grpc_pool_one_ambiguous_internal_never_ejects_a_live_worker(clock: FakeClock) -> None:
    workers = Workers(clock)
    async with seed_000_lb(clock) as lb:
        workers.once["w1"] = rpc_error(grpc.StatusCode.INTERNAL)
        for _ in range(300):
            assert await lb.call(workers.dispatch) in {"w1", "w2", "w3"}
            clock.advance(0.1)
        snap = lb.snapshot()
        assert [e.counters.ejections for e in snap.endpoints] == [0, 0, 0]
        assert snap["w1"].counters.faults[Fault.SUSPECT] == 1
        assert snap["w1"].state is CircuitState.CLOSED


async def test_grpc_pool_persistent_internal_ejects_then_cooldown_grows_then_readmits(
    clock: FakeClock,
) -> None:
    workers = Workers(clock)
    async with seed_000_lb(clock) as lb:
        workers.broken["w1"] = rpc_error(grpc.StatusCode.INTERNAL)
        for _ in range(30):  # callers never see the fault: the retry goes to another worker
            assert await lb.call(workers.dispatch) in {"w2", "w3"}
        assert lb.snapshot()["w1"].state is CircuitState.OPEN
        windows = []
        for _ in range(3):  # each failed probe re-ejects for longer: 10 s, 20 s, 30 s, 40 s
            opened = lb.snapshot()["w1"]
            assert opened.reopen_at is not None
            windows.append(opened.reopen_at - clock.now)
            clock.advance(windows[-1])
            for _ in range(3):  # round robin reaches w1's probe slot within three calls
                await lb.call(workers.dispatch)
        assert windows == [10.0, 20.0, 30.0]
        assert lb.snapshot()["w1"].state is CircuitState.OPEN
        assert lb.snapshot()["w1"].reopen_at == clock.now + 40.0
        for other in ("w2", "w3"):
            assert lb.snapshot()[other].counters.ejections == 0
        del workers.broken["w1"]  # the worker recovers
        clock.advance(40.0)
        served = {await lb.call(workers.dispatch) for _ in range(30)}
        snap = lb.snapshot()["w1"]
        assert snap.state is CircuitState.CLOSED
        assert snap.escalation_level == 0
        assert "w1" in served


async def test_grpc_pool_marked_internal_is_evict_now(clock: FakeClock) -> None:
    workers = Workers(clock)
    async with seed_000_lb(clock) as lb:
        workers.once["w2"] = rpc_error(grpc.StatusCode.INTERNAL, MARKER)
        for _ in range(3):
            await lb.call(workers.dispatch)
        snap = lb.snapshot()["w2"]
        assert snap.state is CircuitState.OPEN
        assert snap.counters.faults[Fault.FATAL] == 1


async def test_grpc_pool_where_every_worker_fails_is_never_drained(clock: FakeClock) -> None:
    workers = Workers(clock)
    async with seed_000_lb(clock) as lb:
        for w in ("w1", "w2", "w3"):
            workers.broken[w] = rpc_error(grpc.StatusCode.INTERNAL)
        for _ in range(100):
            with pytest.raises(grpc.aio.AioRpcError):
                await lb.call(workers.dispatch)
        snap = lb.snapshot()
        assert snap.ejected == 1  # 50% of 3 rounds down; one may always go
        assert snap.available == 2
        assert snap.suppressed_ejections > 0


TIERED = poise.CircuitPolicy(
    consecutive_failures=1,
    minimum_volume=1,
    escalation=poise.Escalation(base=60.0, maximum=300.0, jitter=0.0),
    max_ejection_percent=1.0,
)


async def test_llm_gateway_rate_limited_provider_recovers_on_its_next_probe(clock: FakeClock) -> None:
    async with static_lb("t0", circuit=TIERED, clock=clock) as lb:
        async with lb.acquire() as permit:
            permit.fail(Fault.TRANSIENT, retry_after=60.0)
        snap = lb.snapshot()["t0"]
        assert snap.state is CircuitState.OPEN
        assert snap.reopen_at == clock.now + 60.0
        assert snap.escalation_level == 0
        clock.advance(60.0)
        async with lb.acquire() as probe:
            assert probe.probe
        assert lb.snapshot()["t0"].state is CircuitState.CLOSED


async def test_llm_gateway_revoked_key_is_blocked_and_never_probed(clock: FakeClock) -> None:
    async with static_lb("t0", "t1", circuit=TIERED, clock=clock) as lb:
        async with lb.acquire(exclude=["t1"]) as permit:
            permit.fail(Fault.PERMANENT)
        for _ in range(10):
            clock.advance(3600.0)
            for _ in range(5):
                async with lb.acquire() as permit:
                    assert permit.endpoint.id == "t1"
        snap = lb.snapshot()["t0"]
        assert snap.state is CircuitState.BLOCKED
        assert snap.counters.probes == 0
        assert snap.counters.issued == 1
        lb.set_status("t0", poise.AdminStatus.AUTO)  # an operator rotated the key
        assert lb.snapshot()["t0"].state is CircuitState.CLOSED


async def test_llm_gateway_open_window_doubles_per_failed_probe_to_the_cap_and_resets(clock: FakeClock) -> None:
    async with static_lb("t0", circuit=TIERED, clock=clock) as lb:
        async with lb.acquire() as permit:
            permit.fail()
        windows = []
        for _ in range(5):
            snap = lb.snapshot()["t0"]
            assert snap.reopen_at is not None
            windows.append(snap.reopen_at - clock.now)
            clock.advance(windows[-1])
            async with lb.acquire() as probe:
                assert probe.probe
                probe.fail()
        assert windows == [60.0, 120.0, 240.0, 300.0, 300.0]
        clock.advance(300.0)
        async with lb.acquire() as probe:
            assert probe.probe  # succeeds: closes and resets the backoff
        async with lb.acquire() as permit:
            permit.fail()
        snap = lb.snapshot()["t0"]
        assert snap.reopen_at == clock.now + 60.0


async def test_failure_rate_over_a_count_window_trips_with_volume(clock: FakeClock) -> None:
    policy = poise.CircuitPolicy(
        consecutive_failures=None, failure_rate=0.5, minimum_volume=10, window=poise.CountWindow(20)
    )
    async with static_lb("a", circuit=policy, clock=clock) as lb:
        for i in range(9):
            async with lb.acquire() as permit:
                if i % 2:
                    permit.fail()
        assert lb.snapshot()["a"].state is CircuitState.CLOSED  # 4/9 and under the volume gate
        async with lb.acquire() as permit:
            permit.fail()
        assert lb.snapshot()["a"].state is CircuitState.OPEN  # 5/10


@pytest.mark.parametrize(("rate", "failures", "volume"), [(0.55, 55, 100), (0.14, 7, 50), (0.3, 3, 10)])
async def test_a_failure_rate_trips_at_exactly_its_fraction(
    clock: FakeClock, rate: float, failures: int, volume: int
) -> None:
    policy = poise.CircuitPolicy(
        consecutive_failures=None,
        consecutive_transient_failures=None,
        failure_rate=rate,
        minimum_volume=volume,
        window=poise.CountWindow(volume),
    )
    async with static_lb("a", circuit=policy, clock=clock) as lb:
        for i in range(volume):
            async with lb.acquire() as permit:
                if i >= volume - failures:
                    permit.fail()
        assert lb.snapshot()["a"].state is CircuitState.OPEN  # rate * volume is 55.00000000000001 for 0.55


async def test_a_time_window_forgets_old_failures(clock: FakeClock) -> None:
    policy = poise.CircuitPolicy(
        consecutive_failures=None,
        failure_rate=0.5,
        minimum_volume=4,
        window=poise.TimeWindow(duration=10.0, buckets=10),
    )
    async with static_lb("a", circuit=policy, clock=clock) as lb:
        for _ in range(3):
            async with lb.acquire() as permit:
                permit.fail()
        clock.advance(11.0)  # those three strikes fall out of the window
        for _ in range(3):
            async with lb.acquire():
                pass
        async with lb.acquire() as permit:
            permit.fail()
        assert lb.snapshot()["a"].state is CircuitState.CLOSED  # 1 of 4, not 4 of 7


async def test_slow_calls_trip_the_slow_call_rate(clock: FakeClock) -> None:
    policy = poise.CircuitPolicy(
        consecutive_failures=None, slow_call_rate=0.5, slow_call_duration=1.0, minimum_volume=4
    )
    async with static_lb("a", circuit=policy, clock=clock) as lb:
        for _ in range(4):
            async with lb.acquire():
                clock.advance(2.0)  # a slow success
        snap = lb.snapshot()["a"]
        assert snap.state is CircuitState.OPEN
        assert snap.counters.successes == 4


async def test_retry_after_on_a_tripping_fault_extends_the_open_window(clock: FakeClock) -> None:
    async with static_lb("a", circuit=TIERED, clock=clock) as lb:
        async with lb.acquire() as permit:
            permit.fail(Fault.SUSPECT, retry_after=200.0)
        assert lb.snapshot()["a"].reopen_at == clock.now + 200.0


async def test_escalation_decays_while_closed_when_not_reset_on_success(clock: FakeClock) -> None:
    policy = poise.CircuitPolicy(
        consecutive_failures=1,
        minimum_volume=1,
        escalation=poise.Escalation(base=10.0, maximum=1000.0, jitter=0.0, reset_on_success=False),
    )
    async with static_lb("a", circuit=policy, clock=clock) as lb:
        async with lb.acquire() as permit:
            permit.fail()  # level 0 -> 10 s
        clock.advance(10.0)
        async with lb.acquire() as probe:
            probe.fail()  # level 1 -> 20 s
        clock.advance(20.0)
        async with lb.acquire() as probe:
            pass  # closes; escalation kept at level 2
        assert lb.snapshot()["a"].escalation_level == 2
        async with lb.acquire() as permit:
            permit.fail()  # right away: 40 s
        assert lb.snapshot()["a"].reopen_at == clock.now + 40.0
        clock.advance(40.0)
        async with lb.acquire() as probe:
            pass
        clock.advance(25.0)  # two decay intervals (base, 10 s) closed: level 3 -> 1
        async with lb.acquire() as permit:
            permit.fail()
        assert lb.snapshot()["a"].reopen_at == clock.now + 20.0


async def test_hard_cap_retires_until_discovery_re_emits_the_endpoint(clock: FakeClock) -> None:
    policy = poise.CircuitPolicy(
        consecutive_failures=1,
        minimum_volume=1,
        max_ejection_percent=1.0,
        escalation=poise.Escalation(base=10.0, jitter=0.0),
        hard_cap=poise.HardCap(max_ejections=2),
    )
    send, receive = anyio.create_memory_object_stream[poise.Update](10)
    lb = poise.LoadBalancer(receive, circuit=policy, clock=clock)
    async with lb, send, receive:
        await send.send(poise.Snapshot(1, endpoints("a")))
        await anyio.wait_all_tasks_blocked()
        async with lb.acquire() as permit:
            permit.fail()  # ejection 1
        clock.advance(10.0)
        async with lb.acquire() as probe:
            probe.fail()  # ejection 2
        clock.advance(20.0)
        async with lb.acquire() as probe:
            probe.fail()  # would be ejection 3: retired
        assert lb.snapshot()["a"].state is CircuitState.RETIRED
        assert lb.snapshot()["a"].counters.ejections == 2  # two openings; the retirement is not one
        assert lb.statistics().pool.ejections == 2
        clock.advance(10_000.0)
        with pytest.raises(poise.NoEligibleEndpoints) as info:
            lb.acquire()
        assert info.value.reasons[poise.IneligibleReason.RETIRED] == 1
        await send.send(poise.Delta(2, removed=["a"]))
        await send.send(poise.Delta(3, added=endpoints("a")))
        await anyio.wait_all_tasks_blocked()
        snap = lb.snapshot()["a"]
        assert snap.state is CircuitState.CLOSED
        assert snap.counters.ejections == 0


async def test_call_retries_a_transient_fault_elsewhere_without_a_strike_until_a_run_ejects(clock: FakeClock) -> None:
    workers = Workers(clock)
    workers.broken["a"] = rpc_error(grpc.StatusCode.UNAVAILABLE)
    async with static_lb("a", "b", policy=poise.RoundRobin(), classifier=poise.classify.grpc(), clock=clock) as lb:
        results = [await lb.call(workers.dispatch) for _ in range(20)]
        assert set(results) == {"b"}
        snap = lb.snapshot()["a"]
        assert snap.consecutive_failures == 0  # no strike
        # ... but the default run of five TRANSIENT faults ejected the dead worker.
        assert snap.state is CircuitState.OPEN
        assert snap.counters.faults[Fault.TRANSIENT] == 5


async def test_call_never_retries_a_caller_fault(clock: FakeClock) -> None:
    tried: list[str] = []

    async def bad_request(endpoint: poise.Endpoint) -> None:
        tried.append(endpoint.id)
        raise ValueError("malformed")

    async with static_lb("a", "b", "c", clock=clock) as lb:
        with pytest.raises(ValueError, match="malformed") as info:
            await lb.call(bad_request)
        assert len(tried) == 1
        assert [a.fault for a in info.value.poise_attempts] == [Fault.CALLER]  # type: ignore[attr-defined]


async def test_call_raises_the_last_real_error_with_every_attempt_recorded(clock: FakeClock) -> None:
    async def down(endpoint: poise.Endpoint) -> None:
        raise ConnectionRefusedError(endpoint.id)

    async with static_lb("a", "b", "c", "d", clock=clock) as lb:
        with pytest.raises(ConnectionRefusedError) as info:
            await lb.call(down, attempts=3)
        attempts = info.value.poise_attempts  # type: ignore[attr-defined]
        assert len(attempts) == 3
        assert len({a.endpoint_id for a in attempts}) == 3
        assert attempts[-1].error is info.value
        assert any("3 attempt(s)" in note for note in info.value.__notes__)


async def test_call_stops_retrying_when_no_other_endpoint_is_left(clock: FakeClock) -> None:
    async def down(endpoint: poise.Endpoint) -> None:
        raise ConnectionRefusedError(endpoint.id)

    async with static_lb("a", "b", clock=clock) as lb:
        with pytest.raises(ConnectionRefusedError) as info:
            await lb.call(down, attempts=5)
        assert len(info.value.poise_attempts) == 2  # type: ignore[attr-defined]


async def test_the_retry_budget_keeps_a_dead_pool_from_tripling_its_load(clock: FakeClock) -> None:
    calls = 0

    async def down(endpoint: poise.Endpoint) -> None:
        nonlocal calls
        calls += 1
        raise poise.FaultError(Fault.TRANSIENT)  # transient: no ejection, the pool stays "up"

    budget = poise.RetryBudget(percent=0.2, min_per_second=0.0, ttl=10.0)
    async with static_lb(*"abcde", clock=clock, retry_budget=budget) as lb:
        for _ in range(100):
            with pytest.raises(poise.FaultError):
                await lb.call(down, attempts=3)
        assert calls <= 100 + 20 + 1
        assert lb.retries_denied > 0


async def test_call_raises_selection_error_when_not_even_one_attempt_can_start() -> None:
    async def never(endpoint: poise.Endpoint) -> None:
        raise AssertionError("unreachable")

    async with poise.LoadBalancer(poise.StaticDiscovery([])) as lb:
        with pytest.raises(poise.EmptyPool):
            await lb.call(never)


async def test_call_passes_arguments_and_a_classification_with_retry_after(clock: FakeClock) -> None:
    async def echo(endpoint: poise.Endpoint, x: int, *, y: int) -> int:
        return x + y

    async with static_lb("a", clock=clock) as lb:
        assert await lb.call(echo, 1, y=2) == 3
        with pytest.raises(poise.ConfigError):
            await lb.call(echo, 1, y=2, attempts=0)

    def limited(exc: BaseException) -> Classification:
        return Classification(Fault.TRANSIENT, retry_after=30.0)

    async def limited_call(endpoint: poise.Endpoint) -> None:
        raise RuntimeError("429")

    async with static_lb("a", clock=clock, classifier=limited) as lb:
        with pytest.raises(RuntimeError):
            await lb.call(limited_call)
        assert lb.snapshot()["a"].reopen_at == clock.now + 30.0


async def _drain(stream: AsyncIterator[object]) -> None:
    async for _ in stream:
        pass


async def test_discovery_re_emitting_a_changed_definition_clears_a_permanent_block(clock: FakeClock) -> None:
    send, receive = anyio.create_memory_object_stream[poise.Update](10)
    lb = poise.LoadBalancer(receive, clock=clock)
    async with lb, send, receive:
        await send.send(poise.Snapshot(1, [poise.Endpoint("t0", metadata={"key": "old"})]))
        await anyio.wait_all_tasks_blocked()
        async with lb.acquire() as permit:
            permit.fail(Fault.PERMANENT)
        await send.send(poise.Snapshot(2, [poise.Endpoint("t0", metadata={"key": "old"})]))
        await anyio.wait_all_tasks_blocked()
        assert lb.snapshot()["t0"].state is CircuitState.BLOCKED  # the same definition: still blocked
        await send.send(poise.Snapshot(3, [poise.Endpoint("t0", metadata={"key": "rotated"})]))
        await anyio.wait_all_tasks_blocked()
        assert lb.snapshot()["t0"].state is CircuitState.CLOSED
