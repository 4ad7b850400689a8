"""Pool-relative outlier detection: Envoy's success-rate ejection, as pure arithmetic.

Every ``interval`` seconds the pool asks :func:`success_rate_outliers` which endpoints'
success rates over the interval fall below ``mean - stdev_factor x stdev`` of the
endpoints that had at least ``request_volume`` calls in it, provided at least
``minimum_hosts`` had. The pool then ejects them, worst first, as far as
``max_ejection_percent`` allows (the rest are degraded), with the usual escalation and
half-open recovery. Nothing here reads a clock: :class:`OutlierSampler` keeps each
endpoint's counters at the last evaluation, and :func:`success_rate_outliers` judges one
interval's samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

import attrs

from .._faults import Fault
from .._knobs import RESOLUTION, check_count, check_duration, check_number

if TYPE_CHECKING:
    from ._record import Member

T = TypeVar("T")
_CALLER = list(Fault).index(Fault.CALLER)


@attrs.frozen(kw_only=True)
class SuccessRateEjection:
    """Eject endpoints whose success rate is an outlier in their pool (Envoy's success-rate detection).

    ``CircuitPolicy(success_rate=SuccessRateEjection())``. Every ``interval`` seconds, the
    endpoints with at least ``request_volume`` calls in the interval are compared; when
    there are at least ``minimum_hosts`` of them, any whose success rate is below
    ``mean - stdev_factor x stdev`` is ejected (subject to ``max_ejection_percent``,
    escalation and half-open recovery like every trip). A call counts as failed when it
    ended in any fault but CALLER.

    Attributes:
        stdev_factor: how many standard deviations under the mean is an outlier
            (Envoy's ``success_rate_stdev_factor`` / 1000: 1.9).
        minimum_hosts: endpoints with the request volume needed to judge at all
            (Envoy's ``success_rate_minimum_hosts``: 5).
        request_volume: calls in the interval an endpoint needs to be judged, or to count
            towards the mean (Envoy's ``success_rate_request_volume``: 100).
        interval: seconds between evaluations (Envoy's ``interval``: 10 s).
    """

    stdev_factor: float = 1.9
    minimum_hosts: int = 5
    request_volume: int = 100
    interval: float = 10.0

    def __attrs_post_init__(self) -> None:
        check_number("SuccessRateEjection.stdev_factor", self.stdev_factor, low=0.0, high=100.0, low_open=True)
        check_count("SuccessRateEjection.minimum_hosts", self.minimum_hosts, minimum=2)
        check_count("SuccessRateEjection.request_volume", self.request_volume)
        check_duration("SuccessRateEjection.interval", self.interval, minimum=RESOLUTION)


def success_rate_outliers(config: SuccessRateEjection, samples: Sequence[tuple[T, int, int]]) -> list[T]:
    """The outliers among ``(item, calls, failures)`` samples of one interval, worst first.

    Only samples with ``calls >= request_volume`` are judged and count towards the mean
    and the (population) standard deviation; with fewer than ``minimum_hosts`` of them
    nobody is an outlier.
    """
    judged = [(item, (calls - failures) / calls) for item, calls, failures in samples if calls >= config.request_volume]
    if len(judged) < config.minimum_hosts:
        return []
    rates = [rate for _, rate in judged]
    mean = math.fsum(rates) / len(rates)
    stdev = math.sqrt(math.fsum((r - mean) ** 2 for r in rates) / len(rates))
    threshold = mean - config.stdev_factor * stdev
    below = [(rate, i) for i, (_, rate) in enumerate(judged) if rate < threshold]
    below.sort()
    return [judged[i][0] for _, i in below]


class OutlierSampler:
    """The pool's success-rate detection state: each endpoint's counters at the last evaluation.

    Each evaluation reads every endpoint's calls and failures (every fault but CALLER)
    from its counters, so the hot path pays nothing; only CLOSED circuits are judged.
    """

    __slots__ = ("_seen", "config")

    def __init__(self, config: SuccessRateEjection) -> None:
        self.config = config
        self._seen: dict[Member, tuple[int, int]] = {}

    def outliers(self, members: Iterable[Member]) -> list[Member]:
        """The outliers of the interval since the last call, worst first."""
        seen = self._seen
        fresh: dict[Member, tuple[int, int]] = {}
        samples: list[tuple[Member, int, int]] = []
        for member in members:
            faults = member.faults
            failures = sum(faults) - faults[_CALLER]
            calls = member.successes + failures
            fresh[member] = (calls, failures)
            calls0, failures0 = seen.get(member, (0, 0))
            if member.circuit.fast_ticket is not None:  # CLOSED
                samples.append((member, calls - calls0, failures - failures0))
        self._seen = fresh
        return success_rate_outliers(self.config, samples)
