"""Builders for the pure circuit's tests: a circuit at a fixed ``NOW``, its tickets, a trip."""

from __future__ import annotations

import random

import poise_py as poise
from poise_py import CircuitState, Fault
from poise_py._core._circuit import Circuit, Ticket
from poise_py._core._record import Member

NOW = 100.0


def policy_of(**knobs: object) -> poise.CircuitPolicy:
    knobs.setdefault("escalation", poise.Escalation(jitter=0.0))
    return poise.CircuitPolicy(**knobs)  # type: ignore[arg-type]


def make(**knobs: object) -> Circuit:
    return Circuit(policy_of(**knobs), random.Random(0).random, NOW)


def record_of(endpoint: poise.Endpoint, **knobs: object) -> Member:
    """A pool's record for ``endpoint`` (its circuit's tally; ``.circuit`` is the circuit), at ``NOW``."""
    return Member(endpoint, policy_of(**knobs), random.Random(0).random, NOW)


def ticket_of(c: Circuit, now: float = NOW) -> Ticket:
    t = c.try_acquire(now)
    assert isinstance(t, Ticket), t
    return t


def trip(c: Circuit, now: float = NOW) -> None:
    while c.state is CircuitState.CLOSED:
        c.record(ticket_of(c, now), Fault.SUSPECT, now)
