"""Telemetry: events, observers, statistics, saturation, rate-limited logs, the no-eligible alert."""

from __future__ import annotations

import gc
import logging
import weakref

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

import poise_py as poise
from poise_py import CircuitState, DecisionMode, Fault
from poise_py._core._record import count_selection
from poise_py._core._tally import SATURATED
from poise_py._logs import LimitedLog, LogLimit, RateLimiter
from tests.support.clocks import TRIP_AT_ONCE, FakeClock, endpoints, static_lb
from tests.support.events import drain

pytestmark = pytest.mark.anyio


async def strike(lb: poise.LoadBalancer, endpoint_id: str | None = None) -> None:
    others = [s.id for s in lb.snapshot().endpoints if endpoint_id is not None and s.id != endpoint_id]
    with pytest.raises(OSError):
        async with lb.acquire(exclude=others):
            raise OSError("boom")


# -- circuit events ------------------------------------------------------------------


async def test_a_circuit_cycle_emits_opened_ejected_half_opened_closed_readmitted(clock: FakeClock) -> None:
    async with static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=clock) as lb:
        stream = lb.events()
        seen: list[poise.BalancerEvent] = []
        lb.add_observer(seen.append)
        await strike(lb, "a")
        clock.advance(30.0)
        async with lb.acquire(exclude=["b"]) as permit:
            assert permit.probe
        events = await drain(stream)
        assert [type(e) for e in events] == [
            poise.CircuitOpened,
            poise.EndpointEjected,
            poise.CircuitHalfOpened,
            poise.CircuitClosed,
            poise.EndpointReadmitted,
        ]
        assert events == seen
        opened, ejected, half, closed, back = events
        assert isinstance(opened, poise.CircuitOpened)
        assert opened.endpoint_id == "a"
        assert opened.previous is CircuitState.CLOSED
        assert opened.cause is poise.Cause.CONSECUTIVE_FAILURES
        assert opened.reopen_at == pytest.approx(1030.0)
        assert opened.at == 1000.0
        assert isinstance(ejected, poise.EndpointEjected)
        assert ejected.state is CircuitState.OPEN
        assert ejected.until == opened.reopen_at
        assert isinstance(half, poise.CircuitHalfOpened)
        assert half.epoch == opened.epoch + 1
        assert isinstance(closed, poise.CircuitClosed)
        assert closed.cause is poise.Cause.PROBE_SUCCEEDED
        assert closed.previous is CircuitState.HALF_OPEN
        assert isinstance(back, poise.EndpointReadmitted)
        assert back.cause is poise.Cause.PROBE_SUCCEEDED


async def test_a_failed_probe_reopens_without_a_second_ejection_event(clock: FakeClock) -> None:
    async with static_lb("a", circuit=TRIP_AT_ONCE, clock=clock) as lb:
        stream = lb.events()
        await strike(lb)
        clock.advance(30.0)
        await strike(lb)
        kinds = [type(e) for e in await drain(stream)]
        assert kinds == [
            poise.CircuitOpened,
            poise.EndpointEjected,
            poise.CircuitHalfOpened,
            poise.CircuitOpened,
        ]


async def test_a_permanent_fault_emits_an_ejection_into_blocked(clock: FakeClock) -> None:
    async with static_lb("a", clock=clock) as lb:
        stream = lb.events()
        async with lb.acquire() as permit:
            permit.fail(Fault.PERMANENT)
        (event,) = await drain(stream)
        assert isinstance(event, poise.EndpointEjected)
        assert event.state is CircuitState.BLOCKED
        assert event.cause is poise.Cause.PERMANENT


@pytest.mark.backends("trio")
async def test_async_for_over_events_sees_the_timer_driven_half_open() -> None:
    async with anyio.create_task_group() as tg:
        lb = static_lb("a", circuit=TRIP_AT_ONCE)
        got: list[poise.BalancerEvent] = []

        async def watch(stream: poise.EventStream) -> None:
            got.extend([event async for event in stream])

        async with lb:
            tg.start_soon(watch, lb.events())
            await strike(lb)
            await anyio.sleep(31.0)  # virtual: the timer moves it to HALF_OPEN
        # leaving `async with lb` ended the stream, so the watcher returned
    assert [type(e) for e in got] == [poise.CircuitOpened, poise.EndpointEjected, poise.CircuitHalfOpened]


# -- streams and observers -----------------------------------------------------------


async def test_a_slow_subscriber_loses_the_oldest_events_and_counts_them(clock: FakeClock) -> None:
    async with static_lb("a", circuit=TRIP_AT_ONCE, clock=clock) as lb:
        stream = lb.events(buffer=2)
        for _ in range(3):
            await strike(lb)  # opened + ejected
            clock.advance(30.0)
            async with lb.acquire():
                pass  # half-opened, closed, readmitted
        assert stream.pending() == 2
        assert stream.dropped == 15 - 2
        last = await drain(stream)
        assert [type(e) for e in last] == [poise.CircuitClosed, poise.EndpointReadmitted]
        assert lb.statistics().pool.events_dropped == 13


async def test_a_stream_ends_when_the_balancer_stops_after_draining_its_buffer(clock: FakeClock) -> None:
    lb = static_lb("a", circuit=TRIP_AT_ONCE, clock=clock)
    async with lb:
        stream = lb.events()
        await strike(lb)
    assert stream.closed
    got = [event async for event in stream]
    assert [type(e) for e in got] == [poise.CircuitOpened, poise.EndpointEjected]


async def test_a_closed_stream_receives_nothing_more(clock: FakeClock) -> None:
    async with static_lb("a", circuit=TRIP_AT_ONCE, clock=clock) as lb:
        async with lb.events() as stream:
            pass
        await strike(lb)
        assert stream.pending() == 0
        assert [e async for e in stream] == []


async def test_an_unreferenced_stream_stops_being_fed(clock: FakeClock) -> None:
    async with static_lb("a", circuit=TRIP_AT_ONCE, clock=clock) as lb:
        gone = weakref.ref(lb.events(buffer=1))
        gc.collect()
        assert gone() is None  # the balancer holds no strong reference to a stream
        await strike(lb)  # two events: a stream of one still fed would drop one
        assert lb.statistics().pool.events_dropped == 0


async def test_a_raising_observer_is_logged_and_the_others_still_run(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    def broken(event: poise.BalancerEvent) -> None:
        raise RuntimeError("observer bug")

    async with static_lb("a", circuit=TRIP_AT_ONCE, clock=clock) as lb:
        lb.add_observer(broken)
        lb.add_observer(lambda e: seen.append(type(e).__name__))
        with caplog.at_level(logging.ERROR, logger="poise_py"):
            await strike(lb)
        assert seen == ["CircuitOpened", "EndpointEjected"]
        assert any("observer" in r.getMessage() for r in caplog.records)
        lb.remove_observer(broken)
        with pytest.raises(ValueError):
            lb.remove_observer(broken)


async def test_an_event_emitted_by_an_observer_is_delivered_after_the_current_one(clock: FakeClock) -> None:
    order: list[str] = []
    async with static_lb("a", circuit=TRIP_AT_ONCE, clock=clock) as lb:

        def first(event: poise.BalancerEvent) -> None:
            order.append(f"first:{type(event).__name__}")
            if isinstance(event, poise.CircuitOpened):
                lb._telemetry.emit(poise.PanicStarted(at=event.at, tier=0, healthy_share=0.0))

        lb.add_observer(first)
        lb.add_observer(lambda e: order.append(f"second:{type(e).__name__}"))
        await strike(lb)
    assert order[:4] == [
        "first:CircuitOpened",
        "second:CircuitOpened",
        "first:PanicStarted",
        "second:PanicStarted",
    ]


async def test_emit_counts_panics_and_coordination_fallbacks(clock: FakeClock) -> None:
    async with static_lb("a", clock=clock) as lb:
        stream = lb.events()
        lb._telemetry.emit(poise.PanicStarted(at=1.0, tier=0, healthy_share=0.2))
        lb._telemetry.emit(poise.PanicEnded(at=2.0, tier=0, healthy_share=0.9))
        lb._telemetry.emit(poise.CoordinationFallback(at=3.0, endpoint_id="a", error=ConnectionError("redis down")))
        stats = lb.statistics().pool
        assert stats.panics == 1
        assert stats.coordination_fallbacks == 1
        assert [type(e) for e in await drain(stream)] == [
            poise.PanicStarted,
            poise.PanicEnded,
            poise.CoordinationFallback,
        ]


async def test_bad_subscription_arguments_raise_config_error() -> None:
    lb = static_lb("a")
    with pytest.raises(poise.ConfigError):
        lb.events(buffer=0)
    with pytest.raises(poise.ConfigError):
        lb.add_observer("not callable")  # type: ignore[arg-type]


# -- discovery events ----------------------------------------------------------------


async def test_discovery_updates_emit_applied_and_rejected_and_count_them(clock: FakeClock) -> None:
    send, receive = anyio.create_memory_object_stream[poise.Update](10)
    lb = poise.LoadBalancer(receive, clock=clock)
    stream = lb.events()
    async with lb, send, receive:
        await send.send(poise.Snapshot(1, endpoints("a", "b")))
        await send.send(poise.Delta(2, removed=["b"], added=endpoints("c")))
        await send.send(poise.Delta(2, removed=["a"]))  # duplicate revision: rejected
        await anyio.wait_all_tasks_blocked()
        events = await drain(stream)
        assert lb.discovery_rejected == 1
        stats = lb.statistics().pool
        assert stats.discovery_applied == 2
        assert stats.discovery_rejected == 1
    first, second, rejected = events
    assert isinstance(first, poise.DiscoveryApplied)
    assert (first.revision, first.added, first.size) == (1, ("a", "b"), 2)
    assert isinstance(second, poise.DiscoveryApplied)
    assert (second.added, second.removed) == (("c",), ("b",))
    assert isinstance(rejected, poise.DiscoveryRejected)
    assert isinstance(rejected.error, poise.DuplicateRevision)


# -- statistics ----------------------------------------------------------------------


async def test_statistics_are_frozen_and_count_per_endpoint_and_pool(clock: FakeClock) -> None:
    async with static_lb("a", "b", clock=clock) as lb:
        async with lb.acquire(exclude=["b"]):
            pass
        async with lb.acquire(exclude=["b"]) as permit:
            permit.fail(Fault.TRANSIENT)
        with anyio.CancelScope() as scope:
            async with lb.acquire(exclude=["a"]):
                scope.cancel()
                await anyio.sleep(1)
        stats = lb.statistics()
        a, b = stats.endpoints["a"], stats.endpoints["b"]
        assert (a.issued, a.successes, a.faults[Fault.TRANSIENT]) == (2, 1, 1)
        assert b.cancellations == 1
        assert a.selections[DecisionMode.HEALTHY] == 2
        assert stats.pool.issued == 3
        assert stats.pool.successes == 1
        assert stats.pool.cancellations == 1
        assert stats.size == 2
        with pytest.raises(AttributeError):
            stats.pool.issued = 0  # type: ignore[misc]
        with pytest.raises(TypeError):
            stats.endpoints["c"] = a  # type: ignore[index]


async def test_pool_totals_keep_the_counters_of_departed_endpoints(clock: FakeClock) -> None:
    send, receive = anyio.create_memory_object_stream[poise.Update](10)
    lb = poise.LoadBalancer(receive, clock=clock)
    async with lb, send, receive:
        await send.send(poise.Snapshot(1, endpoints("a", "b")))
        await anyio.wait_all_tasks_blocked()
        async with lb.acquire(exclude=["b"]):
            pass
        lingering = lb.acquire(exclude=["b"])
        async with lingering:
            await send.send(poise.Delta(2, removed=["a"]))
            await anyio.wait_all_tasks_blocked()
            assert "a" not in lb.statistics().endpoints
            assert lb.statistics().inflight == 1
        stats = lb.statistics()
        assert "a" not in stats.endpoints
        assert stats.pool.successes == 2  # the late success of the departed endpoint counts
        assert stats.pool.stale == 1  # and is stale for health
        assert stats.pool.issued == 2


async def test_counters_saturate_at_two_to_the_64_minus_one_and_never_wrap(clock: FakeClock) -> None:
    async with static_lb("a", "b", clock=clock) as lb:
        for state in lb._pool.members.values():
            state.successes = SATURATED - 1
            state.cancellations = SATURATED
        async with lb.acquire(exclude=["b"]):
            pass
        async with lb.acquire(exclude=["b"]):
            pass
        with anyio.CancelScope() as scope:
            async with lb.acquire(exclude=["b"]):
                scope.cancel()
                await anyio.sleep(1)
        stats = lb.statistics()
        assert stats.endpoints["a"].successes == SATURATED
        assert stats.endpoints["a"].cancellations == SATURATED
        assert stats.endpoints["a"].issued == SATURATED
        assert stats.pool.successes == SATURATED  # two saturated endpoints: still 2**64 - 1
        assert stats.pool.issued == SATURATED
        assert stats.pool.selections[DecisionMode.HEALTHY] == SATURATED


async def test_routing_counts_spillover_and_panic_and_healthy_is_the_rest(clock: FakeClock) -> None:
    async with static_lb("a", clock=clock) as lb:
        for _ in range(3):
            async with lb.acquire():
                pass
        state = lb._pool.members["a"]
        count_selection(state, DecisionMode.SPILLOVER)
        count_selection(state, DecisionMode.PANIC)
        count_selection(state, DecisionMode.HEALTHY)  # derived: a no-op
        selections = lb.statistics().endpoints["a"].selections
        assert selections == {
            DecisionMode.HEALTHY: 1,
            DecisionMode.SPILLOVER: 1,
            DecisionMode.PANIC: 1,
            DecisionMode.DEGRADED: 0,
            DecisionMode.LIMITED: 0,
        }
        state.mode_selections[1] = SATURATED
        count_selection(state, DecisionMode.SPILLOVER)
        assert state.mode_selections[1] == SATURATED


# -- rate-limited logging ------------------------------------------------------------


async def test_a_flapping_endpoint_cannot_flood_the_log(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    limit = poise.LogLimit(burst=3, interval=60.0)
    async with static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=clock, log_limit=limit) as lb:
        with caplog.at_level(logging.DEBUG, logger="poise_py"):
            for _ in range(50):  # 50 flaps in 50 x 30 s: 150 circuit moves
                await strike(lb, "a")
                clock.advance(30.0)
                async with lb.acquire(exclude=["b"]):
                    pass
        circuit_lines = [r for r in caplog.records if "circuit" in r.getMessage()]
        # 3 at once, then one per 20 s over 1500 s: bounded, far fewer than 150.
        assert 3 <= len(circuit_lines) <= 3 + 1500 / 20 + 1
        assert len(circuit_lines) < 100
        assert any("similar lines suppressed" in r.getMessage() for r in circuit_lines)
        assert lb.statistics().pool.log_lines_suppressed > 0


async def test_one_endpoints_flapping_does_not_silence_another(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    limit = poise.LogLimit(burst=2, interval=3600.0)
    async with static_lb("a", "b", circuit=TRIP_AT_ONCE, clock=clock, log_limit=limit) as lb:
        with caplog.at_level(logging.DEBUG, logger="poise_py"):
            for _ in range(5):
                await strike(lb, "a")
                clock.advance(30.0)
                async with lb.acquire(exclude=["b"]):
                    pass
            await strike(lb, "b")
        assert any("'b' circuit closed -> open" in r.getMessage() for r in caplog.records)


async def test_a_raising_classifier_is_logged_rate_limited_and_records_suspect(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(exc: BaseException) -> Fault:
        raise RuntimeError("classifier bug")

    limit = poise.LogLimit(burst=2, interval=60.0)
    never_trips = poise.CircuitPolicy(consecutive_failures=1000)
    async with static_lb("a", clock=clock, classifier=broken, log_limit=limit, circuit=never_trips) as lb:
        with caplog.at_level(logging.ERROR, logger="poise_py"):
            for _ in range(20):
                with pytest.raises(KeyError):
                    async with lb.acquire():
                        raise KeyError("x")
        assert lb.snapshot()["a"].counters.faults[Fault.SUSPECT] == 20
        lines = [r for r in caplog.records if "classifier raised" in r.getMessage()]
        assert len(lines) == 2
        assert lines[0].exc_info is not None


def test_log_lines_below_the_loggers_level_take_no_token() -> None:
    log = LimitedLog(LogLimit(burst=1, interval=60.0), logging.getLogger("poise_py.test_quiet"))
    log.logger.setLevel(logging.WARNING)
    assert not log.log(logging.DEBUG, "k", 0.0, "quiet")
    assert len(log.limiter) == 0
    assert log.log(logging.WARNING, "k", 0.0, "loud")
    assert not log.log(logging.WARNING, "k", 0.0, "loud again")


def test_the_limiter_forgets_the_least_recently_used_key_past_max_keys() -> None:
    limiter = RateLimiter(LogLimit(burst=1, interval=60.0, max_keys=2))
    assert limiter.allow("a", 0.0) == 0
    assert limiter.allow("b", 0.0) == 0
    assert limiter.allow("a", 0.0) is None  # a is now the most recent
    assert limiter.allow("c", 0.0) == 0  # evicts b
    assert len(limiter) == 2
    assert limiter.allow("b", 0.0) == 0  # b starts afresh


@given(
    gaps=st.lists(st.floats(min_value=0.0, max_value=30.0, allow_nan=False), min_size=1, max_size=200),
    burst=st.integers(min_value=1, max_value=5),
)
def test_the_limiter_never_lets_more_than_burst_plus_rate_times_window_through(gaps: list[float], burst: int) -> None:
    interval = 60.0
    limiter = RateLimiter(LogLimit(burst=burst, interval=interval))
    now = 0.0
    passed: list[float] = []
    for gap in gaps:
        now += gap
        if limiter.allow("k", now) is not None:
            passed.append(now)
    rate = burst / interval
    for i, start in enumerate(passed):
        for j in range(i, len(passed)):
            window = passed[j] - start
            assert j - i + 1 <= burst + window * rate + 1e-9


@pytest.mark.parametrize(
    ("kwargs", "knob"),
    [
        ({"burst": 0}, "LogLimit.burst"),
        ({"interval": -1.0}, "LogLimit.interval"),
        ({"max_keys": True}, "LogLimit.max_keys"),
    ],
)
def test_invalid_log_limits_raise_config_error(kwargs: dict[str, object], knob: str) -> None:
    with pytest.raises(poise.ConfigError) as info:
        poise.LogLimit(**kwargs)  # type: ignore[arg-type]
    assert info.value.knob == knob


def test_invalid_balancer_telemetry_knobs_raise_config_error() -> None:
    with pytest.raises(poise.ConfigError) as info:
        static_lb("a", no_eligible_alert_after=-1.0)
    assert info.value.knob == "no_eligible_alert_after"
    with pytest.raises(poise.ConfigError) as info:
        static_lb("a", log_limit={"burst": 1})
    assert info.value.knob == "log_limit"


# -- the no-eligible alert -----------------------------------------------------------


async def test_one_empty_result_at_start_up_does_not_alert(clock: FakeClock) -> None:
    send, receive = anyio.create_memory_object_stream[poise.Update](10)
    lb = poise.LoadBalancer(receive, clock=clock, no_eligible_alert_after=5.0)
    stream = lb.events()
    async with lb, send, receive:
        with pytest.raises(poise.EmptyPool):
            lb.acquire()
        await send.send(poise.Snapshot(1, endpoints("a")))
        await anyio.wait_all_tasks_blocked()
        clock.advance(60.0)
        async with lb.acquire():
            pass
        stats = lb.statistics()
        assert stats.pool.failed_selections == 1
        assert stats.pool.no_eligible_alerts == 0
    assert not any(isinstance(e, poise.NoEligiblePersisting) for e in await drain(stream))


async def test_no_eligible_alerts_once_when_it_persists_and_clears_when_calls_succeed(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    async with static_lb("a", circuit=TRIP_AT_ONCE, clock=clock, no_eligible_alert_after=5.0) as lb:
        stream = lb.events()
        await strike(lb)
        with caplog.at_level(logging.ERROR, logger="poise_py"):
            for _ in range(20):  # 20 refusals over 9.5 s
                with pytest.raises(poise.NoEligibleEndpoints):
                    lb.acquire()
                clock.advance(0.5)
        alerts = [e for e in await drain(stream) if isinstance(e, poise.NoEligiblePersisting)]
        assert len(alerts) == 1
        (alert,) = alerts
        assert alert.since == 1000.0
        assert alert.at >= alert.since + 5.0
        assert alert.reasons[poise.IneligibleReason.OPEN] == 1
        assert alert.total == 1
        assert isinstance(alert.error, poise.NoEligibleEndpoints)
        assert any("no eligible endpoints" in r.getMessage() for r in caplog.records)
        clock.advance(30.0)
        async with lb.acquire():
            pass  # the probe succeeds
        await anyio.wait_all_tasks_blocked()  # the balancer's timer looks at the episode
        stats = lb.statistics()
        assert stats.pool.no_eligible_alerts == 1
        cleared = [e for e in await drain(stream) if isinstance(e, poise.NoEligibleCleared)]
        assert len(cleared) == 1
        assert cleared[0].since == 1000.0


async def test_refusals_far_apart_are_separate_episodes_not_one_long_outage(clock: FakeClock) -> None:
    send, receive = anyio.create_memory_object_stream[poise.Update](10)
    lb = poise.LoadBalancer(receive, clock=clock, no_eligible_alert_after=5.0)
    stream = lb.events()
    async with lb, send, receive:
        with pytest.raises(poise.EmptyPool):
            lb.acquire()
        clock.advance(60.0)
        with pytest.raises(poise.EmptyPool):
            lb.acquire()
        assert not any(isinstance(e, poise.NoEligiblePersisting) for e in await drain(stream))


async def test_excluding_every_endpoint_is_not_a_pool_outage(clock: FakeClock) -> None:
    async with static_lb("a", clock=clock, no_eligible_alert_after=1.0) as lb:
        for _ in range(10):
            with pytest.raises(poise.NoEligibleEndpoints):
                lb.acquire(exclude=["a"])
            clock.advance(1.0)
        # nine refusals past no_eligible_alert_after, and no alert: no episode was open
        assert lb.statistics().pool.no_eligible_alerts == 0
        assert lb.statistics().pool.failed_selections == 10


async def test_the_alert_can_be_disabled(clock: FakeClock) -> None:
    async with static_lb("a", circuit=TRIP_AT_ONCE, clock=clock, no_eligible_alert_after=None) as lb:
        await strike(lb)
        for _ in range(10):
            with pytest.raises(poise.NoEligibleEndpoints):
                lb.acquire()
            clock.advance(2.0)
        assert lb.statistics().pool.no_eligible_alerts == 0
        assert lb.statistics().pool.failed_selections == 10


@pytest.mark.backends("trio")
async def test_the_alert_fires_on_time_even_when_callers_stop_calling() -> None:
    async with static_lb("a", circuit=TRIP_AT_ONCE, no_eligible_alert_after=5.0) as lb:
        stream = lb.events()
        await strike(lb)
        start = anyio.current_time()
        with pytest.raises(poise.NoEligibleEndpoints):
            lb.acquire()
        await anyio.sleep(4.0)
        assert lb.statistics().pool.no_eligible_alerts == 0
        await anyio.sleep(2.0)
        alerts = [e for e in await drain(stream) if isinstance(e, poise.NoEligiblePersisting)]
        assert len(alerts) == 1
        assert 5.0 <= alerts[0].at - start <= 6.0
        await anyio.sleep(30.0)  # the circuit half-opens: capacity is back, nobody refused
        assert any(isinstance(e, poise.NoEligibleCleared) for e in await drain(stream))
        await anyio.sleep(30.0)  # the episode closed: nothing more to alert about
        assert lb.statistics().pool.no_eligible_alerts == 1
        assert not any(isinstance(e, poise.NoEligiblePersisting) for e in await drain(stream))


@pytest.mark.backends("trio")
async def test_discovery_arriving_soon_after_start_up_closes_the_episode_silently() -> None:
    send, receive = anyio.create_memory_object_stream[poise.Update](10)
    lb = poise.LoadBalancer(receive, no_eligible_alert_after=5.0)
    stream = lb.events()
    async with lb, send, receive:
        with pytest.raises(poise.EmptyPool):
            lb.acquire()
        await anyio.sleep(0.5)
        await send.send(poise.Snapshot(1, endpoints("a")))
        await anyio.sleep(10.0)  # twice no_eligible_alert_after: an episode still open would have alerted
        assert lb.statistics().pool.no_eligible_alerts == 0
    assert not any(isinstance(e, poise.NoEligiblePersisting) for e in await drain(stream))


# -- active health -------------------------------------------------------------------


@pytest.mark.backends("trio")
async def test_active_health_verdicts_emit_ejected_and_readmitted_without_a_cause() -> None:
    broken = {"a"}

    async def probe(endpoint: poise.Endpoint) -> None:
        if endpoint.id in broken:
            raise ConnectionRefusedError(endpoint.id)

    check = poise.HealthCheck(
        probe=probe, interval=1.0, timeout=0.5, healthy_threshold=1, unhealthy_threshold=1, jitter=0.0
    )
    lb = poise.LoadBalancer(poise.StaticDiscovery(endpoints("a", "b")), health_check=check)
    async with lb:
        stream = lb.events()
        await anyio.sleep(3.0)
        broken.clear()
        await anyio.sleep(3.0)
        events = [e for e in await drain(stream) if isinstance(e, poise.EndpointEjected | poise.EndpointReadmitted)]
    assert [(type(e), e.endpoint_id, e.cause) for e in events] == [
        (poise.EndpointEjected, "a", None),
        (poise.EndpointReadmitted, "a", None),
    ]
