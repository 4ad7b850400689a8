"""Selection policies on the pure pool: shares, smoothness, load awareness, hashing."""

from __future__ import annotations

import collections
import heapq
import math
import random
from collections.abc import Callable

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import poise_py as poise
from poise_py import CapacityOverflow, ConfigError
from poise_py._core._circuit import Ticket
from poise_py._core._pool import Pool
from poise_py._core._record import UNMEASURED, Member
from poise_py._core._weights import STRIDE_SCALE, PackedSchedule, Schedule, WeightBuckets, WeightClasses
from tests.support.circuits import record_of
from tests.support.clocks import FakeClock
from tests.support.routing import EVERY_POLICY, eject, make_pool, run, shares

WEIGHTS = {"a": 1, "b": 2, "c": 3, "d": 4}
WEIGHTED = [poise.Endpoint(i, weight=w) for i, w in WEIGHTS.items()]


def names(policy: poise.Policy) -> str:
    return type(policy).__name__


@pytest.mark.parametrize(
    ("policy", "keyed"),
    [
        (poise.WeightedRandom(), False),
        (poise.WeightedRoundRobin(), False),
        (poise.PowerOfTwoChoices(), False),
        (poise.ConsistentHash(), True),
    ],
    ids=["WeightedRandom", "WeightedRoundRobin", "PowerOfTwoChoices", "ConsistentHash"],
)
def test_weighted_policy_shares_are_within_two_percent_of_weights(policy: poise.Policy, keyed: bool) -> None:
    pool = make_pool(policy, WEIGHTED)
    counts = run(pool, 100_000, key=(lambda i: f"user-{i}") if keyed else None)
    total = sum(WEIGHTS.values())
    for endpoint_id, share in shares(counts).items():
        assert share == pytest.approx(WEIGHTS[endpoint_id] / total, abs=0.02), endpoint_id


@pytest.mark.parametrize("policy", [poise.RoundRobin(), poise.Random()], ids=names)
def test_unweighted_policies_share_evenly_and_ignore_weights(policy: poise.Policy) -> None:
    counts = run(make_pool(policy, WEIGHTED), 100_000)
    for share in shares(counts).values():
        assert share == pytest.approx(0.25, abs=0.02)


def test_p2c_with_equal_weights_shares_evenly_and_avoids_the_busiest_endpoint() -> None:
    pool = make_pool(poise.PowerOfTwoChoices(), [poise.Endpoint(i) for i in "abcd"])
    for share in shares(run(pool, 100_000)).values():
        assert share == pytest.approx(0.25, abs=0.02)
    for _ in range(3):  # hold three calls on "a"
        pool.select(0.0, exclude=["b", "c", "d"])
    assert pool.members["a"].inflight == 3
    assert "a" not in run(pool, 1000)  # any pair with "a" in it goes to the other


@pytest.mark.parametrize("policy", EVERY_POLICY, ids=names)
def test_the_same_seed_gives_the_same_picks(policy: poise.Policy) -> None:
    def sequence() -> list[str]:
        pool = make_pool(policy, [poise.Endpoint(f"e{i}", weight=1 + i % 3) for i in range(20)], seed=3)
        picks = []
        for i in range(300):
            state, ticket, now, _ = pool.select(0.0, f"k{i}")
            picks.append(state.endpoint.id)
            if i % 3:
                pool.succeed(state, ticket, 0.0, now)
        return picks

    assert sequence() == sequence()


@pytest.mark.parametrize("policy", EVERY_POLICY, ids=names)
def test_no_policy_picks_an_excluded_endpoint(policy: poise.Policy) -> None:
    pool = make_pool(policy, [poise.Endpoint(f"e{i}", weight=1 + i % 4) for i in range(8)])
    excluded = {"e0", "e3", "e5", "e6"}
    for i in range(500):
        state, ticket, now, _ = pool.select(0.0, f"k{i}", excluded)
        assert state.endpoint.id not in excluded
        pool.succeed(state, ticket, 0.0, now)


# -- smooth weighted round robin -------------------------------------------------------


def wrr_sequence(weights: list[int], n: int) -> list[int]:
    pool = make_pool(poise.WeightedRoundRobin(), [poise.Endpoint(str(i), weight=w) for i, w in enumerate(weights)])
    return [int(i) for i in run_order(pool, n)]


def run_order(pool: Pool, n: int) -> list[str]:
    order = []
    for _ in range(n):
        state, ticket, now, _ = pool.select(0.0)
        order.append(state.endpoint.id)
        pool.succeed(state, ticket, 0.0, now)
    return order


def longest_run(sequence: list[int], item: int) -> int:
    best = run_length = 0
    for x in sequence:
        run_length = run_length + 1 if x == item else 0
        best = max(best, run_length)
    return best


def test_smooth_wrr_interleaves_a_heavy_endpoint_instead_of_bursting() -> None:
    sequence = wrr_sequence([5, 1, 1], 70)
    # The heavy endpoint gets 5 of every 7 turns, but never more than 3 in a row
    # (the least possible: its 5 turns need 2 breaks per rotation).
    assert longest_run(sequence, 0) == 3
    for start in range(0, 70, 7):
        assert sorted(sequence[start : start + 7]) == [0, 0, 0, 0, 0, 1, 2]


@given(st.lists(st.integers(1, 20), min_size=2, max_size=8))
@settings(max_examples=60, deadline=None)
def test_smooth_wrr_is_exact_per_rotation_and_never_strays_two_from_its_share(weights: list[int]) -> None:
    total = sum(weights)
    sequence = wrr_sequence(weights, 3 * total)
    counts = [0] * len(weights)
    for t, i in enumerate(sequence, 1):
        counts[i] += 1
        for j, w in enumerate(weights):
            assert abs(counts[j] - t * w / total) < 2
        if t % total == 0:
            assert counts == [t // total * w for w in weights]


# -- load awareness on a fake clock ----------------------------------------------------


def simulate(policy: poise.Policy, *, slow: str, calls: int = 4000) -> dict[str, float]:
    """Arrivals every 2 ms; calls take 10 ms, or 100 ms on ``slow``. Share of picks per endpoint."""
    now = 0.0
    pool = Pool(poise.CircuitPolicy(), policy, random.Random(5))
    pool.apply(0.0, added=[poise.Endpoint(i) for i in ("a", "b", "c", "d")])
    finishing: list[tuple[float, int, Member, Ticket, float]] = []
    counts = dict.fromkeys(pool.members, 0)
    for n in range(calls):
        arrival = n * 0.002
        while finishing and finishing[0][0] <= arrival:
            now, _, state, ticket, started = heapq.heappop(finishing)
            pool.succeed(state, ticket, now, started)
        now = arrival
        state, ticket, started, _ = pool.select(now)
        counts[state.endpoint.id] += 1
        duration = 0.1 if state.endpoint.id == slow else 0.01
        heapq.heappush(finishing, (now + duration, n, state, ticket, started))
    return {k: v / calls for k, v in counts.items()}


@pytest.mark.parametrize("policy", [poise.PowerOfTwoChoices(), poise.PeakEwma()], ids=names)
def test_load_aware_policy_sends_less_to_a_slow_endpoint_than_round_robin(policy: poise.Policy) -> None:
    baseline = simulate(poise.RoundRobin(), slow="d")["d"]
    assert baseline == pytest.approx(0.25, abs=0.01)
    assert simulate(policy, slow="d")["d"] < baseline * 0.8


def test_peak_ewma_jumps_to_a_slow_observation_and_decays_towards_fast_ones() -> None:
    policy = poise.PeakEwma(decay=10.0)
    state = make_pool(policy, [poise.Endpoint("a")]).members["a"]
    assert state.ewma_at == UNMEASURED
    policy.observe(state, 0.05, now=0.0)
    policy.observe(state, 1.0, now=1.0)
    assert state.ewma == 1.0  # the peak, at once
    policy.observe(state, 0.05, now=11.0)
    assert state.ewma == pytest.approx(0.05 + 0.95 * math.exp(-1.0))


def test_peak_ewma_retries_a_slow_endpoint_once_its_estimate_has_decayed() -> None:
    policy = poise.PeakEwma(decay=1.0)
    pool = make_pool(policy, [poise.Endpoint("fast"), poise.Endpoint("slow")])
    fast, slow = pool.members["fast"], pool.members["slow"]
    policy.observe(fast, 0.01, 0.0)
    policy.observe(slow, 5.0, 0.0)
    assert {run_at(pool, 0.0) for _ in range(20)} == {"fast"}
    policy.observe(fast, 0.01, 30.0)  # meanwhile the slow estimate decayed below it
    assert "slow" in {run_at(pool, 30.0) for _ in range(20)}


def test_peak_ewma_feeds_on_every_completed_call_through_the_pool() -> None:
    now = 0.0
    pool = make_pool(poise.PeakEwma(), [poise.Endpoint("a")])
    state, ticket, started, _ = pool.select(now)
    now = 0.25
    pool.succeed(state, ticket, now, started)
    assert (state.ewma, state.ewma_at) == (0.25, 0.25)
    state, ticket, started, _ = pool.select(now)
    now = 1.25
    pool.complete(state, ticket, poise.Fault.SUSPECT, now, latency=now - started)
    assert (state.ewma, state.ewma_at) == (1.0, 1.25)  # a returned error is completed work


def run_at(pool: Pool, now: float) -> str:
    state, ticket, _, _ = pool.select(now)
    pool.cancel(state, ticket)
    return state.endpoint.id


# -- consistent hashing ----------------------------------------------------------------


def owners(pool: Pool, keys: range) -> dict[int, str]:
    found = {}
    for k in keys:
        state, ticket, _, _ = pool.select(0.0, f"key-{k}")
        pool.cancel(state, ticket)
        found[k] = state.endpoint.id
    return found


def test_consistent_hash_sends_a_key_to_the_same_endpoint_every_time() -> None:
    pool = make_pool(poise.ConsistentHash(table_size=4099), [poise.Endpoint(f"e{i}") for i in range(10)])
    first = owners(pool, range(500))
    assert owners(pool, range(500)) == first
    assert len(set(first.values())) == 10


@pytest.mark.parametrize("n", [5, 10, 20])
def test_consistent_hash_moves_at_most_one_nth_of_keys_when_an_endpoint_is_added(n: int) -> None:
    pool = make_pool(poise.ConsistentHash(), [poise.Endpoint(f"e{i}") for i in range(n)])
    keys = range(20_000)
    before = owners(pool, keys)
    pool.apply(0.0, added=[poise.Endpoint("new")])
    after = owners(pool, keys)
    moved = sum(before[k] != after[k] for k in keys) / len(keys)
    to_new = sum(after[k] == "new" for k in keys) / len(keys)
    assert moved <= 1 / n  # the ideal is 1 / (n + 1); Maglev adds a little churn
    assert to_new == pytest.approx(1 / (n + 1), abs=0.01)


def test_consistent_hash_moves_only_an_ejected_endpoints_keys_and_brings_them_back() -> None:
    pool = make_pool(poise.ConsistentHash(table_size=4099), [poise.Endpoint(f"e{i}") for i in range(6)])
    keys = range(2000)
    before = owners(pool, keys)
    eject(pool, "e2")
    during = owners(pool, keys)
    for k in keys:
        if before[k] == "e2":
            assert during[k] != "e2"
        else:
            assert during[k] == before[k]
    pool.reset_circuit(pool.members["e2"], 0.0)
    assert owners(pool, keys) == before


def test_consistent_hash_retry_goes_where_the_key_would_go_without_the_excluded_endpoint() -> None:
    pool = make_pool(poise.ConsistentHash(table_size=4099), [poise.Endpoint(f"e{i}") for i in range(6)])
    before = owners(pool, range(300))
    eject(pool, "e4")
    without = owners(pool, range(300))
    pool.reset_circuit(pool.members["e4"], 0.0)
    for k in range(300):
        if before[k] == "e4":
            state, ticket, _, _ = pool.select(0.0, f"key-{k}", exclude=["e4"])
            pool.cancel(state, ticket)
            assert state.endpoint.id == without[k]


def test_bounded_load_caps_a_hot_key_at_c_times_the_mean() -> None:
    pool = make_pool(
        poise.ConsistentHash(table_size=4099, balance_factor=1.25),
        [poise.Endpoint(f"e{i}") for i in range(4)],
    )
    held = []
    for _ in range(400):  # one hot key, every call still in flight
        state, ticket, _, _ = pool.select(0.0, "hot")
        held.append((state, ticket))
        in_flight = len(held)
        cap = math.ceil(1.25 * in_flight / 4)
        assert all(s.inflight <= cap for s in pool.members.values())
    assert {s.endpoint.id for s, _ in held} == set(pool.members)


def test_bounded_load_without_pressure_is_plain_consistent_hashing() -> None:
    eps = [poise.Endpoint(f"e{i}") for i in range(8)]
    plain = owners(make_pool(poise.ConsistentHash(table_size=4099), eps), range(1000))
    bounded = owners(make_pool(poise.ConsistentHash(table_size=4099, balance_factor=1.1), eps), range(1000))
    assert plain == bounded


def test_bounded_load_raises_capacity_overflow_when_the_arithmetic_cannot_hold() -> None:
    pool = make_pool(
        poise.ConsistentHash(table_size=101, balance_factor=1.0), [poise.Endpoint(f"e{i}") for i in range(3)]
    )
    scope = pool.router.tiers[0].local
    assert scope.totals
    for i in range(3):  # every endpoint busy, but a total that says nothing is in flight
        scope.candidates[i].inflight = 5
    scope.load_total = 0
    with pytest.raises(CapacityOverflow):
        scope.picker.pick(scope.candidates, scope.loads, "k")


def test_a_call_without_a_key_is_spread_at_random_under_consistent_hashing() -> None:
    counts = run(make_pool(poise.ConsistentHash(table_size=101), [poise.Endpoint(f"e{i}") for i in range(4)]), 4000)
    assert all(share == pytest.approx(0.25, abs=0.03) for share in shares(counts).values())


def test_every_process_builds_the_same_table_whatever_the_discovery_order() -> None:
    eps = [poise.Endpoint(f"e{i}", weight=1 + i % 3) for i in range(12)]
    one = owners(make_pool(poise.ConsistentHash(table_size=4099), eps, seed=1), range(400))
    other = owners(make_pool(poise.ConsistentHash(table_size=4099), list(reversed(eps)), seed=2), range(400))
    assert one == other


# -- structures and knobs ------------------------------------------------------------


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 2**32)), max_size=200), st.randoms())
@settings(max_examples=50, deadline=None)
def test_weight_buckets_hold_what_was_added_and_draw_only_held_states(
    ops: list[tuple[bool, int]], rnd: random.Random
) -> None:
    buckets = WeightBuckets()
    held: dict[Member, int] = {}
    for n, (grow, w) in enumerate(ops):
        if grow or not held:
            state = record_of(poise.Endpoint(f"e{n}", weight=w))
            buckets.add(state, w)
            held[state] = w
        else:
            state = list(held)[w % len(held)]
            buckets.remove(state, held.pop(state))
        assert buckets.total == sum(held.values())
        assert len(buckets) == len(held)
        contents = {s: w for states, weights, *_ in buckets.buckets() for s, w in zip(states, weights, strict=True)}
        assert contents == held
        for _, weights, _, top, below in buckets.buckets():
            assert top >= max(weights)
            assert below == sum(w < top for w in weights)
        if held:
            assert buckets.draw(rnd.random) in held


@given(
    st.lists(
        st.tuples(st.booleans(), st.lists(st.sampled_from([1, 2, 3, 5, 8]), min_size=1, max_size=40)),
        max_size=12,
    ),
    st.randoms(),
)
@settings(max_examples=60, deadline=None)
def test_weights_added_and_removed_many_at_once_are_held_as_one_at_a_time(
    batches: list[tuple[bool, list[int]]], rnd: random.Random
) -> None:
    # A large discovery update hands the weighted pickers its endpoints as one list: the
    # structures take them a bucket or a class at a time, and hold exactly what adding and
    # removing them one by one would.
    buckets = WeightBuckets()
    classes = WeightClasses()
    held: dict[Member, int] = {}
    n = 0
    for grow, weights in batches:
        if grow or not held:
            states = [record_of(poise.Endpoint(f"e{n + i}", weight=w)) for i, w in enumerate(weights)]
            n += len(weights)
            buckets.add_all(states, weights)
            classes.add_all(states, weights)
            held.update(zip(states, weights, strict=True))
        else:
            states = rnd.sample(list(held), min(len(held), len(weights)))
            gone = [held.pop(state) for state in states]
            buckets.remove_all(states, gone)
            classes.remove_all(states, gone)
        assert buckets.total == sum(held.values())
        contents = {s: w for states, ws, *_ in buckets.buckets() for s, w in zip(states, ws, strict=True)}
        assert contents == held
        for _, ws, total, top, below in buckets.buckets():
            assert total == sum(ws)
            assert top >= max(ws)
            assert below == sum(w < top for w in ws)
        assert sorted(map(id, classes.live_states())) == sorted(map(id, held))
        if held:
            assert buckets.draw(rnd.random) in held
            turns = collections.Counter(id(classes.next()) for _ in range(2 * sum(held.values())))
            assert set(turns) == {id(s) for s in held}  # every held endpoint takes its turns


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 64)), max_size=300))
@settings(max_examples=50, deadline=None)
def test_the_packed_schedule_picks_exactly_as_the_list_schedule(ops: list[tuple[int, int]]) -> None:
    packed = PackedSchedule()
    plain: Schedule[Member] = Schedule()
    held: list[Member] = []
    for n, (op, w) in enumerate(ops):
        stride = STRIDE_SCALE // w
        if op == 0 or not held:
            state = record_of(poise.Endpoint(f"e{n}", weight=w))
            packed.add(state, stride)
            plain.add(state, stride)
            held.append(state)
        elif op == 1:
            state = held.pop(w % len(held))
            packed.remove(state)
            plain.remove(state)
        else:
            entry = plain.head()
            assert packed.head() is entry[2]
            plain.advance(entry, stride)
            packed.advance(stride)
        assert sorted(map(id, packed.live_states())) == sorted(map(id, plain.live_states()))


def test_weighted_random_is_exact_across_widely_spread_weights() -> None:
    weights = {"a": 1, "b": 5, "c": 9, "d": 40, "e": 100, "f": 300}
    buckets = WeightBuckets()
    states = {k: record_of(poise.Endpoint(k, weight=w)) for k, w in weights.items()}
    for k, state in states.items():
        buckets.add(state, weights[k])
    unit = random.Random(11).random
    counts = dict.fromkeys(weights, 0)
    draws = 200_000
    for _ in range(draws):
        counts[buckets.draw(unit).endpoint.id] += 1
    total = sum(weights.values())
    for k, w in weights.items():
        assert counts[k] / draws == pytest.approx(w / total, abs=0.005), k


def test_smooth_wrr_with_many_endpoints_per_weight_is_exact_per_rotation() -> None:
    weights = [1] * 50 + [3] * 20 + [7] + [2] * 9
    total = sum(weights)
    sequence = wrr_sequence(weights, 3 * total)
    counts = [0] * len(weights)
    for t, i in enumerate(sequence, 1):
        counts[i] += 1
        for j, w in enumerate(weights):
            assert abs(counts[j] - t * w / total) < 2
        if t % total == 0:
            assert counts == [t // total * w for w in weights]


def test_smooth_wrr_keeps_weight_shares_while_endpoints_come_and_go() -> None:
    pool = make_pool(poise.WeightedRoundRobin(), [poise.Endpoint(f"e{i}", weight=1 + i % 3) for i in range(30)])
    run_order(pool, 1000)
    pool.apply(0.0, removed=[f"e{i}" for i in range(0, 30, 4)], added=[poise.Endpoint("x", weight=3)])
    live = {i: s.endpoint.weight for i, s in pool.members.items()}
    total = sum(live.values())
    counts = collections.Counter(run_order(pool, 100 * total))
    for endpoint_id, w in live.items():
        assert counts[endpoint_id] == pytest.approx(100 * w, abs=2), endpoint_id


@pytest.mark.parametrize(
    ("make", "knob"),
    [
        (lambda: poise.ConsistentHash(table_size=65536), "ConsistentHash.table_size"),
        (lambda: poise.ConsistentHash(table_size=5), "ConsistentHash.table_size"),
        (lambda: poise.ConsistentHash(balance_factor=0.9), "ConsistentHash.balance_factor"),
        (lambda: poise.ConsistentHash(balance_factor=math.nan), "ConsistentHash.balance_factor"),
        (lambda: poise.PowerOfTwoChoices(bias=-1.0), "PowerOfTwoChoices.bias"),
        (lambda: poise.PeakEwma(decay=0.0), "PeakEwma.decay"),
        (lambda: poise.PeakEwma(default_rtt=-1.0), "PeakEwma.default_rtt"),
    ],
)
def test_invalid_policy_knobs_raise_config_error_naming_the_knob(make: Callable[[], object], knob: str) -> None:
    with pytest.raises(ConfigError) as info:
        make()
    assert info.value.knob == knob


def test_a_weight_total_past_the_bound_is_refused_and_changes_nothing() -> None:
    pool = make_pool(
        poise.WeightedRandom(), [poise.Endpoint("a", weight=6)], routing=poise.Routing(max_total_weight=10)
    )
    with pytest.raises(ConfigError) as info:
        pool.apply(0.0, added=[poise.Endpoint("b", weight=5)])
    assert info.value.knob == "Endpoint.weight"
    assert isinstance(info.value, poise.WeightOverflow)
    assert isinstance(info.value, poise.DiscoveryError)
    assert (info.value.total, info.value.bound) == (11, 10)
    assert set(pool.members) == {"a"}
    pool.apply(0.0, added=[poise.Endpoint("b", weight=4)])  # exactly the bound is fine
    assert set(pool.members) == {"a", "b"}
    with pytest.raises(ConfigError):
        pool.apply(0.0, updated=[poise.Endpoint("a", weight=7)])
    assert pool.members["a"].endpoint.weight == 6


@pytest.mark.anyio
async def test_a_discovery_update_past_the_weight_bound_is_rejected_and_the_pool_kept() -> None:
    send, receive = anyio.create_memory_object_stream[poise.Update](10)
    lb = poise.LoadBalancer(receive, routing=poise.Routing(max_total_weight=10), clock=FakeClock())
    async with lb, send, receive:
        await send.send(poise.Snapshot(1, [poise.Endpoint("a", weight=6)]))
        await send.send(poise.Snapshot(2, [poise.Endpoint("a", weight=6), poise.Endpoint("b", weight=5)]))
        await send.send(poise.Delta(3, added=[poise.Endpoint("c", weight=4)]))
        await anyio.wait_all_tasks_blocked()
        assert lb.discovery_rejected == 1
        assert [e.id for e in lb.snapshot().endpoints] == ["a", "c"]


def test_a_latency_measuring_pool_records_a_closed_success_in_place_and_asks_for_the_time() -> None:
    pool = make_pool(poise.PeakEwma(), [poise.Endpoint("a")])
    state = pool.members["a"]
    assert state.success_needs_now  # the exit reads the clock for every success, to feed the policy
    epoch = state.circuit.epoch
    for i in range(3):
        selected, ticket, started, _ = pool.select(float(i))
        pool.succeed(selected, ticket, float(i) + 0.5, started)
    assert state.ewma_at == 2.5
    assert (state.circuit.epoch, state.successes, state.circuit.window_counts(3.0)[0]) == (epoch, 3, 3)
