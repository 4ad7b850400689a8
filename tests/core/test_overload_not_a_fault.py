"""Overload is not an endpoint's fault: load-shaped failures across the pool are no strike (pure pool)."""

from __future__ import annotations

import random

import pytest

import poise_py as poise
from poise_py._core._concurrency import LoadPolicy
from poise_py._core._pool import Pool
from poise_py._core._record import FAULT_INDEX, Member

S = poise.Fault.SUSPECT


def pool_of(*ids: str, circuit: poise.CircuitPolicy | None = None, load: LoadPolicy | None = None) -> Pool:
    pool = Pool(
        circuit or poise.CircuitPolicy(max_ejection_percent=1.0), poise.RoundRobin(), random.Random(5), load=load
    )
    pool.apply(0.0, added=[poise.Endpoint(i) for i in ids])
    return pool


def fail_on(pool: Pool, endpoint_id: str, now: float, *, overload: bool, retry_after: float | None = None) -> None:
    """One call to ``endpoint_id`` that fails (SUSPECT), load-shaped or not."""
    for _ in range(len(pool.members) * 2):
        state, ticket, _, _ = pool.select(now)
        if state.endpoint.id == endpoint_id:
            pool.complete(state, ticket, S, now, latency=1.0, retry_after=retry_after, overload=overload)
            return
        pool.cancel(state, ticket)
    raise AssertionError(f"{endpoint_id} was never picked")


def state_of(pool: Pool, endpoint_id: str) -> Member:
    return pool.members[endpoint_id]


def test_an_endpoint_that_times_out_alone_is_ejected_as_ever() -> None:
    pool = pool_of("a", "b", "c")
    for i in range(5):
        fail_on(pool, "a", float(i), overload=True)
    assert state_of(pool, "a").circuit.state is poise.CircuitState.OPEN
    assert pool.load.shared_faults == 0


def test_timeouts_on_several_endpoints_are_the_pools_load_and_eject_none() -> None:
    pool = pool_of("a", "b", "c")
    fail_on(pool, "b", 0.0, overload=True)  # b is loaded too
    for i in range(20):
        fail_on(pool, "a", 1.0 + i * 0.1, overload=True)
        fail_on(pool, "b", 1.0 + i * 0.1, overload=True)
    for endpoint_id in ("a", "b"):
        state = state_of(pool, endpoint_id)
        assert state.circuit.state is poise.CircuitState.CLOSED, endpoint_id
        assert state.faults[FAULT_INDEX[S]] > 0  # still counted: the statistics see every failure
    assert pool.load.shared_faults == 40  # all but b's first, which was alone


def test_a_failure_that_is_not_load_shaped_strikes_whatever_the_pools_load() -> None:
    pool = pool_of("a", "b", "c")
    fail_on(pool, "b", 0.0, overload=True)
    for i in range(5):
        fail_on(pool, "a", 1.0 + i * 0.1, overload=False)
    assert state_of(pool, "a").circuit.state is poise.CircuitState.OPEN


def test_another_endpoints_load_is_evidence_only_within_the_window() -> None:
    pool = pool_of("a", "b", "c", circuit=poise.CircuitPolicy(max_ejection_percent=1.0, overload_window=5.0))
    fail_on(pool, "b", 0.0, overload=True)
    for i in range(4):
        fail_on(pool, "a", 1.0 + i, overload=True)  # b's mark covers these
    assert state_of(pool, "a").circuit.state is poise.CircuitState.CLOSED
    for i in range(5):
        fail_on(pool, "a", 6.0 + i, overload=True)  # b's mark is 6 s old: a is alone
    assert state_of(pool, "a").circuit.state is poise.CircuitState.OPEN
    assert state_of(pool, "b") not in pool.load.overloaded  # the stale mark was forgotten


def test_without_an_overload_window_every_failure_is_the_endpoints_own() -> None:
    pool = pool_of("a", "b", "c", circuit=poise.CircuitPolicy(max_ejection_percent=1.0, overload_window=None))
    for i in range(5):
        fail_on(pool, "a", float(i), overload=True)
        fail_on(pool, "b", float(i), overload=True)
    assert state_of(pool, "a").circuit.state is poise.CircuitState.OPEN
    assert state_of(pool, "b").circuit.state is poise.CircuitState.OPEN
    assert pool.load.shared_faults == 0


def test_a_servers_retry_after_is_honoured_even_when_the_failure_is_the_pools_load() -> None:
    pool = pool_of("a", "b", "c")
    fail_on(pool, "b", 0.0, overload=True)
    fail_on(pool, "a", 1.0, overload=True, retry_after=30.0)
    circuit = state_of(pool, "a").circuit
    assert circuit.state is poise.CircuitState.OPEN
    assert circuit.reopen_at == pytest.approx(31.0)


def test_a_departed_endpoint_leaves_no_evidence_behind() -> None:
    pool = pool_of("a", "b", "c")
    fail_on(pool, "b", 0.0, overload=True)
    pool.apply(0.5, removed=["b"])
    for i in range(5):
        fail_on(pool, "a", 1.0 + i * 0.1, overload=True)
    assert state_of(pool, "a").circuit.state is poise.CircuitState.OPEN


def test_the_overload_window_is_checked_naming_it() -> None:
    with pytest.raises(poise.ConfigError, match=r"CircuitPolicy\.overload_window"):
        poise.CircuitPolicy(overload_window=0)
    with pytest.raises(poise.ConfigError, match=r"CircuitPolicy\.overload_window"):
        poise.CircuitPolicy(overload_window="10")  # type: ignore[arg-type]


def test_an_ejected_endpoints_failed_probe_is_no_evidence_that_the_pool_is_loaded() -> None:
    pool = pool_of("a", "b", "c", "d")
    for i in range(5):
        fail_on(pool, "a", float(i), overload=True)  # a is dead: ejected alone
    a = state_of(pool, "a")
    assert a.circuit.state is poise.CircuitState.OPEN
    reopen_at = a.circuit.reopen_at
    assert reopen_at is not None
    pool.handle_timer(reopen_at)
    probe, ticket, _, _ = pool.select(reopen_at, exclude=["b", "c", "d"])
    assert probe is a
    assert ticket.probe
    pool.complete(a, ticket, S, reopen_at, latency=1.0, overload=True)  # its probe times out too
    for i in range(5):
        fail_on(pool, "b", reopen_at + 0.1 * (i + 1), overload=True)  # a second dead endpoint, in rotation
    assert state_of(pool, "b").circuit.state is poise.CircuitState.OPEN  # ejected on its own five, not shielded
    assert pool.load.shared_faults == 0
