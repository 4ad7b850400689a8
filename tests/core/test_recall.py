"""Recall: an endpoint ejected for a load-shaped failure is probed at once when the pool shows load (pure core)."""

from __future__ import annotations

import random

import poise_py as poise
from poise_py._core._circuit import Circuit, Ticket
from poise_py._core._pool import Pool
from poise_py._core._record import EndpointState
from tests.core.test_overload_not_a_fault import fail_on, pool_of

OPEN, HALF_OPEN, CLOSED = poise.CircuitState.OPEN, poise.CircuitState.HALF_OPEN, poise.CircuitState.CLOSED
S = poise.Fault.SUSPECT


def state_of(pool: Pool, endpoint_id: str) -> EndpointState:
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


def test_an_endpoint_ejected_for_load_is_probed_as_soon_as_the_pool_shows_load() -> None:
    pool = pool_of("a", "b", "c")
    eject_for_load(pool, "a", 0.0)  # alone: its own fault, so ejected (for 30 s at least)
    reopen_at = state_of(pool, "a").circuit.reopen_at
    assert reopen_at is not None
    assert reopen_at > 20.0
    fail_on(pool, "b", 1.0, overload=True)  # b times out too: the pool is loaded
    circuit = state_of(pool, "a").circuit
    assert circuit.state is HALF_OPEN  # recalled 1 s in, not 30
    probe(pool, "a", 1.5, None)
    assert circuit.state is CLOSED
    assert state_of(pool, "a") not in pool.load.recalls


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
    fail_on(pool, "b", 1.0, overload=True)
    assert circuit.state is HALF_OPEN
    probe(pool, "a", 1.2, S, overload=True)
    # No longer escalated, nor counted as another ejection: the recall cost it nothing.
    assert circuit.state is OPEN
    assert (circuit.reopen_at, circuit.level, circuit.ejections) == (reopen_at, level, ejections)
    # Still loaded, still within the window: recalled again at the next sign of load.
    fail_on(pool, "c", 2.0, overload=True)
    assert circuit.state is HALF_OPEN


def test_recalls_stop_one_overload_window_after_the_first() -> None:
    pool = pool_of("a", "b", "c", circuit=poise.CircuitPolicy(max_ejection_percent=1.0, overload_window=5.0))
    eject_for_load(pool, "a", 0.0)
    circuit = state_of(pool, "a").circuit
    now = 1.0
    for _ in range(5):  # a black hole: every recalled probe times out
        fail_on(pool, "b", now, overload=True)
        assert circuit.state is HALF_OPEN, now
        probe(pool, "a", now + 0.5, S, overload=True)
        assert circuit.state is OPEN
        now += 1.0
    fail_on(pool, "b", 6.5, overload=True)  # 5.5 s after its first recall: no more
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
    assert c.state is OPEN
