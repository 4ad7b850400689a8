"""Readiness quarantine as a pure schedule: a failed endpoint is due again one cool-down later."""

from __future__ import annotations

from poise_py._core._readiness import Quarantine


def test_a_failed_endpoint_is_due_again_exactly_one_cooldown_later_and_only_once() -> None:
    cooling: Quarantine[str] = Quarantine(3.0)
    assert cooling.next_deadline() is None
    assert cooling.failed("a", 10.0) == 1
    assert "a" in cooling
    assert cooling.next_deadline() == 13.0
    assert cooling.due(12.9) == []
    assert cooling.due(13.0) == ["a"]
    assert cooling.due(20.0) == []
    assert cooling.next_deadline() is None


def test_failures_in_a_row_count_until_a_pass_ends_the_streak() -> None:
    cooling: Quarantine[str] = Quarantine(1.0)
    assert cooling.failed("a", 0.0) == 1
    cooling.due(1.0)
    assert cooling.failed("a", 1.5) == 2
    assert cooling.passed("a") == 2
    assert "a" not in cooling
    assert cooling.next_deadline() is None
    assert cooling.failed("a", 5.0) == 1


def test_a_removed_endpoint_is_never_due_and_endpoints_come_due_in_order() -> None:
    cooling: Quarantine[str] = Quarantine(2.0)
    cooling.failed("a", 0.0)
    cooling.failed("b", 1.0)
    cooling.failed("c", 0.5)
    cooling.remove("a")
    assert cooling.next_deadline() == 2.5
    assert cooling.due(10.0) == ["c", "b"]
    cooling.failed("d", 0.0)
    cooling.clear()
    assert cooling.next_deadline() is None
    assert cooling.due(10.0) == []
