"""The status page's pure parts: per-endpoint call figures and the coalescing event log (time injected)."""

from __future__ import annotations

import math
import random

import pytest

import poise_py as poise
from poise_py.contrib._status_events import EventLog
from poise_py.contrib._status_history import (
    HISTORY_SECONDS,
    LATENCY_BINS,
    MAX_LATENCY,
    MIN_HISTORY_STEP,
    MIN_LATENCY,
    CallRecorder,
    bin_value,
    latency_bin,
    percentile,
)

BIN_ERROR = 2 ** (1 / 16) - 1
"""The most a bin's middle can be off any latency in the bin, relatively (4.4 %)."""


def _ended(
    endpoint: str, duration: float, fault: poise.Fault | None = None, *, cancelled: bool = False
) -> poise.CallEnded:
    return poise.CallEnded(
        endpoint=poise.Endpoint(endpoint), fault=fault, cancelled=cancelled, duration=duration, probe=False
    )


def _exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


# -- percentiles ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_percentiles_are_within_a_bins_error_of_the_exact_nearest_rank(seed: int) -> None:
    draw = random.Random(seed)
    values = [draw.lognormvariate(math.log(0.02), 1.2) for _ in range(draw.randint(1, 3000))]
    histogram: dict[int, int] = {}
    for v in values:
        histogram[latency_bin(v)] = histogram.get(latency_bin(v), 0) + 1
    for q in (0.5, 0.9, 0.99, 1.0):
        got = percentile(histogram, q)
        assert got is not None
        assert got == pytest.approx(_exact(values, q), rel=BIN_ERROR + 1e-9)


def test_a_window_of_evenly_spread_latencies_has_the_expected_p50_and_p99() -> None:
    recorder = CallRecorder(step=1.0)
    for i in range(1, 1001):
        recorder.record(100.0 + i / 1000, _ended("a", i / 1000))  # 1 ms ... 1 s
    window = recorder.window(101.0, "a")
    assert window.calls == 1000
    assert window.p50 == pytest.approx(0.5, rel=BIN_ERROR)
    assert window.p99 == pytest.approx(0.99, rel=BIN_ERROR)


def test_latencies_outside_the_bins_land_in_the_end_bins() -> None:
    assert latency_bin(0.0) == latency_bin(-1.0) == latency_bin(math.nan) == latency_bin(MIN_LATENCY / 10)
    assert latency_bin(MAX_LATENCY * 1000) == latency_bin(MAX_LATENCY)
    assert bin_value(latency_bin(1.0)) == pytest.approx(1.0, rel=BIN_ERROR)


def test_an_empty_histogram_has_no_percentile() -> None:
    assert percentile({}, 0.5) is None


# -- the last minute --------------------------------------------------------------------


def test_success_rate_counts_outcomes_and_cancellations_count_only_as_calls() -> None:
    recorder = CallRecorder(step=1.0)
    for duration in (0.01, 0.02, 0.03):
        recorder.record(10.0, _ended("a", duration))
    recorder.record(10.0, _ended("a", 5.0, poise.Fault.TRANSIENT))
    recorder.record(10.0, _ended("a", 100.0, cancelled=True))  # its duration is no latency
    window = recorder.window(10.5, "a")
    assert (window.calls, window.successes, window.faults) == (5, 3, 1)
    assert window.success_rate == 0.75
    assert window.p99 == pytest.approx(5.0, rel=BIN_ERROR)


def test_the_minute_window_rolls_over_second_by_second() -> None:
    recorder = CallRecorder(step=1.0)
    for _ in range(10):
        recorder.record(1000.2, _ended("a", 0.1))
    for _ in range(5):
        recorder.record(1030.7, _ended("a", 0.2))
    assert recorder.window(1030.7, "a").calls == 15
    assert recorder.window(1059.9, "a").calls == 15  # 1000 is still one of the last 60 seconds
    assert recorder.window(1060.0, "a").calls == 5  # now it is not
    assert recorder.window(1060.0, "a").p50 == pytest.approx(0.2, rel=BIN_ERROR)
    assert recorder.window(1090.0, "a").calls == 0
    assert recorder.window(1090.0, "a").success_rate is None
    assert recorder.window(1090.0, "a").p99 is None


def test_a_reused_second_forgets_what_it_held_a_minute_ago() -> None:
    recorder = CallRecorder(step=1.0)
    recorder.record(1000.5, _ended("a", 0.1, poise.Fault.FATAL))
    recorder.record(1060.5, _ended("a", 0.3))  # the same slot of the ring, a minute on
    window = recorder.window(1060.5, "a")
    assert (window.calls, window.faults, window.successes) == (1, 0, 1)
    assert window.p50 == pytest.approx(0.3, rel=BIN_ERROR)


def test_the_rate_is_over_the_time_watched_until_a_minute_has_passed() -> None:
    recorder = CallRecorder(step=1.0)
    recorder.observe(500.0)
    for i in range(20):
        recorder.record(500.0 + i / 2, _ended("a", 0.01))
    assert recorder.window(510.0, "a").rate == pytest.approx(2.0)  # 20 calls in 10 s
    assert recorder.window(559.0, "a").rate == pytest.approx(20 / 59)
    assert recorder.window(575.0, "a").rate == 0.0  # the calls were more than a minute ago


def test_the_balancer_total_merges_every_endpoint() -> None:
    recorder = CallRecorder(step=1.0)
    for _ in range(99):
        recorder.record(10.0, _ended("a", 0.01))
    recorder.record(10.0, _ended("b", 2.0, poise.Fault.TRANSIENT))
    total = recorder.total(10.0)
    assert (total.calls, total.successes, total.faults) == (100, 99, 1)
    assert total.success_rate == 0.99
    assert total.p50 == pytest.approx(0.01, rel=BIN_ERROR)
    assert total.p99 == pytest.approx(0.01, rel=BIN_ERROR)  # the 99th of 100 is still fast
    assert recorder.window(10.0, "b").p99 == pytest.approx(2.0, rel=BIN_ERROR)


def test_a_reading_older_than_the_ring_is_dropped_and_harms_nothing() -> None:
    recorder = CallRecorder(step=1.0)
    recorder.record(2000.0, _ended("a", 0.1))
    recorder.record(1000.0, _ended("a", 9.0))  # a clock stepped back past the window
    window = recorder.window(2000.0, "a")
    assert window.calls == 1
    assert window.p99 == pytest.approx(0.1, rel=BIN_ERROR)


# -- memory ---------------------------------------------------------------------------


def test_memory_is_bounded_by_the_rings_whatever_the_call_rate() -> None:
    recorder = CallRecorder(step=MIN_HISTORY_STEP)
    draw = random.Random(7)
    now = 0.0
    for _ in range(200_000):
        now += draw.random() * 0.01  # about 1,000 seconds of calls
        recorder.record(now, _ended("a", draw.lognormvariate(-3, 3)))
    history = recorder.get("a")
    assert history is not None
    minute, steps = history._minute._buckets, history._history._buckets
    assert len(minute) == 60
    assert len(steps) == math.ceil(HISTORY_SECONDS / MIN_HISTORY_STEP)
    assert all(len(b.latencies) <= LATENCY_BINS for b in (*minute, *steps))
    assert recorder.window(now, "a").calls < 200_000 * 60 / 1000 * 1.2


def test_endpoints_idle_for_five_minutes_and_out_of_the_pool_are_forgotten() -> None:
    recorder = CallRecorder(step=1.0)
    recorder.record(0.0, _ended("gone", 0.1))
    recorder.record(0.0, _ended("kept", 0.1))
    recorder.record(HISTORY_SECONDS - 1, _ended("busy", 0.1))
    recorder.forget(HISTORY_SECONDS + 1, keep=["kept"])
    assert recorder.get("gone") is None
    assert recorder.get("kept") is not None  # still in the pool
    assert recorder.get("busy") is not None  # had a call within five minutes
    assert len(recorder) == 2


def test_a_new_endpoint_forgets_the_long_idle_ones_even_if_nobody_fetches_the_page() -> None:
    recorder = CallRecorder(step=1.0)
    for i in range(100):
        recorder.record(i * HISTORY_SECONDS * 2, _ended(f"e{i}", 0.1))  # discovery churn, no page open
    assert len(recorder) == 1


# -- history ----------------------------------------------------------------------------


def test_history_has_five_minutes_of_steps_with_rate_p99_and_the_worst_state() -> None:
    recorder = CallRecorder(step=2.0)
    recorder.note_state(1000.0, "a", poise.CircuitState.CLOSED)
    for _ in range(8):
        recorder.record(1000.5, _ended("a", 0.05))
    recorder.note_state(1003.0, "a", poise.CircuitState.OPEN)
    recorder.note_state(1003.5, "a", poise.CircuitState.HALF_OPEN)
    recorder.note_state(1006.1, "a", poise.CircuitState.CLOSED)
    points = recorder.points(1010.0, "a")
    assert len(points) == 150 - 1  # the step now is in is left out: it has not ended
    by_start = {p.start: p for p in points}
    assert by_start[1000.0].rate == 4.0  # 8 calls in a 2 s step
    assert by_start[1000.0].p99 == pytest.approx(0.05, rel=BIN_ERROR)
    assert by_start[1000.0].state is poise.CircuitState.CLOSED
    assert by_start[1002.0].state is poise.CircuitState.OPEN  # the worst it saw
    assert by_start[1004.0].state is poise.CircuitState.HALF_OPEN  # carried: it stayed half-open
    assert by_start[1004.0].rate == 0.0
    assert by_start[1004.0].p99 is None
    assert by_start[1006.0].state is poise.CircuitState.CLOSED
    assert by_start[1008.0].state is poise.CircuitState.CLOSED
    assert by_start[998.0].state is None  # before anything was seen
    assert points[-1].start == 1008.0


def test_before_any_state_is_noted_a_call_says_the_circuit_was_closed_or_half_open_for_a_probe() -> None:
    recorder = CallRecorder(step=2.0)
    recorder.record(10.0, _ended("a", 0.1))
    recorder.record(
        10.0, poise.CallEnded(endpoint=poise.Endpoint("p"), fault=None, cancelled=False, duration=0.1, probe=True)
    )
    recorder.note_state(12.5, "a", poise.CircuitState.OPEN)  # an event: it wins from here on
    recorder.record(14.5, _ended("a", 0.1))
    assert [p.state for p in recorder.points(16.0, "a")[-3:]] == [
        poise.CircuitState.CLOSED,
        poise.CircuitState.OPEN,
        poise.CircuitState.OPEN,
    ]
    assert recorder.points(12.0, "p")[-1].state is poise.CircuitState.HALF_OPEN


def test_history_keeps_only_the_last_five_minutes() -> None:
    recorder = CallRecorder(step=5.0)
    recorder.record(0.0, _ended("a", 0.1))
    recorder.record(HISTORY_SECONDS + 7.0, _ended("a", 0.1))
    points = recorder.points(HISTORY_SECONDS + 10.0, "a")
    assert len(points) == HISTORY_SECONDS / 5.0 - 1
    assert sum(p.rate for p in points) == pytest.approx(1 / 5.0)  # only the recent call
    assert points[0].start > 0.0


def test_an_endpoint_with_no_history_gets_empty_points_of_the_same_length() -> None:
    recorder = CallRecorder(step=3.0)
    points = recorder.points(99.0, "nobody")
    assert len(points) == 99
    assert all(p.rate == 0.0 and p.p99 is None and p.state is None for p in points)


def test_the_history_step_is_at_least_two_seconds() -> None:
    assert CallRecorder(step=0.1).step == MIN_HISTORY_STEP
    assert CallRecorder(step=10.0).step == 10.0


# -- the event log ------------------------------------------------------------------------


def _degraded(endpoint: str, at: float) -> poise.EndpointDegraded:
    return poise.EndpointDegraded(at=at, endpoint_id=endpoint, cause=None)


def _ended_degradation(endpoint: str, at: float) -> poise.EndpointDegradationEnded:
    return poise.EndpointDegradationEnded(at=at, endpoint_id=endpoint, ejected=False)


def test_degradation_flaps_of_one_endpoint_are_one_entry_with_a_count_and_first_and_last_time() -> None:
    log = EventLog(20)
    for i in range(7):
        log.add(_degraded("b", 10.0 + i))
        log.add(_ended_degradation("b", 10.5 + i))
    (entry,) = log.newest_first()
    assert entry.count == 14
    assert entry.first_at == 10.0
    assert entry.last.at == 16.5
    assert isinstance(entry.last, poise.EndpointDegradationEnded)
    assert entry.types == {"EndpointDegraded": 7, "EndpointDegradationEnded": 7}


def test_events_of_other_endpoints_or_kinds_stay_apart_and_a_repeat_moves_to_the_front() -> None:
    log = EventLog(20)
    log.add(_degraded("a", 1.0))
    log.add(_degraded("b", 2.0))
    log.add(poise.SlowStartBegan(at=3.0, endpoint_id="a"))
    log.add(_ended_degradation("a", 4.0))
    entries = list(log.newest_first())
    assert [(type(e.last).__name__, e.last.endpoint_id, e.count) for e in entries] == [  # type: ignore[attr-defined]
        ("EndpointDegradationEnded", "a", 2),
        ("SlowStartBegan", "a", 1),
        ("EndpointDegraded", "b", 1),
    ]


def test_the_log_keeps_at_most_size_entries_dropping_the_oldest() -> None:
    log = EventLog(3)
    for i in range(10):
        log.add(_degraded(f"e{i}", float(i)))
    assert len(log) == 3
    assert [e.last.endpoint_id for e in log.newest_first()] == ["e9", "e8", "e7"]  # type: ignore[attr-defined]
