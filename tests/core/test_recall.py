"""Restore and recall: an endpoint ejected for a load-shaped failure comes back when the pool shows load (pure core)."""

from __future__ import annotations

import random

import pytest

import poise_py as poise
from poise_py._core._circuit import Circuit, Ticket, Transition
from poise_py._core._concurrency import LoadPolicy
from poise_py._core._pool import Pool
from poise_py._core._record import Member
from tests.core.test_overload_not_a_fault import fail_on, pool_of

OPEN, HALF_OPEN, CLOSED = poise.CircuitState.OPEN, poise.CircuitState.HALF_OPEN, poise.CircuitState.CLOSED
S = poise.Fault.SUSPECT


def state_of(pool: Pool, endpoint_id: str) -> Member:
    return pool.members[endpoint_id]


def eject_for_load(pool: Pool, endpoint_id: str, now: float) -> None:
    """Five load-shaped failures that ``endpoint_id`` has alone: ejected for overload."""
    for i in range(5):
        fail_on(pool, endpoint_id, now + i * 0.01, overload=True)
    assert state_of(pool, endpoint_id).circuit.state is OPEN


def probe(pool: Pool, endpoint_id: str, now: float, fault: poise.Fault | None, *, overload: bool = False) -> None:
    """Take ``endpoint_id``'s probe slot and report ``fault`` (None: a success)."""
    for _ in range(len(pool.members) * 4):
        state, ticket, _, _ = pool.select(now)
        if state.endpoint.id == endpoint_id:
            assert ticket.probe
            if fault is None:
                pool.succeed(state, ticket, now, now)
            else:
                pool.complete(state, ticket, fault, now, latency=0.01, overload=overload)
            return
        pool.cancel(state, ticket)
    raise AssertionError(f"{endpoint_id} was never picked")


def test_an_endpoint_ejected_for_load_is_restored_when_one_in_rotation_fails_the_same_way_soon_after() -> None:
    pool = pool_of("a", "b", "c")
    eject_for_load(pool, "a", 0.0)  # alone: its own fault, so ejected (for 30 s at least)
    circuit = state_of(pool, "a").circuit
    assert circuit.reopen_at is not None
    assert circuit.reopen_at > 20.0
    assert (circuit.level, circuit.ejections_in_row, circuit.ejections) == (1, 1, 1)
    fail_on(pool, "b", 1.0, overload=True)  # b times out too, 1 s later: the pool is loaded
    # a's timeouts were the pool's load, judged its own only because they came first:
    # the ejection is undone, its escalation step given back.
    assert circuit.state is CLOSED
    assert (circuit.level, circuit.ejections_in_row, circuit.ejections) == (0, 0, 1)
    assert circuit.tally.consecutive_failures == 0
    assert state_of(pool, "a") not in pool.load.recallable
    assert state_of(pool, "a") not in pool.load.recalls


def test_the_restore_is_a_move_to_closed_with_its_own_cause() -> None:
    moves: list[tuple[str, poise.Cause, poise.CircuitState]] = []
    pool = pool_of("a", "b", "c")
    eject_for_load(pool, "a", 0.0)
    state = state_of(pool, "a")
    epoch = state.circuit.epoch
    original = pool.listener.transition

    def transition(moved: Member, t: Transition) -> None:
        moves.append((moved.endpoint.id, t.cause, t.target))
        original(moved, t)

    pool.listener.transition = transition  # type: ignore[method-assign,assignment]
    fail_on(pool, "b", 1.0, overload=True)
    assert moves == [("a", poise.Cause.POOL_LOADED, CLOSED)]
    assert state.circuit.epoch == epoch + 1  # a move: permits of the OPEN epoch are stale
    assert state.circuit.refusal() is None


def test_an_endpoint_ejected_for_load_is_probed_when_the_pool_shows_load_after_the_window() -> None:
    pool = pool_of("a", "b", "c")
    eject_for_load(pool, "a", 0.0)
    fail_on(pool, "c", 11.8, overload=True)  # a's marks are stale now: c's timeout is c's own
    fail_on(pool, "b", 12.0, overload=True)  # b's, 12 s on, is the pool's: load, but no misjudged ejection
    circuit = state_of(pool, "a").circuit
    assert circuit.state is HALF_OPEN  # recalled 12 s in, not 30
    probe(pool, "a", 12.5, None)
    assert circuit.state is CLOSED
    assert state_of(pool, "a") not in pool.load.recalls


def test_a_probe_failing_the_same_way_restores_nobody() -> None:
    # An ejected endpoint's failed probe is no sign that the endpoints in rotation are
    # loaded (two black holes would restore each other): it recalls, it does not restore.
    pool = pool_of("a", "b", "c")
    fail_on(pool, "b", 0.0, overload=False, retry_after=2.0)  # b rests 2 s (no load shown)
    eject_for_load(pool, "a", 0.1)
    probe(pool, "b", 2.5, S, overload=True)  # b's probe times out: the pool's load (a's marks)
    circuit = state_of(pool, "a").circuit
    assert circuit.state is HALF_OPEN  # recalled: probed, not handed its full share back


def test_a_load_that_is_not_shaped_as_load_recalls_nobody() -> None:
    pool = pool_of("a", "b", "c")
    eject_for_load(pool, "a", 0.0)
    fail_on(pool, "b", 1.0, overload=False)  # an ordinary failure says nothing of load
    assert state_of(pool, "a").circuit.state is OPEN


def test_an_endpoint_ejected_for_an_ordinary_failure_is_not_recalled() -> None:
    pool = pool_of("a", "b", "c")
    for i in range(5):
        fail_on(pool, "a", i * 0.01, overload=False)  # refused connections: dead, not loaded
    fail_on(pool, "b", 0.5, overload=True)
    fail_on(pool, "c", 1.0, overload=True)  # c's timeout is the pool's load (b's mark)
    assert pool.load.shared_faults == 1
    assert state_of(pool, "a").circuit.state is OPEN


def test_a_server_that_asked_for_time_is_left_alone() -> None:
    pool = pool_of("a", "b", "c")
    fail_on(pool, "a", 0.0, overload=True, retry_after=30.0)  # 503 with Retry-After: 30
    assert state_of(pool, "a").circuit.state is OPEN
    fail_on(pool, "b", 1.0, overload=True)
    fail_on(pool, "c", 1.5, overload=True)
    assert state_of(pool, "a").circuit.state is OPEN


def test_a_failed_recalled_probe_puts_the_circuit_back_as_it_was() -> None:
    pool = pool_of("a", "b", "c")
    eject_for_load(pool, "a", 0.0)
    circuit = state_of(pool, "a").circuit
    reopen_at, level, ejections = circuit.reopen_at, circuit.level, circuit.ejections
    fail_on(pool, "c", 10.8, overload=True)  # past the window: c's own, and a mark
    fail_on(pool, "b", 11.0, overload=True)  # the pool's load: a is recalled
    assert circuit.state is HALF_OPEN
    probe(pool, "a", 11.2, S, overload=True)
    # No longer escalated, nor counted as another ejection: the recall cost it nothing.
    assert circuit.state is OPEN
    assert (circuit.reopen_at, circuit.level, circuit.ejections) == (reopen_at, level, ejections)
    # Still loaded, still within the recall window: recalled again at the next sign of load
    # (its failed probe is no misjudged ejection: probed, not restored).
    fail_on(pool, "c", 12.0, overload=True)
    assert circuit.state is HALF_OPEN


def test_recalls_stop_one_overload_window_after_the_first() -> None:
    pool = pool_of("a", "b", "c", circuit=poise.CircuitPolicy(max_ejection_percent=1.0, overload_window=5.0))
    eject_for_load(pool, "a", 0.0)
    circuit = state_of(pool, "a").circuit
    fail_on(pool, "c", 5.9, overload=True)  # past the window in which load would restore it
    now = 6.0
    for _ in range(5):  # a black hole: every recalled probe times out
        fail_on(pool, "b", now, overload=True)
        assert circuit.state is HALF_OPEN, now
        probe(pool, "a", now + 0.5, S, overload=True)
        assert circuit.state is OPEN
        now += 1.0
    fail_on(pool, "c", 11.4, overload=True)
    fail_on(pool, "b", 11.5, overload=True)  # the pool's load, 5.5 s after a's first recall: no more
    assert circuit.state is OPEN
    assert circuit.reopen_at is not None
    assert circuit.reopen_at > 20.0


def test_without_an_overload_window_nothing_is_recalled() -> None:
    pool = pool_of("a", "b", "c", circuit=poise.CircuitPolicy(max_ejection_percent=1.0, overload_window=None))
    eject_for_load(pool, "a", 0.0)
    for i in range(5):
        fail_on(pool, "b", 1.0 + i, overload=True)
    assert state_of(pool, "a").circuit.state is OPEN


def test_a_departed_endpoint_is_not_recalled() -> None:
    pool = pool_of("a", "b", "c")
    eject_for_load(pool, "a", 0.0)
    state = state_of(pool, "a")
    pool.apply(0.5, removed=["a"])
    assert state not in pool.load.recallable
    fail_on(pool, "b", 1.0, overload=True)
    fail_on(pool, "c", 1.5, overload=True)
    assert state.circuit.state is OPEN


def circuit() -> Circuit:
    return Circuit(poise.CircuitPolicy(), random.Random(1).random, 0.0)


def test_circuit_recall_moves_only_an_open_unleased_circuit() -> None:
    c = circuit()
    assert c.recall(0.0) is None  # CLOSED
    c.trip(poise.Cause.SUCCESS_RATE, 0.0, may_eject=True)
    assert c.state is OPEN
    transition = c.recall(1.0)
    assert transition is not None
    assert (transition.source, transition.target, transition.cause) == (OPEN, HALF_OPEN, poise.Cause.RECALLED)
    assert c.recall(1.0) is None  # HALF_OPEN


def test_a_failed_recalled_probe_after_its_window_would_have_ended_escalates_as_any() -> None:
    c = circuit()
    c.trip(poise.Cause.SUCCESS_RATE, 0.0, may_eject=True)
    reopen_at, level = c.reopen_at, c.level
    assert reopen_at is not None
    c.recall(1.0)
    got = c.try_acquire(1.0)
    assert isinstance(got, Ticket)
    assert got.probe
    transition = c.record(got, S, reopen_at + 1.0)
    assert transition is not None
    assert transition.target is OPEN
    assert c.level == level + 1
    assert c.reopen_at is not None
    assert c.reopen_at > reopen_at + 1.0 + 30.0


def test_a_leased_circuit_is_the_fleets_to_move() -> None:
    c = circuit()
    c.trip(poise.Cause.SUCCESS_RATE, 0.0, may_eject=True)
    c.set_leased(True, 0.5)
    assert c.recall(1.0) is None
    assert c.restore(1.0) is None
    assert c.state is OPEN


def test_circuit_restore_moves_only_an_open_circuit_and_gives_back_its_escalation_step() -> None:
    c = circuit()
    assert c.restore(0.0) is None  # CLOSED
    c.trip(poise.Cause.SUCCESS_RATE, 0.0, may_eject=True)
    assert (c.level, c.ejections_in_row) == (1, 1)
    transition = c.restore(1.0)
    assert transition is not None
    assert (transition.source, transition.target, transition.cause) == (OPEN, CLOSED, poise.Cause.POOL_LOADED)
    assert (c.level, c.ejections_in_row, c.ejections) == (0, 0, 1)
    assert c.reopen_at is None
    c.trip(poise.Cause.SUCCESS_RATE, 2.0, may_eject=True)
    c.recall(3.0)
    assert c.restore(3.0) is None  # HALF_OPEN: its probe decides


SLOW_START = LoadPolicy(slow_start=poise.SlowStart(window=30.0))


def test_with_slow_start_a_restored_endpoint_takes_its_share_back_at_once() -> None:
    pool = pool_of("a", "b", "c", load=SLOW_START)
    eject_for_load(pool, "a", 0.0)
    fail_on(pool, "b", 1.0, overload=True)  # the pool's load: a's ejection is undone
    a = state_of(pool, "a")
    assert a.circuit.state is CLOSED
    assert pool.ramp_factor(a, 1.5) == 1.0  # never its own fault: no ramp


def test_with_slow_start_a_recalled_endpoint_that_passes_its_probe_ramps_up() -> None:
    pool = pool_of("a", "b", "c", load=SLOW_START)
    eject_for_load(pool, "a", 0.0)
    fail_on(pool, "c", 10.8, overload=True)
    fail_on(pool, "b", 11.0, overload=True)  # past the window: recalled, not restored
    probe(pool, "a", 11.5, None)
    a = state_of(pool, "a")
    assert a.circuit.state is CLOSED
    assert pool.ramp_factor(a, 12.5) < 0.5  # readmitted by a probe: Envoy's ramp


def test_without_slow_start_a_recalled_endpoint_that_passes_its_probe_ramps_over_the_overload_window() -> None:
    pool = pool_of("a", "b", "c")  # no load knob on at all
    eject_for_load(pool, "a", 0.0)
    fail_on(pool, "c", 10.8, overload=True)
    fail_on(pool, "b", 11.0, overload=True)  # the pool's load, past the window: recalled
    probe(pool, "a", 11.5, None)
    a = state_of(pool, "a")
    assert a.circuit.state is CLOSED
    # It was out while the pool was loaded: its full share at once would overload it again.
    # Envoy's ramp over overload_window (10 s): max(min_weight, t / window).
    assert pool.ramp_factor(a, 12.5) == pytest.approx(0.1)
    assert pool.ramp_factor(a, 16.5) == pytest.approx(0.5)
    assert pool.ramp_factor(a, 21.5) == 1.0
    for other in ("b", "c"):
        assert pool.ramp_factor(state_of(pool, other), 12.5) == 1.0


def test_without_slow_start_nothing_else_ramps() -> None:
    # Restored (its ejection undone), or back after its open window with no recall, or
    # ejected for an ordinary failure: its full share at once, as before.
    pool = pool_of("a", "b", "c")
    eject_for_load(pool, "a", 0.0)
    fail_on(pool, "b", 1.0, overload=True)
    assert state_of(pool, "a").circuit.state is CLOSED
    assert pool.ramp_factor(state_of(pool, "a"), 1.5) == 1.0

    pool = pool_of("a", "b", "c")
    eject_for_load(pool, "a", 0.0)
    reopen_at = state_of(pool, "a").circuit.reopen_at
    assert reopen_at is not None
    probe(pool, "a", reopen_at + 0.1, None)  # its window ran out: a probe, no recall
    assert state_of(pool, "a").circuit.state is CLOSED
    assert pool.ramp_factor(state_of(pool, "a"), reopen_at + 1.0) == 1.0

    pool = pool_of("a", "b", "c", circuit=poise.CircuitPolicy(max_ejection_percent=1.0, overload_window=None))
    eject_for_load(pool, "a", 0.0)  # every failure its own: no recall, no ramp
    reopen_at = state_of(pool, "a").circuit.reopen_at
    assert reopen_at is not None
    probe(pool, "a", reopen_at + 0.1, None)
    assert pool.ramp_factor(state_of(pool, "a"), reopen_at + 1.0) == 1.0
