"""The circuit's own CLOSED-success fast path, when it needs the time, and the pool's record being its tally."""

from __future__ import annotations

import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

import poise_py as poise
from poise_py import CircuitState, Fault
from poise_py._core._circuit import Circuit, Ticket
from poise_py._core._pool import Pool
from poise_py._core._tally import SATURATED, Tally

NOW = 100.0


def make(**knobs: object) -> Circuit:
    knobs.setdefault("escalation", poise.Escalation(jitter=0.0))
    return Circuit(poise.CircuitPolicy(**knobs), random.Random(0).random, NOW)  # type: ignore[arg-type]


def closed_ticket(c: Circuit) -> Ticket:
    got = c.try_acquire(NOW)
    assert isinstance(got, Ticket)
    return got


def test_a_closed_success_is_recorded_in_place_and_ends_the_failure_run() -> None:
    c = make()
    c.record(closed_ticket(c), Fault.SUSPECT, NOW)
    assert c.consecutive_failures == 1
    assert c.record_success(closed_ticket(c), NOW, NOW - 0.01)
    assert c.consecutive_failures == 0
    assert not c.success_needs_now  # the default circuit never needs the time for a success


def test_a_probe_or_a_stale_ticket_is_refused_by_the_fast_path_and_changes_nothing() -> None:
    c = make(consecutive_failures=1, minimum_volume=1)
    old = closed_ticket(c)
    c.record(closed_ticket(c), Fault.SUSPECT, NOW)
    assert c.state is CircuitState.OPEN
    assert c.success_needs_now  # not CLOSED: every outcome goes the long way, with the time
    assert not c.record_success(old, NOW, NOW - 0.01)
    assert c.stale_results == 0  # the fast path counted nothing; record() will
    c.handle_timer(NOW + 1000.0)
    probe = c.try_acquire(NOW + 1000.0)
    assert isinstance(probe, Ticket)
    assert probe.probe
    assert not c.record_success(probe, NOW + 1000.0, NOW + 1000.0 - 0.01)
    assert c.probes_in_flight == 1


def test_a_slow_success_is_left_to_record_and_a_fast_one_is_counted() -> None:
    c = make(slow_call_rate=0.5, slow_call_duration=1.0, minimum_volume=1)
    assert c.success_needs_now
    assert c.record_success(closed_ticket(c), NOW, NOW - 0.5)
    assert not c.record_success(closed_ticket(c), NOW, NOW - 2.0)
    assert c.window_counts(NOW) == (1, 0, 0)


def test_a_degraded_circuit_sends_every_success_the_long_way_until_it_recovers() -> None:
    c = make(consecutive_failures=1, minimum_volume=1)
    assert c.tally.counts_only  # no slow limit, no window: a success counts the volume only
    c.record(closed_ticket(c), Fault.SUSPECT, NOW, may_eject=False)  # a refused trip degrades
    assert c.degraded
    assert c.state is CircuitState.CLOSED
    assert not c.tally.counts_only
    assert not c.record_success(closed_ticket(c), NOW, NOW - 0.01)  # the long way, which can end it
    c.record(closed_ticket(c), None, NOW, latency=0.01)
    assert not c.degraded
    assert c.tally.counts_only
    assert c.record_success(closed_ticket(c), NOW, NOW - 0.01)


def test_a_time_window_needs_the_time_for_every_success() -> None:
    c = make(failure_rate=0.5, window=poise.TimeWindow(duration=10.0))
    assert c.success_needs_now
    assert c.record_success(closed_ticket(c), NOW, NOW - 0.01)
    assert c.window_counts(NOW)[0] == 1
    assert c.window_counts(NOW + 60.0)[0] == 0  # recorded at NOW, so it has been forgotten


def test_clock_every_success_asks_for_the_time_and_keeps_the_fast_path() -> None:
    c = make()
    assert not c.success_needs_now
    c.clock_every_success()
    assert c.success_needs_now
    assert c.record_success(closed_ticket(c), NOW, NOW - 0.01)
    assert c.window_counts(NOW) == (1, 0, 0)
    c.record(closed_ticket(c), Fault.SUSPECT, NOW)  # a move or a degradation keeps the clock asked for
    assert c.success_needs_now


def test_a_pools_record_is_its_circuits_tally_so_a_call_touches_one_object() -> None:
    pool = Pool(poise.CircuitPolicy(), poise.RoundRobin(), random.Random(1))
    pool.apply(NOW, added=[poise.Endpoint("a")])
    state, ticket, started, _ = pool.select(NOW)
    # The counts a call writes live in the record, not in the circuit (docs/performance.md, scaling).
    assert state.circuit.tally is state
    assert state.circuit is not state
    assert ticket is state.fast_ticket is state.circuit.fast_ticket
    pool.succeed(state, ticket, NOW, started)
    assert state.circuit.window_counts(NOW) == (1, 0, 0)
    assert (state.inflight, state.successes) == (0, 1)


def test_a_bare_circuit_keeps_its_own_tally() -> None:
    c = make()
    other = make()
    assert isinstance(c.tally, Tally)
    assert c.tally is not other.tally
    c.record(closed_ticket(c), Fault.SUSPECT, NOW)
    assert (c.consecutive_failures, other.consecutive_failures) == (1, 0)


@settings(max_examples=60, deadline=None)
@given(
    start=st.one_of(st.integers(0, 2_000), st.integers(SATURATED - 2_000, SATURATED), st.integers(0, SATURATED)),
    outcomes=st.lists(st.booleans(), min_size=257, max_size=600),  # at least one carry, whatever the start
)
@example(start=0, outcomes=[True] * 1_000)
@example(start=SATURATED - 300, outcomes=[True, False] * 200)
def test_a_success_count_carries_past_every_256_and_saturates_at_two_to_the_64_minus_one(
    start: int, outcomes: list[bool]
) -> None:
    # A call writes only the count's low byte (a small int in both builds); every 256th
    # success carries into the high part (docs/performance.md, per-call overhead). Seen from outside,
    # it is one counter: exact below 2**64 - 1, and there it stays.
    pool = Pool(poise.CircuitPolicy(), poise.RoundRobin(), random.Random(1))
    pool.apply(NOW, added=[poise.Endpoint("a")])
    state = pool.members["a"]
    state.successes = start
    assert state.successes == start
    expected = start
    for fast in outcomes:  # the CLOSED exit's fast path, or the long way (Pool.complete)
        got, ticket, started, _ = pool.select(NOW)
        if fast:
            pool.succeed(got, ticket, NOW, started)
        else:
            pool.complete(got, ticket, None, NOW)
        expected = min(expected + 1, SATURATED)
        assert state.successes == expected
        assert 0 <= state.successes_low < 256
    assert state.inflight == 0


def test_setting_a_success_count_clamps_it_to_the_counters_range() -> None:
    pool = Pool(poise.CircuitPolicy(), poise.RoundRobin(), random.Random(1))
    pool.apply(NOW, added=[poise.Endpoint("a")])
    state = pool.members["a"]
    state.successes = 2**70
    assert state.successes == SATURATED
    state.successes = -5
    assert state.successes == 0


def test_the_volume_counts_up_to_the_count_windows_size_and_starts_again_in_a_new_epoch() -> None:
    # The volume is kept as the room left under the window's size (one hot field: a success
    # counts down and reads no cap); seen from the circuit it is still a count that stops at
    # the size and starts from 0 in every CLOSED epoch.
    c = make(consecutive_failures=1, minimum_volume=3, window=poise.CountWindow(4))
    assert c.window_counts(NOW) == (0, 0, 0)
    for n in range(1, 7):
        assert c.record_success(closed_ticket(c), NOW, NOW)
        assert c.window_counts(NOW) == (min(n, 4), 0, 0)
    c.record(closed_ticket(c), Fault.SUSPECT, NOW)  # the volume is there: one SUSPECT trips
    assert c.state is CircuitState.OPEN
    c.reset(NOW)
    assert c.window_counts(NOW) == (0, 0, 0)
    c.record(closed_ticket(c), Fault.SUSPECT, NOW)  # the new epoch's volume is 1 of 3: no trip
    assert c.state is CircuitState.CLOSED
    assert c.window_counts(NOW) == (1, 0, 0)
