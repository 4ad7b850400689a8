"""Pool-relative outlier detection: Envoy's success-rate ejection, as pure arithmetic.

Every ``interval`` seconds the pool asks :func:`success_rate_outliers` which endpoints'
success rates over the interval fall below ``mean - stdev_factor x stdev`` of the
endpoints that had at least ``request_volume`` calls in it, provided at least
``minimum_hosts`` had. The pool then ejects them, worst first, as far as
``max_ejection_percent`` allows (the rest are degraded), with the usual escalation and
half-open recovery. Nothing here reads a clock or keeps state: the pool passes each
endpoint's calls and failures of the interval.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

import attrs

from .._endpoint import check_duration
from .._errors import ConfigError
from .._faults import Fault

if TYPE_CHECKING:
    from ._record import EndpointState

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
        f = self.stdev_factor
        if isinstance(f, bool) or not isinstance(f, int | float) or not (0.0 < f <= 100.0):
            raise ConfigError("SuccessRateEjection.stdev_factor", f"must be a number in (0, 100], got {f!r}")
        n = self.minimum_hosts
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ConfigError("SuccessRateEjection.minimum_hosts", f"must be an int >= 2, got {n!r}")
        v = self.request_volume
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError("SuccessRateEjection.request_volume", f"must be an int >= 1, got {v!r}")
        check_duration("SuccessRateEjection.interval", self.interval)


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
        self._seen: dict[EndpointState, tuple[int, int]] = {}

    def outliers(self, members: Iterable[EndpointState]) -> list[EndpointState]:
        """The outliers of the interval since the last call, worst first."""
        seen = self._seen
        fresh: dict[EndpointState, tuple[int, int]] = {}
        samples: list[tuple[EndpointState, int, int]] = []
        for state in members:
            faults = state.faults
            failures = sum(faults) - faults[_CALLER]
            calls = state.successes + failures
            fresh[state] = (calls, failures)
            calls0, failures0 = seen.get(state, (0, 0))
            if state.circuit.admit is not None:  # CLOSED
                samples.append((state, calls - calls0, failures - failures0))
        self._seen = fresh
        return success_rate_outliers(self.config, samples)
