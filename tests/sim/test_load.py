"""The simulator under load: capacity, queues, timeouts at the deadline, and the load scenarios' goals."""

from __future__ import annotations

import functools
import math
from typing import Any

import attrs
import httpx
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from rich.console import Console

import poise_py as poise
from poise_py import sim
from poise_py.cli import main
from poise_py.sim._observe import Overloaded, Protocol, Throttled, exception_for
from poise_py.sim._report import LEGEND, render_table
from poise_py.sim._station import Admission, Station


@functools.cache
def builtin_report(name: str) -> sim.Report:
    """One run of a built-in scenario per test session (the simulator is deterministic)."""
    return sim.run(sim.load_scenario(name))


def by_name(report: sim.Report) -> dict[str, sim.RunResult]:
    return {r.configuration: r for r in report.results}


def one_endpoint(*, rps: float, duration: float, endpoint: dict[str, Any], attempts: int = 1) -> sim.Scenario:
    """A scenario of one endpoint, with a constant service time when median == p99."""
    return sim.parse_scenario(
        {
            "name": "queue",
            "seed": 11,
            "traffic": {"rps": rps, "duration": duration, "timeout": 1.0, "attempts": attempts},
            "endpoints": [{"id": "only", **endpoint}],
        }
    )


NAIVE = "naive round-robin"
ORACLE = "shortest-queue oracle"
DEFAULT = "poise_py default"

# -- the station: slots and a FIFO queue ---------------------------------------------------


def test_a_station_serves_up_to_its_capacity_and_queues_the_rest_in_arrival_order() -> None:
    station: Station[str] = Station()
    assert [station.arrive(c, 2, None) for c in "abcd"] == [
        Admission.SERVE,
        Admission.SERVE,
        Admission.QUEUE,
        Admission.QUEUE,
    ]
    assert station.in_system == 4
    station.depart()
    assert station.start_waiting(2) == ["c"]
    station.depart()
    station.depart()
    assert station.start_waiting(2) == ["d"]
    assert station.peak == 2


def test_a_full_queue_sheds_the_call_and_keeps_what_it_holds() -> None:
    station: Station[str] = Station()
    assert station.arrive("a", 1, 1) is Admission.SERVE
    assert station.arrive("b", 1, 1) is Admission.QUEUE
    assert station.arrive("c", 1, 1) is Admission.SHED
    assert list(station.waiting) == ["b"]
    assert station.arrive("d", 1, 0) is Admission.SHED  # max_queue = 0: no waiting at all


def test_a_raised_capacity_starts_waiting_calls_without_a_departure() -> None:
    station: Station[int] = Station()
    for call in range(4):
        station.arrive(call, 1, None)
    assert station.start_waiting(3) == [1, 2]
    assert station.busy == 3


class StationMachine(RuleBasedStateMachine):
    """Whatever arrives, departs or is resized: slots never exceed capacity, FIFO holds, nothing is lost."""

    def __init__(self) -> None:
        super().__init__()
        self.station: Station[int] = Station()
        self.capacity = 2
        self.max_queue: int | None = 3
        self.next = 0
        self.in_service: list[int] = []
        self.shed: list[int] = []
        self.done: list[int] = []

    @rule()
    def arrive(self) -> None:
        call, self.next = self.next, self.next + 1
        admission = self.station.arrive(call, self.capacity, self.max_queue)
        if admission is Admission.SERVE:
            self.in_service.append(call)
        elif admission is Admission.SHED:
            self.shed.append(call)

    @precondition(lambda self: self.in_service)
    @rule(data=st.data())
    def depart(self, data: st.DataObject) -> None:
        call = data.draw(st.sampled_from(self.in_service))
        self.in_service.remove(call)
        self.done.append(call)
        self.station.depart()
        self.in_service += self.station.start_waiting(self.capacity)

    @rule(capacity=st.integers(min_value=1, max_value=4), max_queue=st.none() | st.integers(0, 4))
    def resize(self, capacity: int, max_queue: int | None) -> None:
        self.capacity, self.max_queue = capacity, max_queue
        self.in_service += self.station.start_waiting(capacity)

    @invariant()
    def slots_match_the_calls_in_service(self) -> None:
        assert self.station.busy == len(self.in_service)
        assert not self.station.waiting or self.station.busy >= self.capacity or not self.in_service

    @invariant()
    def every_call_is_in_exactly_one_place(self) -> None:
        waiting = list(self.station.waiting)
        places = sorted([*waiting, *self.in_service, *self.shed, *self.done])
        assert places == list(range(self.next))

    @invariant()
    def waiting_calls_keep_their_arrival_order(self) -> None:
        waiting = list(self.station.waiting)
        assert waiting == sorted(waiting)
        assert self.station.peak >= len(waiting)


TestStationMachine = StationMachine.TestCase
TestStationMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


# -- the endpoint model --------------------------------------------------------------------


def test_a_phase_can_resize_an_endpoint_and_a_return_starts_cold() -> None:
    model = sim.EndpointModel(
        "e",
        capacity=8,
        warmup=sim.Warmup(duration=40.0, capacity=0.25),
        phases=(
            sim.Phase(start=0),
            sim.Phase(start=10, capacity=2),
            sim.Phase(start=20, error_rate=1.0, error=sim.Refused()),
            sim.Phase(start=30),
        ),
    )
    assert model.capacity_at(5) == 8
    assert model.capacity_at(15) == 2  # the phase's own capacity
    assert model.returns() == [30]
    assert model.capacity_at(30) == 2  # back cold: a quarter of 8
    assert model.capacity_at(50) == 5  # half-way: 0.25 + 0.75 * 0.5 = 0.625 of 8
    assert model.capacity_at(70) == 8
    steps = model.warmup_steps()
    assert steps[0] > 30
    assert steps[-1] == pytest.approx(70)


def test_an_endpoint_that_joins_late_starts_cold_and_one_present_from_the_start_does_not() -> None:
    late = sim.EndpointModel("late", capacity=4, joins_at=100.0, warmup=sim.Warmup(duration=10.0, capacity=0.5))
    assert late.returns() == [100.0]
    assert late.capacity_at(100.0) == 2
    first = sim.EndpointModel("first", capacity=4, warmup=sim.Warmup(duration=10.0, capacity=0.5))
    assert first.returns() == []
    assert first.capacity_at(0.0) == 4


def test_a_quota_answers_429_with_its_reset_and_headers_until_the_window_turns() -> None:
    model = sim.EndpointModel("p", quota=sim.Quota(requests=2, per=60.0)).fresh()
    assert model.respond(1.0, 0.5, 0.9).error is None
    assert model.respond(2.0, 0.5, 0.9).error is None
    refusal = model.respond(45.5, 0.5, 0.9).error
    assert refusal == sim.Throttled(
        retry_after=15.0,
        headers=(("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-reset-requests", "15s")),
    )
    assert model.respond(60.0, 0.5, 0.9).error is None  # a new minute


def test_a_quota_refusal_is_the_client_librarys_429_and_the_http_preset_reads_its_retry_after() -> None:
    refusal = Throttled(retry_after=15.0, headers=(("x-ratelimit-remaining-requests", "0"),))
    exc = exception_for(refusal, Protocol.HTTP)
    assert isinstance(exc, httpx.HTTPStatusError)
    assert exc.response.status_code == 429
    assert exc.response.headers["x-ratelimit-remaining-requests"] == "0"
    assert poise.classify.http()(exc) == poise.Classification(poise.Fault.TRANSIENT, retry_after=15.0)


def test_a_shed_call_is_the_protocols_overload_status() -> None:
    http = exception_for(Overloaded(), Protocol.HTTP)
    assert isinstance(http, httpx.HTTPStatusError)
    assert http.response.status_code == 503
    grpc = exception_for(Overloaded(retry_after=2.0), Protocol.GRPC)
    assert grpc.code().name == "UNAVAILABLE"  # type: ignore[attr-defined]
    assert isinstance(exception_for(Overloaded(), Protocol.PLAIN), ConnectionRefusedError)


@pytest.mark.parametrize(
    ("endpoint", "knob"),
    [
        ({"capacity": 0}, "endpoints[0].capacity"),
        ({"capacity": 2.5}, "endpoints[0].capacity"),
        ({"max_queue": 4}, "endpoints[0].max_queue"),
        ({"capacity": 2, "max_queue": -1}, "endpoints[0].max_queue"),
        ({"warmup": {"duration": 10}}, "endpoints[0].warmup"),
        ({"capacity": 2, "warmup": {"capacity": 0.5}}, "endpoints[0].warmup.duration"),
        ({"capacity": 2, "warmup": {"duration": 10, "capacity": 1.5}}, "endpoints[0].warmup.capacity"),
        ({"capacity": 2, "overload": {"retry_after": 1}}, "endpoints[0].overload"),
        ({"capacity": 2, "overload": {"http": 200}}, "endpoints[0].overload.http"),
        ({"quota": {"per": 60}}, "endpoints[0].quota.requests"),
        ({"quota": {"requests": 0}}, "endpoints[0].quota.requests"),
        ({"phases": [{"start": 0, "capacity": 0}]}, "endpoints[0].phases[0].capacity"),
    ],
)
def test_every_load_field_is_validated_naming_its_table_and_field(endpoint: dict[str, Any], knob: str) -> None:
    doc = {"name": "t", "endpoints": [{"id": "a", **endpoint}]}
    with pytest.raises(poise.ConfigError) as info:
        sim.parse_scenario(doc)
    assert info.value.knob.startswith(knob), info.value.knob


# -- the engine: a call's latency is its wait plus its service time -------------------------


def test_without_a_capacity_nothing_queues_and_the_load_baselines_stay_out() -> None:
    scenario = one_endpoint(rps=50, duration=20, endpoint={"latency": {"median": 0.1, "p99": 0.1}})
    assert not scenario.loaded
    report = sim.run(scenario)
    assert [r.configuration for r in report.results] == [c.name for c in sim.default_configurations()]
    naive = by_name(report)[NAIVE]
    assert naive.peak_queue == 0
    assert naive.all_latencies_p99 == pytest.approx(0.1)  # 50 calls a second, none waits


def test_an_endpoint_below_capacity_serves_most_calls_without_waiting_and_the_rest_after_a_wait() -> None:
    # M/D/1 at 40% load: a call finds the server idle with probability 1 - 0.4.
    scenario = one_endpoint(rps=4, duration=2000, endpoint={"capacity": 1, "latency": {"median": 0.1, "p99": 0.1}})
    naive = by_name(sim.run(scenario))[NAIVE]
    assert naive.success_rate == 1.0
    assert naive.all_latencies_p50 == pytest.approx(0.1)
    assert naive.all_latencies_p99 is not None
    assert naive.all_latencies_p99 > 0.2  # waited for a call or more
    assert naive.peak_queue >= 2


def test_a_full_queue_sheds_what_erlangs_loss_formula_says() -> None:
    # One slot, no queue, offered 0.5 Erlang: B(1, 0.5) = 0.5 / 1.5 of calls find it busy.
    scenario = one_endpoint(
        rps=5, duration=4000, endpoint={"capacity": 1, "max_queue": 0, "latency": {"median": 0.1, "p99": 0.1}}
    )
    naive = by_name(sim.run(scenario))[NAIVE]
    assert naive.success_rate == pytest.approx(2 / 3, abs=0.015)
    assert naive.peak_queue == 0


def test_an_overloaded_endpoint_times_out_at_the_deadline_and_still_serves_abandoned_calls() -> None:
    scenario = one_endpoint(rps=10, duration=60, endpoint={"capacity": 1, "latency": {"median": 0.3, "p99": 0.3}})
    naive = by_name(sim.run(scenario))[NAIVE]
    # It serves about 3.3 calls a second of 10: the first few, then the queue outgrows the deadline.
    assert naive.success_rate < 0.05
    assert naive.all_latencies_p99 == pytest.approx(1.0)  # a timeout counts at its deadline
    assert naive.all_latencies_p999 == pytest.approx(1.0)
    # Served in turn, abandoned or not: the queue holds nearly every call that arrived.
    assert naive.peak_queue > 0.9 * (naive.requests - 60 / 0.3)
    assert naive.goodput == pytest.approx(naive.successes / 60)


def test_a_shed_call_is_retried_elsewhere_and_counts_as_extra_load() -> None:
    scenario = sim.parse_scenario(
        {
            "name": "two",
            "seed": 3,
            "traffic": {"rps": 20, "duration": 200, "timeout": 1.0, "attempts": 2},
            "endpoints": [
                {"id": "tiny", "capacity": 1, "max_queue": 0, "latency": {"median": 0.2, "p99": 0.2}},
                {"id": "big", "capacity": 100, "latency": {"median": 0.2, "p99": 0.2}},
            ],
        }
    )
    naive = by_name(sim.run(scenario))[NAIVE]
    assert naive.success_rate > 0.99  # a shed call's retry goes to "big", within the retry budget
    assert 0 < naive.extra_load < 1
    assert naive.backend_calls == naive.requests + round(naive.extra_load * naive.requests)
    assert sum(naive.endpoint_calls) == naive.backend_calls
    assert sum(naive.shares) == pytest.approx(1.0)


def test_queues_never_change_the_traffic_every_configuration_sees() -> None:
    report = builtin_report("heterogeneous-pool")
    assert len({r.requests for r in report.results}) == 1
    names = [r.configuration for r in report.results]
    assert names[names.index(ORACLE) - 1 :] == ["uniform random", ORACLE, "poise_py + load reports"]


# -- the load scenarios' goals ---------------------------------------------------------------


def test_heterogeneous_pool_default_p99_is_within_one_and_a_half_of_the_oracle_and_a_quarter_of_round_robin() -> None:
    results = by_name(builtin_report("heterogeneous-pool"))
    ours, oracle, naive = results[DEFAULT], results[ORACLE], results[NAIVE]
    assert ours.all_latencies_p99 is not None
    assert oracle.all_latencies_p99 is not None
    assert naive.all_latencies_p99 is not None
    assert ours.all_latencies_p99 <= 1.5 * oracle.all_latencies_p99
    assert ours.all_latencies_p99 <= naive.all_latencies_p99 / 4
    for name, other in results.items():
        if name != ORACLE:
            assert ours.success_rate >= other.success_rate, name
    # Splitting calls evenly overloads the two small backends: their queues run away.
    assert naive.success_rate < 0.75
    assert min(naive.peak_queues[:2]) > 100
    assert oracle.success_rate == 1.0


def test_heterogeneous_pool_breakers_that_count_queueing_timeouts_as_faults_turn_overload_into_an_outage() -> None:
    results = by_name(builtin_report("heterogeneous-pool"))
    for name in ("first-strike eviction", "constant-window breaker"):
        assert results[name].success_rate < results[NAIVE].success_rate / 2, name
        assert results[name].spurious_ejections > 0, name


def gray_windows(result: sim.RunResult) -> tuple[float, list[sim.Sample]]:
    """The healthy pool's p99 (the worst sample before the onset) and the samples after the onset."""
    onset = 60.0
    healthy = max(s.latency_p99 for s in result.timeline if 0 < s.at <= onset and s.latency_p99 is not None)
    return healthy, [s for s in result.timeline if onset < s.at <= 360.0]


def test_gray_failure_default_keeps_success_and_brings_p99_back_within_thirty_seconds_of_the_onset() -> None:
    scenario = sim.load_scenario("gray-failure")
    assert scenario.fault_windows() == [(60.0, 360.0, "g6")]
    results = by_name(builtin_report("gray-failure"))
    ours = results[DEFAULT]
    assert ours.success_rate >= 0.999
    healthy, after = gray_windows(ours)
    back = [s for s in after if s.at <= 90.0 and s.latency_p99 is not None and s.latency_p99 <= 2 * healthy]
    assert back, [(s.at, s.latency_p99) for s in after if s.at <= 90.0]
    # A policy blind to load never gets its p99 back while g6 is slow.
    naive_healthy, naive_after = gray_windows(results[NAIVE])
    assert all(s.latency_p99 is not None and s.latency_p99 > 2 * naive_healthy for s in naive_after[2:])
    assert "g6" in ours.ejected


def test_recovering_endpoint_without_slow_start_takes_a_burst_in_its_first_ten_seconds_back() -> None:
    results = by_name(builtin_report("recovering-endpoint"))
    ours = results[DEFAULT]
    assert ours.success_rate == 1.0
    cold_capacity = 1  # a quarter of 4 when it is back
    # The slow-start goal (at most twice its capacity) is not met without slow start.
    assert ours.return_peak_queues["r6"] > 2 * cold_capacity
    # A balancer blind to load sends it a sixth of the calls at once: its queue runs away.
    assert results[NAIVE].return_peak_queues["r6"] > 10 * ours.return_peak_queues["r6"]


def test_recovering_endpoint_with_slow_start_takes_at_most_twice_its_capacity_and_a_third_of_the_burst() -> None:
    results = by_name(builtin_report("recovering-endpoint"))
    slow = results["poise_py, slow start"]
    ours = results[DEFAULT]
    assert slow.success_rate == 1.0
    cold_capacity = 1
    assert slow.return_peak_queues["r6"] <= 2 * cold_capacity
    assert slow.return_peak_queues["r6"] <= ours.return_peak_queues["r6"] / 3
    assert slow.all_latencies_p999 is not None
    assert ours.all_latencies_p999 is not None
    assert slow.all_latencies_p999 < ours.all_latencies_p999


def test_llm_rate_limits_providers_answer_429_with_their_quota_headers_and_the_fallback_queues() -> None:
    results = by_name(builtin_report("llm-rate-limits"))
    ours = results[DEFAULT]
    assert 0.9 < ours.success_rate < 1.0
    assert ours.peak_queues[2] > 8  # the fallback tier queues when both providers wait out a reset
    assert ours.shares[2] > results[NAIVE].shares[2]


def test_overload_at_twice_capacity_a_fixed_cap_serves_what_the_pool_can_and_no_limit_serves_almost_nothing() -> None:
    results = by_name(builtin_report("overload"))
    most = 0.5  # offered twice the capacity: half the requests at most can be served
    capped = results["poise_py, max_in_flight 8"]
    assert 0.9 * most <= capped.success_rate <= most + 0.01
    assert capped.all_latencies_p99 is not None
    assert capped.all_latencies_p99 < 1.0  # what it admits is served in time; the rest is shed at once
    for name in (DEFAULT, NAIVE, "uniform random", ORACLE):
        assert results[name].success_rate < 0.1, name  # every queue grows until its calls time out
    # Adaptive limits with their defaults shed some of it and serve more than no limit, but
    # far from what a fixed cap serves.
    for name in ("poise_py, Gradient2", "poise_py, AIMD"):
        assert results[DEFAULT].success_rate < results[name].success_rate < capped.success_rate, name
    # AIMD given a latency target (a window of twenty calls slower than 1.1x the unloaded
    # mean is a drop) learns the capacity it was never told: at least 90% of what the pool
    # can serve, and what it admits keeps its p99 within 2x the unloaded p99 (0.2 s).
    target = results["poise_py, AIMD, latency target"]
    capacity = 28 / 0.1045  # calls a second: 28 slots, 104.5 ms mean service time
    assert target.goodput >= 0.9 * capacity
    assert target.success_rate >= 0.9 * most
    assert target.latencies_p99 is not None
    assert target.latencies_p99 <= 2 * 0.2
    assert max(target.peak_queues) <= 8


def test_overload_an_adaptive_limit_with_a_latency_target_settles_within_a_quarter_of_each_capacity() -> None:
    results = by_name(builtin_report("overload"))
    capacities = (2, 2, 4, 4, 8, 8)
    target = results["poise_py, AIMD, latency target"]
    learned = target.mean_limits()  # from 30 s on: the goal gives the limits 30 s to learn
    assert target.endpoint_ids == ("s1", "s2", "m1", "m2", "l1", "l2")
    for endpoint_id, limit, capacity in zip(target.endpoint_ids, learned, capacities, strict=True):
        assert limit is not None
        assert 0.75 * capacity <= limit <= 1.25 * capacity, (endpoint_id, limit)
    # Netflix's defaults learn no capacity here: no latency target, and Gradient2's long
    # average takes the queued latency as its baseline (docs/overload.md).
    for name in ("poise_py, Gradient2", "poise_py, AIMD"):
        limits = results[name].mean_limits()
        assert all(
            limit is not None and limit > 2 * capacity for limit, capacity in zip(limits, capacities, strict=True)
        )
    # A configuration without an adaptive limit has none to show.
    assert results["poise_py, max_in_flight 8"].mean_limits() == (None,) * 6


def test_the_table_says_what_each_adaptive_limit_learned_against_its_capacity() -> None:
    console = Console(width=400, record=True)
    render_table(builtin_report("overload"), console)
    text = console.export_text()
    (line,) = [t for t in text.splitlines() if t.startswith("poise_py, AIMD, latency target: limits learned")]
    assert "mean from 30 s: s1 " in line
    assert line.count("(capacity ") == 6
    assert "l2 " in line
    assert "max_in_flight 8: limits learned" not in text  # a fixed cap learns nothing


def test_json_carries_every_load_outcome() -> None:
    data = builtin_report("heterogeneous-pool").to_json()
    assert data["loaded"] is True
    row = data["results"][0]
    for key in (
        "goodput",
        "latency_p999",
        "all_latency_p50",
        "all_latency_p99",
        "all_latency_p999",
        "extra_load",
        "peak_queue",
        "return_peak_queues",
        "mean_readmit_seconds",
    ):
        assert key in row, key
    assert [e["id"] for e in row["endpoints"]] == ["s1", "s2", "m1", "m2", "l1", "l2"]
    assert [e["limit"] for e in row["endpoints"]] == [None] * 6  # no adaptive limit in the default
    assert sum(e["share"] for e in row["endpoints"]) == pytest.approx(1.0)
    assert math.isfinite(row["goodput"])


def test_the_table_has_its_legend_under_it(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = sim.load_scenario("heterogeneous-pool")
    short = attrs.evolve(scenario, traffic=attrs.evolve(scenario.traffic, duration=5.0))
    console = Console(width=200, record=True)
    render_table(sim.run(short), console)
    text = console.export_text()
    assert " ".join(text.split()).endswith(" ".join(LEGEND.split()))  # the legend, wrapped to the width
    assert "goodput" in text
    assert main(["simulate", "--list"]) == 0
    assert "heterogeneous-pool" in capsys.readouterr().out
