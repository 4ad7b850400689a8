"""Load control on the pure pool: concurrency caps, adaptive limits (AIMD, Gradient2) and slow start."""

from __future__ import annotations

import collections
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import poise_py as poise
from poise_py._core._concurrency import LoadPolicy
from poise_py._core._limits import ExpAverage
from poise_py._core._listener import NullListener
from poise_py._core._pool import Pool
from poise_py._core._record import Member
from tests.support.routing import EVERY_POLICY


class Heard(NullListener):
    def __init__(self) -> None:
        self.ramps: list[tuple[str, bool]] = []
        self.limits: list[tuple[str, int]] = []

    def ramp(self, state: Member, *, started: bool) -> None:
        self.ramps.append((state.endpoint.id, started))

    def limit_changed(self, state: Member, limit: int, previous: int) -> None:
        self.limits.append((state.endpoint.id, limit))


def pool_of(
    eps: list[poise.Endpoint],
    *,
    policy: poise.Policy | None = None,
    load: LoadPolicy,
    circuit: poise.CircuitPolicy | None = None,
) -> tuple[Pool, Heard]:
    heard = Heard()
    pool = Pool(
        circuit or poise.CircuitPolicy(max_ejection_percent=1.0),
        policy or poise.RoundRobin(),
        random.Random(3),
        listener=heard,
        load=load,
    )
    pool.apply(0.0, added=eps)
    return pool, heard


# -- the published formulas -------------------------------------------------------------------


def test_aimd_backs_off_multiplicatively_on_a_drop_and_grows_by_one_only_while_used() -> None:
    limiter = poise.AIMD(initial_limit=10, min_limit=2, max_limit=12, backoff_ratio=0.9).limiter()
    assert limiter.sample(0.1, 5, drop=False) == 11  # 5 * 2 >= 10: used, grows by one
    assert limiter.sample(0.1, 4, drop=False) == 11  # 4 * 2 < 11: not used, stays
    assert limiter.sample(0.1, 11, drop=True) == 9  # int(11 * 0.9)
    assert limiter.sample(0.1, 9, drop=False) == 10
    for _ in range(5):
        limiter.sample(0.1, 12, drop=False)
    assert limiter.limit == 12  # max_limit
    for _ in range(30):
        limiter.sample(0.1, 12, drop=True)
    assert limiter.limit == 2  # min_limit


def test_aimd_counts_a_call_slower_than_its_timeout_as_a_drop() -> None:
    limiter = poise.AIMD(initial_limit=10, timeout=0.5).limiter()
    assert limiter.sample(0.6, 10, drop=False) == 9
    assert limiter.sample(0.4, 10, drop=False) == 10


def test_netflix_exponential_average_is_a_plain_mean_for_ten_samples_then_an_ema() -> None:
    average = ExpAverage(window=9)  # factor 2 / (9 + 1) = 0.2
    for sample in range(1, 11):
        average.add(float(sample))
    assert average.value == pytest.approx(5.5)
    assert average.add(15.5) == pytest.approx(5.5 * 0.8 + 15.5 * 0.2)


def test_gradient2_follows_netflix_update_step_by_step() -> None:
    config = poise.Gradient2(initial_limit=20, smoothing=0.2, rtt_tolerance=1.5, queue_size=4)
    limiter = config.limiter()
    # First sample: long = short = 0.1; gradient = min(1, 1.5) = 1; new = 20 + 4; smoothed 20.8.
    assert limiter.sample(0.1, 20, drop=False) == 20
    assert limiter.estimate == pytest.approx(20 * 0.8 + 24 * 0.2)
    # Queueing: long = mean(0.1, 0.4) = 0.25; gradient = clamp(1.5 * 0.25 / 0.4, 0.5, 1) = 0.9375.
    before = limiter.estimate
    limiter.sample(0.4, 20, drop=False)
    new = before * 0.9375 + 4
    assert limiter.estimate == pytest.approx(before * 0.8 + new * 0.2)
    # A far slower call: the gradient is clamped at 0.5.
    before = limiter.estimate
    long = (0.1 + 0.4 + 10.0) / 3
    limiter.sample(10.0, 20, drop=False)
    assert limiter.estimate == pytest.approx(before * 0.8 + (before * max(0.5, 1.5 * long / 10.0) + 4) * 0.2)


def test_gradient2_does_not_move_while_less_than_half_its_limit_is_used() -> None:
    limiter = poise.Gradient2(initial_limit=20).limiter()
    limiter.sample(0.1, 9, drop=False)
    assert limiter.estimate == 20.0


def test_gradient2_pulls_the_long_average_down_when_it_is_twice_the_latest_call() -> None:
    limiter = poise.Gradient2(initial_limit=20).limiter()
    limiter.sample(1.0, 20, drop=False)
    limiter.sample(0.1, 20, drop=False)  # long = 0.55 > 2 * 0.1: pulled down by 5%
    assert limiter.long_rtt == pytest.approx(0.55 * 0.95)


@given(samples=st.lists(st.tuples(st.floats(1e-4, 10.0), st.integers(0, 2000), st.booleans()), max_size=200))
@settings(max_examples=100, deadline=None)
def test_every_limit_stays_within_its_bounds_whatever_the_samples(samples: list[tuple[float, int, bool]]) -> None:
    for config in (poise.AIMD(min_limit=3, max_limit=50), poise.Gradient2(min_limit=3, max_limit=50)):
        limiter = config.limiter()
        for rtt, in_flight, drop in samples:
            assert 3 <= limiter.sample(rtt, in_flight, drop=drop) <= 50


def test_envoy_slow_start_factor() -> None:
    linear = poise.SlowStart(window=30.0, aggression=1.0, min_weight=0.1)
    assert linear.factor(0.0) == pytest.approx(0.1)  # max(t, 1) / 30 = 0.033 -> min_weight
    assert linear.factor(15.0) == pytest.approx(0.5)
    assert linear.factor(30.0) == 1.0
    eager = poise.SlowStart(window=100.0, aggression=2.0, min_weight=0.01)
    assert eager.factor(25.0) == pytest.approx(0.25**0.5)
    assert eager.factor(0.5) == pytest.approx(0.01**0.5)  # the time factor is at least 1 s
    short = poise.SlowStart(window=0.5, aggression=0.0005)  # 1 s / 0.5 s = 2, to the 2000th power
    assert short.factor(0.3) == 1.0  # a window under the 1 s floor is over at once, not an OverflowError
    assert poise.SlowStart(window=100.0, aggression=0.0005).factor(50.0) == 0.1  # 0.5**2000: min_weight


@pytest.mark.parametrize(
    ("make", "knob"),
    [
        (lambda: poise.AIMD(backoff_ratio=1.0), "AIMD.backoff_ratio"),
        (lambda: poise.AIMD(min_limit=5, max_limit=4), "AIMD.max_limit"),
        (lambda: poise.AIMD(initial_limit=0), "AIMD.initial_limit"),
        (lambda: poise.AIMD(timeout=0), "AIMD.timeout"),
        (lambda: poise.Gradient2(smoothing=0), "Gradient2.smoothing"),
        (lambda: poise.Gradient2(rtt_tolerance=0.9), "Gradient2.rtt_tolerance"),
        (lambda: poise.Gradient2(initial_limit=2, min_limit=3), "Gradient2.initial_limit"),
        (lambda: poise.AdaptiveConcurrency("aimd"), "AdaptiveConcurrency.algorithm"),  # type: ignore[arg-type]
        (lambda: poise.SlowStart(window=0), "SlowStart.window"),
        (lambda: poise.SlowStart(aggression=0), "SlowStart.aggression"),
        (lambda: poise.SlowStart(min_weight=1.5), "SlowStart.min_weight"),
        (lambda: poise.Endpoint("a", metadata={"max_in_flight": 0}), "Endpoint.metadata['max_in_flight']"),
        (lambda: poise.Endpoint("a", metadata={"max_in_flight": "8"}), "Endpoint.metadata['max_in_flight']"),
    ],
)
def test_every_load_knob_is_checked_naming_it(make: object, knob: str) -> None:
    with pytest.raises(poise.ConfigError) as info:
        make()  # type: ignore[operator]
    assert info.value.knob == knob


# -- caps ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", EVERY_POLICY, ids=lambda p: type(p).__name__)
def test_every_policy_passes_over_an_endpoint_at_its_cap_and_sheds_when_all_are(policy: poise.Policy) -> None:
    eps = [poise.Endpoint("a"), poise.Endpoint("b", metadata={"max_in_flight": 2}), poise.Endpoint("c")]
    pool, _ = pool_of(eps, policy=policy, load=LoadPolicy(max_in_flight=1))
    held = [pool.select(0.0, key="k") for _ in range(4)]
    assert collections.Counter(s.endpoint.id for s, *_ in held) == {"a": 1, "b": 2, "c": 1}
    with pytest.raises(poise.Overloaded) as info:
        pool.select(0.0, key="k")
    assert info.value.at_limit == 3
    state, ticket, now, _ = held[0]
    pool.succeed(state, ticket, 0.0, now)
    again, *_ = pool.select(0.0, key="k")
    assert again is state  # the only endpoint under its cap


def _serve(pool: Pool, endpoint_id: str, start: float, latency: float) -> None:
    """One successful call to ``endpoint_id`` taking ``latency`` seconds from ``start``."""
    for _ in range(len(pool.members)):
        member, ticket, started, _ = pool.select(start)
        if member.endpoint.id == endpoint_id:
            pool.succeed(member, ticket, started + latency, started)
            return
        pool.cancel(member, ticket)
    raise AssertionError(f"{endpoint_id} was never picked")


def test_overloaded_says_when_the_quickest_full_endpoint_frees_a_slot_from_its_gradient2_average() -> None:
    one = poise.Gradient2(initial_limit=1, min_limit=1, max_limit=1)
    eps = [poise.Endpoint(n) for n in "abc"]
    pool, _ = pool_of(eps, load=LoadPolicy(adaptive=poise.AdaptiveConcurrency(one)))
    for endpoint_id, latency in (("a", 0.4), ("b", 0.2), ("c", 0.05)):
        _serve(pool, endpoint_id, 1.0, latency)
    pool.select(10.0, exclude=["c"])
    pool.select(10.0, exclude=["c"])  # a and b are full; c is not, but excluded
    with pytest.raises(poise.Overloaded) as info:
        pool.select(10.0, exclude=["c"])
    assert info.value.at_limit == 2
    assert info.value.retry_after == pytest.approx(10.2)  # b's average, not c's: c is not full


def test_overloaded_reads_peak_ewmas_latency_under_a_fixed_cap() -> None:
    eps = [poise.Endpoint("a"), poise.Endpoint("b")]
    pool, _ = pool_of(eps, policy=poise.PeakEwma(), load=LoadPolicy(max_in_flight=1))
    _serve(pool, "a", 1.0, 0.3)
    _serve(pool, "b", 1.0, 0.5)
    pool.select(5.0)
    pool.select(5.0)
    with pytest.raises(poise.Overloaded) as info:
        pool.select(5.0)
    assert info.value.retry_after == pytest.approx(5.3)


def test_overloaded_has_no_retry_after_when_nothing_was_timed() -> None:
    pool, _ = pool_of(
        [poise.Endpoint("a")],
        load=LoadPolicy(adaptive=poise.AdaptiveConcurrency(poise.AIMD(initial_limit=1, max_limit=1))),
    )
    _serve(pool, "a", 1.0, 0.3)  # AIMD keeps no average latency
    pool.select(2.0)
    with pytest.raises(poise.Overloaded) as info:
        pool.select(2.0)
    assert info.value.retry_after is None


def test_a_call_passed_over_an_endpoint_at_its_cap_is_counted_as_limited() -> None:
    pool, _ = pool_of([poise.Endpoint("a"), poise.Endpoint("b")], load=LoadPolicy(max_in_flight=1))
    first = pool.select(0.0)
    second = pool.select(0.0)
    moved = second if second[0] is not first[0] else first
    assert {first[3].mode, second[3].mode} <= {poise.DecisionMode.HEALTHY, poise.DecisionMode.LIMITED}
    limited = [s for s in (first, second) if s[3].mode is poise.DecisionMode.LIMITED]
    for state, *_ in limited:
        assert state.mode_selections[list(poise.DecisionMode).index(poise.DecisionMode.LIMITED)] == 1
    assert moved[0].inflight == 1


def test_an_endpoints_metadata_cap_follows_an_update() -> None:
    pool, _ = pool_of([poise.Endpoint("a", metadata={"max_in_flight": 1})], load=LoadPolicy(max_in_flight=5))
    pool.select(0.0)
    with pytest.raises(poise.Overloaded):
        pool.select(0.0)
    pool.apply(0.0, updated=[poise.Endpoint("a", metadata={"max_in_flight": 3})])
    pool.select(0.0)
    pool.select(0.0)
    with pytest.raises(poise.Overloaded):
        pool.select(0.0)


def test_without_any_load_knob_no_endpoint_carries_load_control() -> None:
    pool, _ = pool_of([poise.Endpoint("a")], load=LoadPolicy())
    state, *_ = pool.select(0.0)
    assert pool.control(state) is None
    for _ in range(100):
        pool.select(0.0)  # no cap: every call goes through


# -- adaptive limits ------------------------------------------------------------------------------


def test_an_adaptive_limit_learns_from_completed_calls_and_ignores_cancellations() -> None:
    pool, heard = pool_of(
        [poise.Endpoint("a")], load=LoadPolicy(adaptive=poise.AdaptiveConcurrency(poise.AIMD(initial_limit=4)))
    )
    held = [pool.select(0.0) for _ in range(4)]
    with pytest.raises(poise.Overloaded):
        pool.select(0.0)
    state, ticket, _, _ = held[0]
    pool.cancel(state, ticket)  # not a sample
    control = pool.control(state)
    assert control is not None
    assert control.limit == 4
    for state, ticket, _, _ in held[1:3]:
        pool.succeed(state, ticket, 0.05, 0.0)  # 3 in flight of 4: used (+1); then 2 of 5: not used
    assert control.limit == 5
    assert heard.limits == []  # a nudge of one is not reported: a step is a quarter, at least 2
    state, ticket, _, _ = held[3]
    pool.complete(state, ticket, poise.Fault.SUSPECT, 0.2, latency=0.2)  # a drop: int(5 * 0.9)
    assert control.limit == 4
    held = [pool.select(0.0) for _ in range(3)]
    pool.complete(held[0][0], held[0][1], poise.Fault.CALLER, 0.2, latency=0.2)  # the caller's: 3 of 4, used
    assert control.limit == 5
    assert heard.limits == []
    for _ in range(3):  # drops: 5 -> 4 -> 3 -> 2, reported once it is 2 below the last report (4)
        state, ticket, _, _ = pool.select(0.0)
        pool.complete(state, ticket, poise.Fault.SUSPECT, 0.2, latency=0.2)
    assert control.limit == 2
    assert heard.limits == [("a", 2)]


def test_a_fixed_cap_bounds_an_adaptive_limit() -> None:
    load = LoadPolicy(max_in_flight=2, adaptive=poise.AdaptiveConcurrency(poise.AIMD(initial_limit=10)))
    pool, _ = pool_of([poise.Endpoint("a")], load=load)
    pool.select(0.0)
    pool.select(0.0)
    with pytest.raises(poise.Overloaded):
        pool.select(0.0)


# -- slow start ---------------------------------------------------------------------------------


def share_of(pool: Pool, endpoint_id: str, now: float, n: int = 4000) -> float:
    """The share of ``n`` sequential calls (each 50 ms) that go to ``endpoint_id`` at ``now``."""
    hits = 0
    for _ in range(n):
        state, ticket, _, _ = pool.select(now)
        hits += state.endpoint.id == endpoint_id
        pool.succeed(state, ticket, now, now - 0.05)
    return hits / n


@pytest.mark.parametrize(
    "policy",
    [*EVERY_POLICY[:5], poise.PeakEwma(default_rtt=0.05), EVERY_POLICY[6]],  # d measured like the rest
    ids=lambda p: type(p).__name__,
)
def test_every_policy_gives_a_joining_endpoint_its_slow_start_share(policy: poise.Policy) -> None:
    eps = [poise.Endpoint(i) for i in "abc"]
    pool, heard = pool_of(eps, policy=policy, load=LoadPolicy(slow_start=poise.SlowStart(window=100.0)))
    assert heard.ramps == []  # the first members start together
    pool.apply(0.0, added=[poise.Endpoint("d")])
    assert heard.ramps == [("d", True)]
    early = share_of(pool, "d", 10.0)  # factor 0.1 of a quarter
    late = share_of(pool, "d", 60.0)  # factor 0.6
    assert early < 0.25 * 0.4
    assert early < late < 0.25 * 1.15
    assert share_of(pool, "d", 100.0) == pytest.approx(0.25, abs=0.05)
    assert heard.ramps == [("d", True), ("d", False)]


def test_an_endpoint_readmitted_after_an_ejection_ramps_up_again() -> None:
    circuit = poise.CircuitPolicy(
        consecutive_failures=1,
        minimum_volume=1,
        max_ejection_percent=1.0,
        escalation=poise.Escalation(base=5.0, jitter=0.0),
    )
    eps = [poise.Endpoint("a"), poise.Endpoint("b")]
    pool, heard = pool_of(eps, load=LoadPolicy(slow_start=poise.SlowStart(window=30.0)), circuit=circuit)
    state = pool.members["a"]
    while True:
        picked, ticket, _, _ = pool.select(0.0)
        if picked is state:
            pool.complete(picked, ticket, poise.Fault.SUSPECT, 0.0, latency=0.0)
            break
        pool.succeed(picked, ticket, 0.0, 0.0)
    assert state.circuit.state is poise.CircuitState.OPEN
    pool.handle_timer(6.0)  # HALF_OPEN: one probe
    probe, ticket, _, _ = pool.select(6.0)
    while probe is not state:
        pool.succeed(probe, ticket, 6.0, 6.0)
        probe, ticket, _, _ = pool.select(6.0)
    pool.succeed(probe, ticket, 6.1, 6.0)
    assert state.circuit.state is poise.CircuitState.CLOSED
    assert heard.ramps == [("a", True)]
    assert pool.ramp_factor(state, 6.1) == pytest.approx(0.1)
    assert share_of(pool, "a", 7.0) < 0.15
    # The timer's next look finds no deadline left; the ramp still needs the time, so the
    # shell must keep passing it (before: the pool said it did not, every pick got 0.0, and
    # the ramp stayed at its floor for ever).
    assert pool.next_deadline() is None
    assert pool.needs_now
    assert share_of(pool, "a", 40.0) > 0.4  # past its window: a full share again
    assert heard.ramps == [("a", True), ("a", False)]
    assert not pool.needs_now  # nothing ramps, nothing is pending, nothing is timed


def test_slow_start_alone_never_refuses_a_call() -> None:
    pool, _ = pool_of([poise.Endpoint("a")], load=LoadPolicy(slow_start=poise.SlowStart(window=30.0)))
    pool.apply(0.0, added=[poise.Endpoint("b")])
    pool.apply(0.0, removed=["a"])
    for _ in range(50):
        state, ticket, started, _ = pool.select(1.0)
        assert state.endpoint.id == "b"
        pool.succeed(state, ticket, 1.0, started)


def test_an_endpoints_own_cap_is_enforced_without_any_balancer_knob() -> None:
    pool, _ = pool_of([poise.Endpoint("a")], load=LoadPolicy())
    pool.apply(1.0, added=[poise.Endpoint("b", metadata={"max_in_flight": 1})])
    picked = [pool.select(1.0)[0].endpoint.id for _ in range(4)]
    assert picked.count("b") == 1  # b is full after one; a (no cap) takes the rest
    control = pool.control(pool.members["a"])
    assert control is not None
    assert control.limit > 10**6  # unlimited
    pool.apply(2.0, updated=[poise.Endpoint("a", metadata={"max_in_flight": 3})])
    with pytest.raises(poise.Overloaded):
        pool.select(2.0)  # a has 3 in flight (its new cap), b 1
