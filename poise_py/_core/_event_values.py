"""The events the pure core produces, and the base class of every event (values only).

The no-eligible alert (:mod:`poise_py._core._alert`) decides when selections have been
failing for too long and says so with these; :mod:`poise_py._events` defines the rest of
the balancer's events on the same base and re-exports these, so a program matches them
all alike (``poise.NoEligiblePersisting``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import attrs

from .._errors import IneligibleReason, SelectionError
from .._redact import shown_error


def _frozen_reasons(value: Mapping[IneligibleReason, int]) -> Mapping[IneligibleReason, int]:
    return MappingProxyType(dict(value))


def _shown_selection_error(error: SelectionError) -> SelectionError:
    return shown_error(error)


@attrs.frozen(kw_only=True)
class BalancerEvent:
    """Base class of every event.

    Attributes:
        at: the balancer clock's reading when it happened.
    """

    at: float


@attrs.frozen(kw_only=True)
class NoEligiblePersisting(BalancerEvent):
    """Selections have been failing for longer than ``no_eligible_alert_after``.

    Not emitted for one empty result (at start-up, say): only when the condition lasts,
    with no call succeeding meanwhile. Followed by :class:`NoEligibleCleared`.

    Attributes:
        since: when the first failed selection of this episode happened.
        error: the last :class:`SelectionError` a caller got, its message redacted and bounded.
        reasons: how many endpoints were ineligible for each reason, when ``error`` says.
        total: how many endpoints the pool holds.
    """

    since: float
    error: SelectionError = attrs.field(converter=_shown_selection_error)
    reasons: Mapping[IneligibleReason, int] = attrs.field(factory=dict, converter=_frozen_reasons, eq=False, hash=False)
    total: int


@attrs.frozen(kw_only=True)
class NoEligibleCleared(BalancerEvent):
    """The episode a :class:`NoEligiblePersisting` reported is over: calls go through again.

    Attributes:
        since: when the episode began.
    """

    since: float
