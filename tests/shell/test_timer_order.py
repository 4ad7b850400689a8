"""The one timer's firing order: due clients fire earliest first, and each sees the others' changes."""

from __future__ import annotations

import attrs

from poise_py._timer import Timer


@attrs.define(eq=False)
class Client:
    name: str
    at: float | None
    log: list[tuple[str, float]]
    then: Client | None = None
    """A client this one makes due when it fires (as a circuit move makes the alert look)."""

    def next_deadline(self) -> float | None:
        return self.at

    def handle_timer(self, now: float) -> None:
        self.log.append((self.name, now))
        self.at = None
        if self.then is not None:
            self.then.at = now


def test_due_clients_fire_earliest_deadline_first_and_the_next_deadline_comes_back() -> None:
    log: list[tuple[str, float]] = []
    pool, alert, later = Client("pool", 30.0, log), Client("alert", 5.0, log), Client("later", 99.0, log)
    assert Timer((pool, alert, later)).fire(60.0) == 99.0
    assert log == [("alert", 60.0), ("pool", 60.0)]


def test_a_client_made_due_by_another_fires_in_the_same_pass() -> None:
    log: list[tuple[str, float]] = []
    alert = Client("alert", None, log)
    pool = Client("pool", 30.0, log, then=alert)
    assert Timer((alert, pool)).fire(30.0) is None
    assert log == [("pool", 30.0), ("alert", 30.0)]


def test_nothing_due_fires_nothing() -> None:
    log: list[tuple[str, float]] = []
    assert Timer((Client("a", 5.0, log),)).fire(1.0) == 5.0
    assert Timer(()).fire(1.0) is None
    assert log == []
