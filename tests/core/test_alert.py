"""The no-eligible alert episode as a pure state machine: now in, deadline and events out."""

from __future__ import annotations

import attrs

import poise_py as poise
from poise_py._core._alert import NoEligibleAlert


@attrs.define
class View:
    """The pool as the alert sees it."""

    succeeded: int = 0
    up: int = 0
    size: int = 1

    def successes(self) -> int:
        return self.succeeded

    def available(self) -> int:
        return self.up

    def total(self) -> int:
        return self.size


def refusal() -> poise.NoEligibleEndpoints:
    return poise.NoEligibleEndpoints({poise.IneligibleReason.OPEN: 1}, 1)


def test_the_first_refusal_opens_an_episode_whose_deadline_is_alert_after_later() -> None:
    alert = NoEligibleAlert(5.0)
    assert alert.next_deadline() is None
    assert alert.refused(100.0, refusal(), failures=1, view=View()) == ()
    assert alert.episode_open
    assert alert.next_deadline() == 105.0


def test_a_persisting_episode_is_reported_exactly_at_its_deadline_once() -> None:
    alert, view = NoEligibleAlert(5.0), View()
    alert.refused(100.0, refusal(), failures=1, view=view)
    assert alert.handle_timer(104.9, failures=1, view=view) == ()  # not due yet
    (event,) = alert.handle_timer(105.0, failures=1, view=view)
    assert isinstance(event, poise.NoEligiblePersisting)
    assert (event.since, event.at, event.total) == (100.0, 105.0, 1)
    assert event.reasons[poise.IneligibleReason.OPEN] == 1
    deadline = alert.next_deadline()
    assert deadline is not None
    assert alert.handle_timer(deadline, failures=1, view=view) == ()  # reported once


def test_a_change_makes_a_look_due_at_once_and_a_recovery_clears_a_reported_episode() -> None:
    alert, view = NoEligibleAlert(5.0), View()
    alert.refused(100.0, refusal(), failures=1, view=view)
    alert.handle_timer(105.0, failures=1, view=view)
    view.up = 1
    alert.changed(107.0)
    assert alert.next_deadline() == 107.0
    (event,) = alert.handle_timer(107.0, failures=1, view=view)
    assert isinstance(event, poise.NoEligibleCleared)
    assert (event.since, event.at) == (100.0, 107.0)
    assert not alert.episode_open
    assert alert.next_deadline() is None


def test_refusals_since_the_last_look_keep_an_available_pool_from_clearing() -> None:
    alert, view = NoEligibleAlert(5.0), View(up=1)
    alert.refused(100.0, refusal(), failures=1, view=view)
    alert.refused(101.0, refusal(), failures=2, view=view)
    (event,) = alert.handle_timer(105.0, failures=2, view=view)
    assert isinstance(event, poise.NoEligiblePersisting)


def test_an_episode_with_a_success_closes_silently_at_its_deadline() -> None:
    alert, view = NoEligibleAlert(5.0), View()
    alert.refused(100.0, refusal(), failures=1, view=view)
    view.succeeded = 1
    assert alert.handle_timer(105.0, failures=3, view=view) == ()
    assert not alert.episode_open


def test_excluding_every_endpoint_opens_no_episode_and_none_disables_the_alert() -> None:
    excluded = poise.NoEligibleEndpoints({poise.IneligibleReason.EXCLUDED: 1}, 1)
    alert = NoEligibleAlert(5.0)
    assert alert.refused(100.0, excluded, failures=1, view=View()) == ()
    assert not alert.episode_open
    off = NoEligibleAlert(None)
    off.refused(100.0, refusal(), failures=1, view=View())
    assert not off.episode_open
    assert off.next_deadline() is None


def test_a_refusal_past_the_deadline_reports_at_once() -> None:
    alert, view = NoEligibleAlert(5.0), View()
    alert.refused(100.0, refusal(), failures=1, view=view)
    alert.refused(103.0, refusal(), failures=2, view=view)
    (event,) = alert.refused(105.5, refusal(), failures=3, view=view)
    assert isinstance(event, poise.NoEligiblePersisting)
    assert event.at == 105.5


def test_an_episode_opened_where_floating_point_rounds_is_still_reported_at_its_deadline() -> None:
    alert, view = NoEligibleAlert(5.0), View()
    alert.refused(3.2, refusal(), failures=1, view=view)  # 3.2 + 5.0 - 3.2 == 4.999999999999999
    deadline = alert.next_deadline()
    assert deadline == 3.2 + 5.0
    (event,) = alert.handle_timer(deadline, failures=1, view=view)
    assert isinstance(event, poise.NoEligiblePersisting)
    assert alert.next_deadline() != deadline  # the next look is later: no look due again at once
