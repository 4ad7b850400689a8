"""What backends say about their own load, per endpoint, and the weight gRPC's weighted round robin makes of it.

Theory of operation
-------------------
A backend that speaks ORCA attaches a load report to its answers (CPU or application
utilization, queries and errors per second). The shell reads it (an HTTP header, gRPC
trailing metadata, or ``permit.report_load``) and hands the numbers to the pool, which keeps
them in the endpoint's :class:`LoadSignal`. The signal turns them into a weight exactly as
gRFC A58 (gRPC's ``weighted_round_robin`` policy) specifies:

* ``utilization`` is the application utilization when it is reported (> 0), else the CPU
  utilization;
* ``weight = qps / (utilization + eps / qps * error_utilization_penalty)`` when both ``qps``
  and ``utilization`` are > 0; a report without them changes no weight;
* a weight is used only once the endpoint has reported weights for ``blackout_period``
  seconds without a gap longer than ``weight_expiration_period`` (a backend that just
  started, or came back, reports numbers that do not describe a steady state yet);
* a weight not refreshed for ``weight_expiration_period`` seconds is no longer used, and the
  next one starts a new blackout.

The picker (:class:`~poise_py._core._pickers.LoadWeightedPicker`) reads :meth:`LoadSignal.weight_at`
every ``weight_update_period`` and gives an endpoint without a usable weight the mean of the
others' (all equal while fewer than two have one). Nothing here reads a clock: ``now`` comes
in with each report and each read.
"""

from __future__ import annotations

import math
from typing import Any

NEVER = -math.inf
"""``updated_at`` of a signal that never had a weight."""


def load_weight(qps: float, eps: float, utilization: float, error_utilization_penalty: float) -> float:
    """The weight of gRFC A58: ``qps / (utilization + eps / qps * error_utilization_penalty)``.

    0.0 without qps or utilization (such a report sets no weight).
    """
    if qps <= 0.0 or utilization <= 0.0:
        return 0.0
    penalty = eps / qps * error_utilization_penalty if eps > 0.0 and error_utilization_penalty > 0.0 else 0.0
    return qps / (utilization + penalty)


class LoadSignal:
    """One endpoint's latest load report and the weight made of it, and how often its backend spoke.

    Attributes:
        report: the latest report as the shell received it (a :class:`~poise_py.LoadReport`;
            opaque here), or None.
        reported_at: when it arrived.
        utilization: the utilization the weight was computed from (application, else CPU).
        qps: queries per second it reported.
        eps: errors per second it reported.
        weight: the latest non-zero weight (:func:`load_weight`), 0.0 before the first.
        updated_at: when ``weight`` was last set (:data:`NEVER` before).
        non_empty_since: when the current run of weights began (the blackout's start).
        reports: how many load reports it sent.
        quota_rests: how many times its provider said its quota was spent.
    """

    report: object
    reported_at: float
    utilization: float
    qps: float
    eps: float
    weight: float
    updated_at: float
    non_empty_since: float
    reports: int
    quota_rests: int

    __slots__ = (
        "eps",
        "non_empty_since",
        "qps",
        "quota_rests",
        "report",
        "reported_at",
        "reports",
        "updated_at",
        "utilization",
        "weight",
    )

    def __init__(self) -> None:
        self.report = None
        self.reported_at = NEVER
        self.utilization = 0.0
        self.qps = 0.0
        self.eps = 0.0
        self.weight = 0.0
        self.updated_at = NEVER
        self.non_empty_since = NEVER
        self.reports = 0
        self.quota_rests = 0

    def update(
        self,
        report: object,
        now: float,
        *,
        utilization: float,
        qps: float,
        eps: float,
        error_utilization_penalty: float,
        weight_expiration_period: float,
    ) -> None:
        """Take one report received at ``now`` (gRFC A58's ``OnLoadReport``)."""
        self.report = report
        self.reported_at = now
        self.reports += 1
        self.utilization = utilization
        self.qps = qps
        self.eps = eps
        weight = load_weight(qps, eps, utilization, error_utilization_penalty)
        if weight <= 0.0:
            return
        if self.updated_at == NEVER or now - self.updated_at >= weight_expiration_period:
            self.non_empty_since = now  # the first weight, or the first after one expired: a new blackout
        self.updated_at = now
        self.weight = weight

    def weight_at(self, now: float, *, blackout_period: float, weight_expiration_period: float) -> float:
        """The weight a scheduler may use at ``now``, or 0.0 (none yet, in blackout, or expired); a pure read."""
        if self.updated_at == NEVER or now - self.updated_at >= weight_expiration_period:
            return 0.0
        if blackout_period > 0.0 and now - self.non_empty_since < blackout_period:
            return 0.0
        return self.weight


def fill_weights(weights: list[float]) -> list[float]:
    """The scheduler's weights (gRFC A58): an unknown (0) weight becomes the known ones' mean.

    All are 1.0 (round robin) while fewer than two are known.
    """
    known = [w for w in weights if w > 0.0]
    if len(known) < 2:
        return [1.0] * len(weights)
    mean = sum(known) / len(known)
    return [w if w > 0.0 else mean for w in weights]


class Answers:
    """What a pool keeps of answers beyond their outcome, in one attribute of the pool.

    One object, because CPython shares an instance dict's keys only up to 30 of them and the
    pool's hot path reads the pool's own; everything here is read on failures, reports and
    timers only.

    Attributes:
        latency_floor: the least latency a failed call is measured as (a latency policy's
            ``failure_penalty``).
        hold: seconds from its start a failed call stays counted in its endpoint's load, at
            least (a load policy's ``failure_penalty``: the pool then times every call).
        holds: when each such hold ends ``(at, seq, state)``: ended by the next selection at
            or after that time (a hold only matters to picks), never by the timer.
        error_utilization_penalty, weight_expiration_period: a load-report policy's knobs for
            turning reports into weights (gRFC A58's defaults otherwise).
        rests: the endpoints resting on a spent quota, and when the quota resets.
    """

    latency_floor: float
    hold: float
    holds: list[tuple[float, int, Any]]
    error_utilization_penalty: float
    weight_expiration_period: float
    rests: dict[Any, float]

    __slots__ = ("error_utilization_penalty", "hold", "holds", "latency_floor", "rests", "weight_expiration_period")

    def __init__(
        self, *, latency_floor: float, hold: float, error_utilization_penalty: float, weight_expiration_period: float
    ) -> None:
        self.latency_floor = latency_floor
        self.hold = hold
        self.holds = []
        self.error_utilization_penalty = error_utilization_penalty
        self.weight_expiration_period = weight_expiration_period
        self.rests = {}
