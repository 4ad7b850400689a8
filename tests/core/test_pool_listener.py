"""The pool reports to one listener, and only through its public calls, with ``now`` passed in."""

from __future__ import annotations

import random

import poise_py as poise
from poise_py._core._circuit import Transition
from poise_py._core._listener import NullListener, PoolListener
from poise_py._core._pool import Pool
from poise_py._core._record import Member


class Recorder(NullListener):
    """Writes down every report as a tuple."""

    def __init__(self) -> None:
        self.heard: list[tuple[object, ...]] = []

    def transition(self, state: Member, transition: Transition) -> None:
        self.heard.append(("transition", state.endpoint.id, transition.target))

    def idle(self, state: Member) -> None:
        self.heard.append(("idle", state.endpoint.id))

    def degraded(self, state: Member, degraded: bool) -> None:
        self.heard.append(("degraded", state.endpoint.id, degraded))

    def left(self, states: list[Member]) -> None:
        self.heard.extend(("left", state.endpoint.id) for state in states)

    def armed(self) -> None:
        self.heard.append(("armed",))


def make(circuit: poise.CircuitPolicy | None = None) -> tuple[Pool, Recorder]:
    recorder = Recorder()
    pool = Pool(circuit or poise.CircuitPolicy(), poise.RoundRobin(), random.Random(1), listener=recorder)
    pool.apply(0.0, added=[poise.Endpoint("a"), poise.Endpoint("b")])
    return pool, recorder


def test_a_fatal_fault_reaches_the_listener_as_one_transition_and_sets_a_deadline() -> None:
    pool, recorder = make(poise.CircuitPolicy(max_ejection_percent=1.0))
    state, ticket, _, _ = pool.select(0.0, exclude=["b"])
    pool.complete(state, ticket, poise.Fault.FATAL, 1.0)
    assert recorder.heard == [("transition", "a", poise.CircuitState.OPEN)]
    deadline = pool.next_deadline()
    assert deadline is not None
    assert pool.needs_now  # a pending deadline: select needs a real now
    pool.handle_timer(deadline)
    assert recorder.heard[-1] == ("transition", "a", poise.CircuitState.HALF_OPEN)


def test_a_refused_trip_is_reported_degraded_and_a_departure_is_reported_left() -> None:
    pool, recorder = make(poise.CircuitPolicy(max_ejection_percent=0.0))
    for endpoint_id in ("a", "b"):
        others = [i for i in pool.members if i != endpoint_id]
        state, ticket, _, _ = pool.select(0.0, exclude=others)
        pool.complete(state, ticket, poise.Fault.FATAL, 1.0)
    assert ("degraded", "b", True) in recorder.heard
    pool.apply(2.0, removed=["b"])
    assert recorder.heard[-1] == ("left", "b")
    assert pool.degraded_count == 0


def test_the_last_permit_of_a_draining_endpoint_is_reported_idle() -> None:
    pool, recorder = make()
    state, ticket, now, _ = pool.select(0.0, exclude=["b"])
    pool.set_admin("a", poise.AdminStatus.DRAINING)
    pool.succeed(state, ticket, 0.0, now)
    assert recorder.heard == [("idle", "a")]


def test_success_rate_detection_arms_a_deadline_through_the_listener() -> None:
    _, recorder = make(poise.CircuitPolicy(success_rate=poise.SuccessRateEjection(interval=5.0)))
    assert recorder.heard == [("armed",)]


def test_the_null_listener_satisfies_the_protocol() -> None:
    listener: PoolListener = NullListener()
    listener.armed()  # and hears nothing
    pool = Pool(poise.CircuitPolicy(), poise.RoundRobin(), random.Random(1))
    assert isinstance(pool.listener, NullListener)
