"""Selection policies: pick one endpoint from a scope's eligible candidates.

A public policy is a frozen configuration; :meth:`Policy.bind` gives the stateful picker
one scope of one balancer uses (a balancer has a scope per tier, per zone side, and per
panic set), with the balancer's seeded rng injected so every pick is reproducible.

Every pick is O(1), O(log k) in the number of distinct weights, or (weighted least
request only) O(log n). Policies that need a structure over the candidates keep
it in step with the candidate list through optional hooks, called by the scope after
each change, so a pick never scans. Each hook is told of a list of endpoints: one, or a
large discovery update's worth at once (the scope changes in one pass, then tells the
picker once):

* ``added(states)``: ``states`` became candidates;
* ``removed(states)``: ``states`` stopped being candidates;
* ``joined(states)`` / ``left(states)``: the scope's *membership* (every live endpoint
  homed there, eligible or not) changed (consistent hashing builds its table on it, and
  least request its weighted mode);
* ``attach(scope)``: called once with the scope the picker serves (its ``view``, the
  pool's latest clock reading, and whether it is a panic or a degraded scope).

The pickers themselves are in :mod:`poise_py._core._pickers`.

| policy | pick | structure | weights |
|---|---|---|---|
| :class:`RoundRobin` | O(1) | none | ignored |
| :class:`Random` | O(1) | none | ignored |
| :class:`WeightedRandom` | O(1) expected | weight-class buckets | shares |
| :class:`WeightedRoundRobin` | O(log k), k distinct weights | EDF heap of weight classes | shares, evenly spread |
| :class:`PowerOfTwoChoices` | O(1); O(log n) weighted | EDF heap | Envoy least-request |
| :class:`PeakEwma` | O(1) | none | ignored (latency decides) |
| :class:`WeightedByLoad` | O(log n) | EDF heap, rebuilt each period | ignored (load reports decide) |
| :class:`ConsistentHash` | O(1) expected | Maglev table | slot shares |
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, ClassVar, Protocol

import attrs

from .._errors import ConfigError
from .._knobs import check_count, check_number
from ._maglev import is_prime
from ._pickers import (
    HashPicker,
    LoadWeightedPicker,
    P2CPicker,
    PeakEwmaPicker,
    Picker,
    RandomPicker,
    RoundRobinPicker,
    WeightedRandomPicker,
    WeightedRoundRobinPicker,
)
from ._record import UNMEASURED

if TYPE_CHECKING:
    from ._record import Member


class Policy(Protocol):
    """A selection policy's configuration.

    Optional attributes a policy may define: ``measures_latency`` (the pool reads the
    clock on every pick and completion, keeps it in the scopes' :class:`PoolView`, and
    calls ``observe(member, latency, now)`` on the policy when a call completes),
    ``tracks_load`` (home scopes keep their in-flight total, ``Scope.load_total``),
    ``reads_loads`` (default True; False tells the pool its picks never read ``loads``,
    so the hot path need not keep them current) and ``failure_penalty`` (seconds a failed
    call costs at least: a policy that measures latency is fed at least that much for a
    failure; one that does not keeps the failed call in :attr:`PoolView.held` until that
    long after it started, and the pool times every call) and ``reads_time`` (the pool
    reads the clock on every pick and keeps it in :attr:`PoolView.now`).
    """

    def bind(self, rng: random.Random) -> Picker:
        """Return a fresh picker using ``rng``."""


# -- round robin and random ----------------------------------------------------------------


@attrs.frozen
class RoundRobin:
    """Cycle through the eligible endpoints in turn. O(1); weights are ignored."""

    reads_loads: ClassVar[bool] = False

    def bind(self, rng: random.Random) -> Picker:
        """Return a round-robin picker (starting at a random offset)."""
        return RoundRobinPicker(rng.randrange(1 << 30))


@attrs.frozen
class Random:
    """Pick uniformly at random. O(1); weights are ignored."""

    reads_loads: ClassVar[bool] = False

    def bind(self, rng: random.Random) -> Picker:
        """Return a uniform random picker."""
        return RandomPicker(rng.random)


# -- weighted --------------------------------------------------------------------------------


@attrs.frozen
class WeightedRandom:
    """Pick at random in proportion to ``Endpoint.weight``.

    Endpoints are grouped by weight class (powers of two) as they come and go; a pick
    draws a class by its total weight, then a member of it with rejection, so it is O(1)
    expected (under two draws on average), exact, and independent of the pool size.
    Use it for stateless weighted spreading (no rotation to keep in step across
    processes).
    """

    reads_loads: ClassVar[bool] = False

    def bind(self, rng: random.Random) -> Picker:
        """Return a weighted random picker."""
        return WeightedRandomPicker(rng.random)


@attrs.frozen
class WeightedRoundRobin:
    """Rotate through the endpoints in proportion to ``Endpoint.weight``, smoothly.

    Smooth in nginx's sense: an endpoint's turns are spread over the rotation, never in
    a burst (weights 5, 1, 1 give ``a b a a a c a``, not ``a a a a a b c``). It is
    realised as Envoy's earliest-deadline-first schedule with integer deadlines and
    golden-ratio start phases, over weight classes: the endpoints of one weight share
    one schedule entry and take its turns in rotation, so a pick is O(log k) for ``k``
    distinct weights, independent of the number of endpoints (nginx scans all of
    them). Over every ``sum(weights)`` picks of a fixed set each endpoint gets exactly
    its weight, and at any point each count is within two of its exact share.
    """

    reads_loads: ClassVar[bool] = False

    def bind(self, rng: random.Random) -> Picker:
        """Return a smooth weighted round-robin picker."""
        return WeightedRoundRobinPicker()


# -- load aware ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class PowerOfTwoChoices:
    """Least in-flight of two random endpoints; with unequal weights, Envoy's least-request.

    Equal weights (the default): draw two endpoints at random and use the one with
    fewer permits in flight, ties to the first draw. The least-loaded of two random
    choices balances exponentially better than one random choice at O(1) cost
    (Mitzenmacher). Unequal weights among the scope's endpoints (healthy or not, so the
    mode never flips with health): Envoy's weighted least-request,
    an earliest-deadline-first rotation in which an endpoint's effective weight is
    ``weight / (in_flight + 1) ** bias``, re-evaluated each time it is picked; O(log n).
    With no calls in flight it gives exact weight shares; load shifts them away from
    busy endpoints.

    With ``failure_penalty`` set, a failed call (TRANSIENT or SUSPECT) stays counted in its
    endpoint's load until ``failure_penalty`` seconds after it started, as Linkerd's load
    biaser charges a failure a penalty latency: an endpoint that fails fast (a 503 in a
    millisecond) would otherwise look like the emptiest and attract the traffic it fails.
    It is off by default: it makes the balancer read the clock on every call, and the
    default circuit ejects such an endpoint within its first calls anyway.

    Attributes:
        bias: how strongly in-flight load discounts weight (Envoy's
            ``active_request_bias``, default 1.0; 0 makes it plain weighted round robin).
        failure_penalty: the least time a failed call counts as in flight, seconds from
            its start (default 0: off).
    """

    bias: float = attrs.field(default=1.0)
    failure_penalty: float = attrs.field(default=0.0)

    @bias.validator
    def _check_bias(self, attribute: object, value: float) -> None:
        check_number("PowerOfTwoChoices.bias", value, low=0.0, high=16.0)

    @failure_penalty.validator
    def _check_penalty(self, attribute: object, value: float) -> None:
        check_number("PowerOfTwoChoices.failure_penalty", value, low=0.0, high=3600.0)

    def bind(self, rng: random.Random) -> Picker:
        """Return a power-of-two-choices picker."""
        return P2CPicker(rng.random, float(self.bias))


@attrs.frozen(kw_only=True)
class PeakEwma:
    """Least expected latency: peak-EWMA round-trip time x (in flight + 1), of two random endpoints.

    Each endpoint keeps an exponentially weighted moving average of its completed calls'
    latency (errors included: a returned error is completed work) that jumps up at once
    to a slower observation (the *peak*) and decays towards faster ones with time
    constant ``decay``; between observations it decays towards zero, so an endpoint
    that stopped being picked for being slow is tried again. An endpoint never measured
    costs ``default_rtt``. Two random endpoints are compared on ``ewma x (in_flight + 1)``
    (Finagle's and Linkerd's balancer): O(1). Weights are ignored; latency decides.

    A failed call (TRANSIENT or SUSPECT) counts as taking at least ``failure_penalty``
    seconds (Linkerd's load biaser), so an endpoint that fails fast does not look fast.

    Attributes:
        default_rtt: the latency assumed for an endpoint with no completed call, seconds.
        decay: the EWMA's time constant, seconds.
        failure_penalty: the least latency a failed call counts as, seconds (default 1.0;
            0 turns the penalty off).
    """

    measures_latency: ClassVar[bool] = True

    default_rtt: float = attrs.field(default=0.1)
    decay: float = attrs.field(default=10.0)
    failure_penalty: float = attrs.field(default=1.0)

    @default_rtt.validator
    def _check_rtt(self, attribute: object, value: float) -> None:
        check_number("PeakEwma.default_rtt", value, low=0.0, high=3600.0)

    @decay.validator
    def _check_decay(self, attribute: object, value: float) -> None:
        check_number("PeakEwma.decay", value, low=0.0, high=86400.0, low_open=True)

    @failure_penalty.validator
    def _check_penalty(self, attribute: object, value: float) -> None:
        check_number("PeakEwma.failure_penalty", value, low=0.0, high=3600.0)

    def bind(self, rng: random.Random) -> Picker:
        """Return a peak-EWMA picker."""
        return PeakEwmaPicker(rng.random, float(self.default_rtt), float(self.decay))

    def observe(self, member: Member, latency: float, now: float) -> None:
        """Feed one completed call's latency into ``member``'s estimate."""
        at = member.ewma_at
        if at == UNMEASURED or latency >= member.ewma:
            member.ewma = latency
        else:
            w = math.exp(-max(0.0, now - at) / self.decay)
            member.ewma = member.ewma * w + latency * (1.0 - w)
        member.ewma_at = now


# -- load reports ----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class WeightedByLoad:
    """Weighted round robin by the load backends report: gRPC's ``weighted_round_robin`` (gRFC A58).

    Each endpoint's weight comes from the ORCA load reports its backend attaches to its
    answers (read by the httpx transport and the gRPC channel, or given with
    ``permit.report_load``): ``qps / (utilization + eps / qps * error_utilization_penalty)``,
    where utilization is the application utilization if reported, else the CPU utilization.
    So an endpoint that serves more queries per unit of utilization (a bigger or less
    loaded machine) gets proportionally more calls, whatever ``Endpoint.weight`` says (it
    is ignored, as in gRPC). A new weight is used only after ``blackout_period`` seconds of
    reports, and stops being used ``weight_expiration_period`` seconds after the last one;
    an endpoint without a usable weight gets the mean of the others', and while fewer than
    two have one the policy is plain round robin. The schedule is rebuilt every
    ``weight_update_period`` seconds; between rebuilds a pick is an earliest-deadline-first
    step, O(log n). The balancer reads the clock on every call.

    Attributes:
        blackout_period: seconds of reports before an endpoint's weight is used (gRPC: 10).
        weight_expiration_period: seconds after its last report a weight stops being used
            (gRPC: 180).
        weight_update_period: seconds between schedule rebuilds (gRPC: 1; at least 0.1).
        error_utilization_penalty: how much a reported error rate counts as utilization
            (gRPC: 1.0).
    """

    reads_loads: ClassVar[bool] = False
    reads_time: ClassVar[bool] = True

    blackout_period: float = attrs.field(default=10.0)
    weight_expiration_period: float = attrs.field(default=180.0)
    weight_update_period: float = attrs.field(default=1.0)
    error_utilization_penalty: float = attrs.field(default=1.0)

    @blackout_period.validator
    def _check_blackout(self, attribute: object, value: float) -> None:
        check_number("WeightedByLoad.blackout_period", value, low=0.0, high=86400.0)

    @weight_expiration_period.validator
    def _check_expiration(self, attribute: object, value: float) -> None:
        check_number("WeightedByLoad.weight_expiration_period", value, low=0.0, high=86400.0, low_open=True)

    @weight_update_period.validator
    def _check_update(self, attribute: object, value: float) -> None:
        check_number("WeightedByLoad.weight_update_period", value, low=0.1, high=3600.0)

    @error_utilization_penalty.validator
    def _check_penalty(self, attribute: object, value: float) -> None:
        check_number("WeightedByLoad.error_utilization_penalty", value, low=0.0, high=1000.0)

    def bind(self, rng: random.Random) -> Picker:
        """Return a load-weighted round-robin picker."""
        return LoadWeightedPicker(rng.random, self)


# -- consistent hashing ----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ConsistentHash:
    """Send each ``acquire(key=...)`` key to the same endpoint while it can take it: Maglev.

    Lookups are O(1) in a Maglev table (see ``docs/routing.md`` for why Maglev rather
    than rendezvous hashing) built over the scope's members, whatever their health, and
    rebuilt only when membership changes. A key whose endpoint cannot take the call
    (ejected, draining, excluded by the caller, or over its bounded load) walks on along
    its own probe sequence, so only that endpoint's keys move, and they come back when
    it recovers. Adding one endpoint to ``n`` moves about ``1/(n+1)`` of the keys. A call
    without a key is placed uniformly at random.

    With ``balance_factor=c`` (bounded loads, Mirrokni, Thorup and Zadimoghaddam), an
    endpoint already carrying ``ceil(c x (in_flight_total + 1) x weight / total_weight)``
    calls is skipped, so one hot key cannot overload its endpoint; ``c >= 1`` always
    leaves some endpoint under its bound, and :class:`CapacityOverflow` is raised if it
    ever does not. Panic picks (see :class:`Panic`) do not apply the bound.

    Attributes:
        table_size: Maglev table size, a prime (default 65537, as Envoy); it grows to the
            next prime of its doubling ladder when the scope has more than
            ``table_size / 8`` members.
        balance_factor: the bounded-load factor ``c >= 1``, or None for plain hashing.
    """

    table_size: int = attrs.field(default=65537)
    balance_factor: float | None = attrs.field(default=None)

    @table_size.validator
    def _check_table_size(self, attribute: object, value: int) -> None:
        check_count("ConsistentHash.table_size", value, minimum=7, maximum=1 << 26)
        if not is_prime(value):
            raise ConfigError("ConsistentHash.table_size", f"must be prime (Maglev), got {value!r}")

    @balance_factor.validator
    def _check_balance(self, attribute: object, value: float | None) -> None:
        if value is not None:
            check_number("ConsistentHash.balance_factor", value, low=1.0, high=1000.0)

    @property
    def tracks_load(self) -> bool:
        """Bounded loads need the scope's in-flight total."""
        return self.balance_factor is not None

    @property
    def reads_loads(self) -> bool:
        """Only bounded loads read the in-flight counts."""
        return self.balance_factor is not None

    def bind(self, rng: random.Random) -> Picker:
        """Return a Maglev picker."""
        return HashPicker(rng.random, self.table_size, self.balance_factor)
